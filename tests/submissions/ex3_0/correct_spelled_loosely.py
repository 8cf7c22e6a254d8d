ANSWERS = {"zero1_gb": "70 GB", "running_stats": " B ", "syncbn_numbers": "129.0", "fsdp_gathers": "12",
           "early_optimizer": "C", "consolidate": "(a)"}
