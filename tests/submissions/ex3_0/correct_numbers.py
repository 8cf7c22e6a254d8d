ANSWERS = {"zero1_gb": 70, "running_stats": "b", "syncbn_numbers": 129, "fsdp_gathers": 12, "early_optimizer": "c",
           "consolidate": "a"}
