import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer


def make_optimizer(model, lr):
    # YOUR CODE HERE
    raise NotImplementedError()


def save_checkpoint(model, optimizer, path):
    # YOUR CODE HERE
    raise NotImplementedError()
