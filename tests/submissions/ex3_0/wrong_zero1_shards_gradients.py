# believes ZeRO stage 1 shards the gradients as well as the optimizer state (that is stage 2)
ANSWERS = {"zero1_gb": 49, "running_stats": "b", "syncbn_numbers": 129, "fsdp_gathers": 12, "early_optimizer": "c",
           "consolidate": "a"}
