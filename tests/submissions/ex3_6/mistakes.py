"""Exercise 3.6's negative controls that are one edit of correct_loops.py (see ../edits.py)."""

BASE = "correct_loops.py"

MISTAKES = {
    "wrong_adam_counted_once": (
        "counts one of Adam's two moments",
        [('"optimizer": 2 * FLOAT * share}', '"optimizer": FLOAT * share}'),
         ('"optimizer": 2 * FLOAT * n}', '"optimizer": FLOAT * n}')]),
    "wrong_zero1_even_split": (
        "splits ZeRO-1's optimizer state evenly, as if tensors could be cut",
        [("""        owned = [0] * world_size
        for size in sorted(sizes, reverse=True):                   # whole tensors, largest first ...
            rank = owned.index(min(owned))                         # ... to the rank with the fewest so far
            owned[rank] += size
""", "        owned = [sum(sizes) / world_size] * world_size\n")]),
    "wrong_zero1_shards_gradients": (
        "shards the gradients under ZeRO-1, as stage 2 would",
        [('    return [{"parameters": FLOAT * sum(sizes), "gradients": FLOAT * sum(sizes), "optimizer": 2 * FLOAT * n}',
          '    return [{"parameters": FLOAT * sum(sizes), "optimizer": 2 * FLOAT * n,\n'
          '             "gradients": FLOAT * (n if scheme == "ZeRO-1" else sum(sizes))}')]),
    "wrong_fsdp_full_gradients": (
        "keeps whole gradients on every rank under FSDP",
        [('"gradients": FLOAT * share, "optimizer": 2 * FLOAT * share}',
          '"gradients": FLOAT * sum(sizes), "optimizer": 2 * FLOAT * share}')]),
    "wrong_fsdp_ignores_rows": (
        "cuts every tensor under FSDP into W equal parts, rows or not",
        [("""                chunk = math.ceil(shape[0] / world_size)           # rows per rank, the last ones may get fewer
                rows = max(0, min(chunk, shape[0] - rank * chunk))
                share += rows * math.prod(shape[1:])
""", "                share += math.prod(shape) / world_size\n")]),
}
