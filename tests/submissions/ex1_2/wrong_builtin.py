import torch
import torch.distributed as dist


def ring_all_reduce(tensor):
    # reduce-scatter by hand around the ring, then the built-in all_gather for the second half
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        return
    size = -(-len(tensor) // world)
    padded = torch.zeros(size * world)
    padded[:len(tensor)] = tensor
    chunks = list(padded.split(size))
    for step in range(world - 1):
        out, into = (rank - step) % world, (rank - step - 1) % world
        received = torch.empty(size)
        request = dist.isend(chunks[out].clone(), (rank + 1) % world)
        dist.recv(received, (rank - 1) % world)
        request.wait()
        chunks[into] += received
    gathered = [torch.empty(size) for _ in range(world)]
    dist.all_gather(gathered, chunks[(rank + 1) % world])
    tensor.copy_(_order(gathered, world)[:len(tensor)])


def _order(gathered, world):
    # rank r finished chunk (r + 1) % W
    out = [None] * world
    for r, g in enumerate(gathered):
        out[(r + 1) % world] = g
    return torch.cat(out)
