import torch
import torch.distributed as dist


def broadcast_parameters(model):
    for p in model.parameters():
        dist.broadcast(p.data, src=0)


def average_gradients(model):
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.requires_grad:
            if p.grad is None:  # unused by this rank's forward: it contributes zeros
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world_size
