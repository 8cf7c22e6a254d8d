"""Exercise 2.7's negative controls that are one edit of correct_schedule.py (see ../edits.py)."""

BASE = "correct_schedule.py"

MISTAKES = {
    "wrong_zero_everywhere": (
        "returns 0.0 for every schedule: nothing exposed, ever",
        [("def exposed_communication(", "def exposed_communication(*args, **kwargs):\n    return 0.0\n\n\ndef _unused(")]),
    "wrong_all_reduces_at_once": (
        "lets every bucket's all-reduce start as soon as it is ready, as if they ran side by side",
        [("        start = max(max(ready[i] for i in bucket), network_free)\n",
          "        start = max(ready[i] for i in bucket)\n        network_free = max(network_free, start + alpha_s + "
          "beta_s * sum(numels[i] for i in bucket))\n        continue\n")]),
    "wrong_buckets_in_forward_order": (
        "fills the buckets from the first parameter on",
        [("    for i in reversed(range(n)):\n        if bucket", "    for i in range(n):\n        if bucket"),
         ("    buckets.append(bucket)\n    network_free", "    buckets.append(bucket)\n    buckets.sort(key=min, reverse=True)\n"
          "    network_free")]),
    "wrong_from_the_start_of_backward": (
        "returns when the last all-reduce ends, counted from the start of backward",
        [("    return network_free - end_of_backward\n", "    return network_free\n")]),
    "wrong_one_latency_per_step": (
        "charges the latency alpha once per step, not once per bucket",
        [("        network_free = start + alpha_s + beta_s", "        network_free = start + beta_s"),
         ("    return network_free - end_of_backward\n", "    return network_free + alpha_s - end_of_backward\n")]),
    "wrong_ready_in_forward_order": (
        "has backward produce the first parameter's gradient first",
        [("    for i in reversed(range(n)):  # backward", "    for i in range(n):  # backward")]),
}
