import torch
import torch.distributed as dist


def ring_all_reduce(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = [len(tensor) // world + (1 if i < len(tensor) % world else 0) for i in range(world)]
    starts = [sum(sizes[:i]) for i in range(world)]

    def chunk(i):
        return tensor[starts[i]:starts[i] + sizes[i]]

    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # reduce-scatter: after W-1 steps, rank r holds the full sum of chunk (r + 1) % W
    for step in range(world - 1):
        out, into = (rank - step) % world, (rank - step - 1) % world
        received = torch.empty(sizes[into])
        request = dist.isend(chunk(out).clone(), nxt)
        dist.recv(received, prv)
        request.wait()
        chunk(into).add_(received)
    # all-gather: pass the finished chunks around the ring
    for step in range(world - 1):
        out, into = (rank + 1 - step) % world, (rank - step) % world
        received = torch.empty(sizes[into])
        request = dist.isend(chunk(out).clone(), nxt)
        dist.recv(received, prv)
        request.wait()
        chunk(into).copy_(received)
    return tensor
