import heapq
from functools import reduce
from operator import mul


def numel(shape):
    return reduce(mul, shape, 1)


def zero1_counts(sizes, world_size):
    heap = [(0, rank) for rank in range(world_size)]  # (numbers held, rank): the lowest rank first on a tie
    held = [0] * world_size
    for size in sorted(sizes, reverse=True):
        total, rank = heapq.heappop(heap)
        held[rank] = total + size
        heapq.heappush(heap, (held[rank], rank))
    return held


def fsdp_share(shape, world_size, rank):
    rows = shape[0]
    chunk = -(-rows // world_size)
    start = min(rows, rank * chunk)
    return (min(rows, start + chunk) - start) * numel(shape[1:])


def predict(scheme, shapes, world_size):
    total = sum(numel(s) for s in shapes)
    result = []
    for rank in range(world_size):
        if scheme == "DDP":
            p, g, o = total, total, 2 * total
        elif scheme == "ZeRO-1":
            p, g, o = total, total, 2 * zero1_counts([numel(s) for s in shapes], world_size)[rank]
        else:
            share = sum(fsdp_share(s, world_size, rank) for s in shapes)
            p, g, o = share, share, 2 * share
        result.append({"parameters": 4 * p, "gradients": 4 * g, "optimizer": 4 * o})
    return result
