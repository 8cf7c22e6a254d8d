ANSWERS = {"sync": "b", "processes": "c", "set_epoch": "a", "global_batch": 32, "save": "d", "backend": "gloo"}
