import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_reduce


def sync_batch_norm(x, running_mean, running_var, weight, bias, momentum, eps):
    """Batch norm in training mode over every rank's batch; updates the running statistics in place."""
    channels = x.shape[1]
    dims = [0] + list(range(2, x.dim()))              # every dimension but the channels
    count = torch.full((1,), x.numel() // channels, dtype=x.dtype)
    stats = torch.cat([x.sum(dims), (x * x).sum(dims), count])
    stats = all_reduce(stats)                         # one call; autograd passes through it
    total, squares, n = stats[:channels], stats[channels:2 * channels], stats[-1]
    mean = total / n
    var = squares / n - mean ** 2                     # biased: what batch norm normalizes with
    with torch.no_grad():
        running_mean.mul_(1 - momentum).add_(momentum * mean)
        running_var.mul_(1 - momentum).add_(momentum * var * n / (n - 1))
    shape = [1, channels] + [1] * (x.dim() - 2)
    return (x - mean.view(shape)) / torch.sqrt(var.view(shape) + eps) * weight.view(shape) + bias.view(shape)
