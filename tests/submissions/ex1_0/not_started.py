ANSWERS = {
    "adam_bytes": None,
    "skipped_collective": None,
    "ring_sent": None,
    "naive_sent": None,
    "bubble": None,
    "tp_allreduces": None,
}
