import torch


def _ring(n, w):
    """What each rank sends in a ring all-reduce of n floats cut with tensor_split."""
    if w == 1:
        return [0] * w
    chunks = [len(c) for c in torch.tensor_split(torch.arange(n), w)]
    return [sum(chunks[(r - s) % w] + chunks[(r + 1 - s) % w] for s in range(w - 1)) for r in range(w)]


def per_rank_costs(scheme, blocks, d, h, world_size, rows):
    w = world_size
    ranks = []
    for r in range(w):
        if scheme == "data":
            shapes = [(d * h, h, h * d, d)] * blocks
            sends = _ring(blocks * (2 * d * h + h + d), w)[r]
        elif scheme == "pipeline":
            mine = len(torch.tensor_split(torch.arange(blocks), w)[r])
            shapes = [(d * h, h, h * d, d)] * mine
            sends = rows * d * ((r < w - 1) + (r > 0))
        else:
            shapes = [(d * h // w, h // w, h // w * d, d)] * blocks
            sends = 2 * blocks * _ring(rows * d, w)[r]
        count = sum(sum(s) for s in shapes)
        ranks.append({"parameters": 4 * count, "gradients": 4 * count, "optimizer": 8 * count, "sent": 4 * sends})
    return {k: max(r[k] for r in ranks) for k in ranks[0]}
