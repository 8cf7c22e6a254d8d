ANSWERS = {"rank_on_node": 4, "restart": "b", "local_rank_flag": "a", "resume_epoch": 6, "atomic": "c",
           "rdzv_id": "d"}
