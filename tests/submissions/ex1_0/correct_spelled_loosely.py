ANSWERS = {"adam_bytes": "16 bytes", "skipped_collective": " B ", "ring_sent": "150 MB", "naive_sent": "300.0",
           "bubble": "43%", "tp_allreduces": "2"}
