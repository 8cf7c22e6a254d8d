import torch.distributed as dist


def broadcast_parameters(model):
    for p in model.parameters():
        dist.broadcast(p.data, src=0)


def average_gradients(model):
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world_size
