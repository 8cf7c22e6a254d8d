ANSWERS = {"rank_on_node": "4.0", "restart": " B", "local_rank_flag": "(a)", "resume_epoch": "6", "atomic": "C ",
           "rdzv_id": "D"}
