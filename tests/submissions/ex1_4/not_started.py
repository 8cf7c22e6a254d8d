import torch
import torch.distributed as dist
import torch.nn.functional as F


class CopyToTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        # YOUR CODE HERE
        raise NotImplementedError()

    @staticmethod
    def backward(ctx, grad):
        # YOUR CODE HERE
        raise NotImplementedError()


def shard_weights(A, B, rank, world_size):
    # YOUR CODE HERE
    raise NotImplementedError()


def tensor_parallel_mlp(x, a, b):
    # YOUR CODE HERE
    raise NotImplementedError()
