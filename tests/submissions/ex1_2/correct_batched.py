import torch
import torch.distributed as dist


def ring_all_reduce(tensor):
    # every step posts its send and its receive together with batch_isend_irecv
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = torch.tensor_split(tensor, world)
    right, left = (rank + 1) % world, (rank - 1) % world
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(world - 1):
            shift = step if phase == "reduce-scatter" else step - 1
            out, into = (rank - shift) % world, (rank - shift - 1) % world
            incoming = torch.empty_like(chunks[into])
            requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, chunks[out].clone(), right),
                                               dist.P2POp(dist.irecv, incoming, left)])
            for request in requests:
                request.wait()
            if phase == "reduce-scatter":
                chunks[into].add_(incoming)
            else:
                chunks[into].copy_(incoming)
