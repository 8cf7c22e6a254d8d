import torch
import torch.distributed as dist


def ring_all_reduce(tensor):
    # YOUR CODE HERE
    raise NotImplementedError()
