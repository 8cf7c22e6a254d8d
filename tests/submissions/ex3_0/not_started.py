ANSWERS = {
    "zero1_gb": None,
    "running_stats": None,
    "syncbn_numbers": None,
    "fsdp_gathers": None,
    "early_optimizer": None,
    "consolidate": None,
}
