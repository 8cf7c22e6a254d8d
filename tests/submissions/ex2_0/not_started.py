ANSWERS = {"sync": None, "processes": None, "set_epoch": None, "global_batch": None, "save": None, "backend": None}
