ANSWERS = {
    "sync": "B ",
    "processes": "C",
    "set_epoch": "a",
    "global_batch": "32",
    "save": "D",
    "backend": "Gloo",
}
