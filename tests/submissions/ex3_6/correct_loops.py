import math

FLOAT = 4  # bytes per float32 number


def predict(scheme, shapes, world_size):
    """Bytes of parameters, gradients and Adam's two moments on each rank, in rank order."""
    sizes = [math.prod(shape) for shape in shapes]
    if scheme == "FSDP":
        ranks = []
        for rank in range(world_size):
            share = 0
            for shape in shapes:
                chunk = math.ceil(shape[0] / world_size)           # rows per rank, the last ones may get fewer
                rows = max(0, min(chunk, shape[0] - rank * chunk))
                share += rows * math.prod(shape[1:])
            ranks.append({"parameters": FLOAT * share, "gradients": FLOAT * share, "optimizer": 2 * FLOAT * share})
        return ranks
    owned = [sum(sizes)] * world_size                              # DDP: every rank holds Adam for everything
    if scheme == "ZeRO-1":
        owned = [0] * world_size
        for size in sorted(sizes, reverse=True):                   # whole tensors, largest first ...
            rank = owned.index(min(owned))                         # ... to the rank with the fewest so far
            owned[rank] += size
    return [{"parameters": FLOAT * sum(sizes), "gradients": FLOAT * sum(sizes), "optimizer": 2 * FLOAT * n}
            for n in owned]
