import torch
import torch.distributed as dist


def ring_all_reduce(tensor):
    """Sum `tensor` over all ranks, in place: reduce-scatter, then all-gather, around a ring."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        return
    chunks = list(torch.tensor_split(tensor, world))  # views: writing them writes the tensor
    right, left = (rank + 1) % world, (rank - 1) % world
    buffer = torch.empty_like(chunks[0])
    for step in range(2 * (world - 1)):
        # reduce-scatter for W-1 steps, then all-gather: rank r ends the first half owning chunk r + 1
        gather_step = step - (world - 1)
        send_index = (rank - step) % world if gather_step < 0 else (rank + 1 - gather_step) % world
        recv_index = (send_index - 1) % world
        incoming = buffer[:chunks[recv_index].numel()]
        # even ranks send first, odd ranks receive first: no cycle of blocked sends
        if rank % 2 == 0:
            dist.send(chunks[send_index].contiguous(), right)
            dist.recv(incoming, left)
        else:
            dist.recv(incoming, left)
            dist.send(chunks[send_index].contiguous(), right)
        if step < world - 1:
            chunks[recv_index] += incoming
        else:
            chunks[recv_index].copy_(incoming)
