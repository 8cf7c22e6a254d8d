"""A stand-in for ``nn.SyncBatchNorm`` that also trains on CPUs.

PyTorch's ``nn.SyncBatchNorm`` trains only on GPUs (and a few other accelerators): on CPU
tensors its forward pass raises a ValueError, and DDP refuses to wrap it in a CPU model. The
course runs on CPUs too, so it ships ``CpuSyncBatchNorm``, a batch norm layer that computes
what ``nn.SyncBatchNorm`` computes, over gloo: per channel, the sum, the sum of squares and the
count of every rank's values in one all-reduce that autograd passes through, then batch norm
with the job's mean and (biased) variance, and running statistics updated with the unbiased
variance. ``convert_sync_batchnorm`` uses PyTorch's own class wherever it works (a model on a
GPU, or a process group on nccl) and the stand-in only where it does not.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm


class CpuSyncBatchNorm(_BatchNorm):
    """What nn.SyncBatchNorm computes, on CPU tensors over gloo: the course's stand-in."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if not self.training or not dist.is_available() or not dist.is_initialized():
            return super().forward(input)
        channels = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        # The statistics in float64: var = E[x^2] - E[x]^2 loses digits in float32 when the mean is large.
        count = torch.full((1,), input.numel() // channels, dtype=torch.float64)
        from torch.distributed.nn.functional import all_reduce

        group = self.process_group or dist.group.WORLD
        with warnings.catch_warnings():  # deprecated in 2.13 (the functional collectives replace it): silenced
            warnings.simplefilter("ignore", FutureWarning)
            wide = input.double()
            stats = all_reduce(torch.cat([wide.sum(dims), (wide * wide).sum(dims), count]), group=group)
        total, squares, n = stats[:channels], stats[channels:2 * channels], stats[-1]
        mean = total / n
        var = (squares / n - mean * mean).to(input.dtype)
        mean = mean.to(input.dtype)
        if self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach(), n.item())
        shape = [1, channels] + [1] * (input.dim() - 2)
        out = (input - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, var: torch.Tensor, n: float):
        self.num_batches_tracked.add_(1)
        momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        unbiased = var * n / max(n - 1, 1)
        self.running_mean.mul_(1 - momentum).add_(momentum * mean)
        self.running_var.mul_(1 - momentum).add_(momentum * unbiased)

    def extra_repr(self) -> str:
        return super().extra_repr() + ", the course's CPU stand-in for nn.SyncBatchNorm"


def convert_sync_batchnorm(module: nn.Module, process_group=None) -> nn.Module:
    """Every BatchNorm layer in `module` replaced by a synchronized one, as
    ``nn.SyncBatchNorm.convert_sync_batchnorm`` does, sharing the parameters and buffers.

    Call it before wrapping the model in DDP, after ``init_process_group``. The layers are
    PyTorch's ``nn.SyncBatchNorm`` when the model is on a GPU or the process group uses nccl, and
    the course's ``CpuSyncBatchNorm`` otherwise (a CPU model on gloo).
    """
    on_gpu = any(t.is_cuda for t in (*module.parameters(), *module.buffers())) or (
        dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl")
    if on_gpu:
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
    return _to_stand_in(module, process_group)


def _to_stand_in(module: nn.Module, process_group) -> nn.Module:
    if isinstance(module, _BatchNorm) and not isinstance(module, nn.SyncBatchNorm):
        converted = CpuSyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                     module.track_running_stats, process_group)
        if module.affine:
            with torch.no_grad():
                converted.weight = module.weight
                converted.bias = module.bias
        converted.running_mean = module.running_mean
        converted.running_var = module.running_var
        converted.num_batches_tracked = module.num_batches_tracked
        converted.training = module.training
        return converted
    for name, child in module.named_children():
        module.add_module(name, _to_stand_in(child, process_group))
    return module
