import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters


def broadcast_parameters(model):
    # one message for the whole model: flatten, broadcast, copy back
    with torch.no_grad():
        flat = parameters_to_vector(model.parameters())
        dist.broadcast(flat, src=0)
        vector_to_parameters(flat, model.parameters())


def average_gradients(model):
    # one all-reduce over a bucket of every gradient, as DDP does
    for p in model.parameters():  # a gradient no forward on this rank reached counts as zero
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    bucket = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(bucket)
    bucket /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(bucket[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
