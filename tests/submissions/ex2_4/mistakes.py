"""Exercise 2.4's negative controls that are one edit of correct_windows.py (see ../edits.py)."""

BASE = "correct_windows.py"
INNER = "                (F.cross_entropy(model(x), y) / len(window)).backward()\n"
LAST = "        x, y = window[-1]\n        (F.cross_entropy(model(x), y) / len(window)).backward()\n"

MISTAKES = {
    "wrong_unscaled_loss": (
        "forgets to divide the losses: each window's gradient is a sum, not a mean",
        [(INNER, INNER.replace(" / len(window)", "")), (LAST, LAST.replace(" / len(window)", ""))]),
    "wrong_divides_by_accum_steps": (
        "divides by accum_steps even in the short last window, whose gradient is then too small",
        [(INNER, INNER.replace("len(window)", "accum_steps")), (LAST, LAST.replace("len(window)", "accum_steps"))]),
    "wrong_drops_short_window": (
        "steps only on full windows: the micro-batches of a short last window are never learned from",
        [("        window = micro_batches[start:start + accum_steps]\n",
          "        window = micro_batches[start:start + accum_steps]\n"
          "        if len(window) < accum_steps:\n            break\n")]),
    "wrong_no_no_sync": (
        "never uses no_sync: every backward all-reduces the gradients",
        [("        with model.no_sync():\n", "        if True:  # no no_sync\n")]),
    "wrong_always_no_sync": (
        "runs the window's last backward inside no_sync too: the gradients are never all-reduced",
        [(LAST, LAST.replace("        (F.", "        with model.no_sync():\n            (F."))]),
    "wrong_steps_every_micro_batch": (
        "ignores accum_steps: one optimizer step after every micro-batch",
        [("range(0, len(micro_batches), accum_steps)", "range(0, len(micro_batches))"),
         ("micro_batches[start:start + accum_steps]", "micro_batches[start:start + 1]")]),
}
