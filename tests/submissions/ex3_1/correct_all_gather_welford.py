import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_gather


def sync_batch_norm(x, running_mean, running_var, weight, bias, momentum, eps):
    """Each rank's mean, sum of squared deviations and count, gathered once and combined (Chan's rule):
    what nn.SyncBatchNorm does, and safe when the mean is large next to the spread."""
    channels = x.shape[1]
    values = x.transpose(0, 1).reshape(channels, -1)            # (C, n) for this rank
    n = values.shape[1]
    mean = values.mean(1)
    m2 = ((values - mean[:, None]) ** 2).sum(1)
    mine = torch.cat([mean, m2, torch.full((1,), float(n), dtype=x.dtype)])
    every = torch.stack(all_gather(mine))                       # (W, 2C + 1), differentiable
    means, m2s, counts = every[:, :channels], every[:, channels:2 * channels], every[:, -1:]
    total = counts.sum()
    mean = (means * counts).sum(0) / total
    var = (m2s + counts * (means - mean) ** 2).sum(0) / total   # biased
    with torch.no_grad():
        running_mean.mul_(1 - momentum).add_(momentum * mean)
        running_var.mul_(1 - momentum).add_(momentum * var * total / (total - 1))
    shape = [1, channels] + [1] * (x.dim() - 2)
    return (x - mean.view(shape)) / torch.sqrt(var.view(shape) + eps) * weight.view(shape) + bias.view(shape)
