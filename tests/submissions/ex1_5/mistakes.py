"""Exercise 1.5's negative controls that are one edit of correct_counted.py (see ../edits.py)."""

BASE = "correct_counted.py"

MISTAKES = {
    "wrong_forgets_the_optimizer": (
        "counts parameters and gradients but no optimizer state",
        [('"optimizer": 2 * memory', '"optimizer": 0')]),
    "wrong_one_moment": (
        "counts one Adam moment per parameter",
        [('"optimizer": 2 * memory', '"optimizer": memory')]),
    "wrong_pipeline_even_split": (
        "gives every stage blocks / W blocks, as if W divided them",
        [("        params = math.ceil(blocks / w) * block    # the largest stage\n",
          "        params = blocks / w * block\n")]),
    "wrong_tensor_splits_every_bias": (
        "splits the row-parallel Linear's bias too, which every rank holds whole",
        [("        params = blocks * (2 * d * h // w + h // w + d)\n", "        params = blocks * (2 * d * h + h + d) / w\n")]),
    "wrong_data_sends_everything_to_rank0": (
        "counts the traffic of gathering every gradient on rank 0",
        [("        sent = ring * blocks * block * float_bytes\n", "        sent = (w - 1) * blocks * block * float_bytes\n")]),
    "wrong_pipeline_one_direction": (
        "counts only the activations sent forward, not the gradients sent back",
        [("        directions = 0 if w == 1 else (1 if w == 2 else 2)\n", "        directions = 0 if w == 1 else 1\n")]),
    "wrong_tensor_forward_only": (
        "counts the forward all-reduce of each block but not the backward one",
        [("        sent = blocks * 2 * ring * rows * d * float_bytes\n", "        sent = blocks * ring * rows * d * float_bytes\n")]),
    "wrong_forgets_the_biases": (
        "counts the two weights of a block but neither bias, and sends the gradients it counted",
        [("    block = 2 * d * h + h + d                      # Linear(d, h) and Linear(h, d), with biases\n",
          "    block = 2 * d * h\n"),
         ("        params = blocks * (2 * d * h // w + h // w + d)\n", "        params = blocks * 2 * d * h // w\n"),
         ("        sent = ring * blocks * block * float_bytes\n", "        sent = ring * params * float_bytes\n")]),
    "wrong_ring_reduce_scatter_only": (
        "counts a ring all-reduce as its reduce-scatter alone, (W-1)/W of the tensor, for data and tensor alike",
        [("    ring = 2 * (w - 1) / w                         # a ring all-reduce sends this share of the tensor\n",
          "    ring = (w - 1) / w\n")]),
}
