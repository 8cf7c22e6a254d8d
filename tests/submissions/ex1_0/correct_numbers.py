ANSWERS = {"adam_bytes": 16, "skipped_collective": "b", "ring_sent": 150, "naive_sent": 300, "bubble": 3 / 7,
           "tp_allreduces": 2}
