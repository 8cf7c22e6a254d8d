# believes DDP broadcasts the weights after every step, and that the batch is per job
ANSWERS = {"sync": "a", "processes": "c", "set_epoch": "a", "global_batch": 8, "save": "d", "backend": "gloo"}
