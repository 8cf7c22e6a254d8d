ANSWERS = {
    "rank_on_node": None,
    "restart": None,
    "local_rank_flag": None,
    "resume_epoch": None,
    "atomic": None,
    "rdzv_id": None,
}
