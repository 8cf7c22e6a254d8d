import torch
import torch.distributed as dist


def sync_batch_norm(x, running_mean, running_var, weight, bias, momentum, eps):
    # YOUR CODE HERE
    raise NotImplementedError()
