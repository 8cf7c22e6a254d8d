# resumes at the number of restarts, not at the epochs the snapshot says were completed
ANSWERS = {"rank_on_node": 4, "restart": "b", "local_rank_flag": "a", "resume_epoch": 2, "atomic": "c",
           "rdzv_id": "d"}
