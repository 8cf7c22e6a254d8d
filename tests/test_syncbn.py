"""The course's CPU stand-in for nn.SyncBatchNorm computes what PyTorch's computes: batch norm over
every rank's batch, forward, backward and running statistics."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ddpcourse import convert_sync_batchnorm
from ddpcourse.processes import launch

SIZES = [1, 4, 3]  # samples on each rank: one rank with a single sample


def _batches():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(n, 5, 2, generator=g) * (1 + r) + r for r, n in enumerate(SIZES)]


def _synchronized(rank: int, world_size: int):
    layer = convert_sync_batchnorm(nn.Sequential(nn.BatchNorm1d(5)))[0]
    layer.weight.data.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(1))
    x = _batches()[rank].requires_grad_()
    out = layer(x)
    (out * torch.arange(x.numel()).view_as(x)).sum().backward()
    return {"type": type(layer).__name__, "out": out.detach(), "grad": x.grad,
            "running_mean": layer.running_mean, "running_var": layer.running_var}


def test_the_stand_in_equals_batch_norm_over_the_global_batch():
    got = launch(_synchronized, world_size=len(SIZES))
    whole = torch.cat(_batches()).requires_grad_()
    layer = nn.BatchNorm1d(5)
    layer.weight.data.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(1))
    weighting = torch.cat([torch.arange(x.numel()).view_as(x) for x in _batches()])
    out = layer(whole)
    (out * weighting).sum().backward()
    outs, grads = out.detach().split(SIZES), whole.grad.split(SIZES)
    for rank, result in enumerate(got):
        assert result["type"] == "CpuSyncBatchNorm"
        assert torch.allclose(result["out"], outs[rank], atol=1e-5)
        assert torch.allclose(result["grad"], grads[rank], atol=1e-4)
        assert torch.allclose(result["running_mean"], layer.running_mean, atol=1e-6)
        assert torch.allclose(result["running_var"], layer.running_var, atol=1e-6)


def test_outside_a_process_group_it_is_plain_batch_norm():
    x = torch.randn(6, 5)
    plain = nn.BatchNorm1d(5)
    converted = convert_sync_batchnorm(nn.Sequential(nn.BatchNorm1d(5)))
    assert torch.allclose(converted(x), F.batch_norm(x, None, None, training=True), atol=1e-6)
    assert torch.allclose(converted(x), plain(x), atol=1e-6)

