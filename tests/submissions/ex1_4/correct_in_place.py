import torch
import torch.distributed as dist
import torch.nn.functional as F


class Identity_AllReduceBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        total = grad_output.contiguous().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total


class AllReduce_IdentityBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        ctx.mark_dirty(y)
        dist.all_reduce(y)  # in place: the matmul that made y saved its inputs, not y
        return y

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


def shard_weights(A, B, rank, world_size):
    return A.chunk(world_size, dim=1)[rank].clone(), B.chunk(world_size, dim=0)[rank].clone()


def tensor_parallel_mlp(x, a, b):
    hidden = F.gelu(torch.matmul(Identity_AllReduceBackward.apply(x), a))
    return AllReduce_IdentityBackward.apply(torch.matmul(hidden, b))
