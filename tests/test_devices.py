"""pick() gives each process a GPU of its own, or the CPU for everyone; no GPU needed to test it."""

import pytest
import torch

from ddpcourse import devices
from ddpcourse.devices import pick


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_no_gpu_means_gloo_on_cpu(world_size):
    for local_rank in range(world_size):
        assert pick(local_rank, world_size, gpu_count=0) == ("gloo", torch.device("cpu"))


def test_one_gpu_serves_one_process_only():
    assert pick(0, 1, gpu_count=1) == ("nccl", torch.device("cuda", 0))
    # two processes cannot each own the one GPU: both fall back to the CPU
    assert [pick(r, 2, gpu_count=1) for r in range(2)] == [("gloo", torch.device("cpu"))] * 2


def test_many_gpus_give_each_local_rank_its_own():
    assert [pick(r, 4, gpu_count=8) for r in range(4)] == [("nccl", torch.device("cuda", r)) for r in range(4)]
    assert [pick(r, 8, gpu_count=8)[1].index for r in range(8)] == list(range(8))


def test_fewer_gpus_than_processes_means_cpu():
    assert pick(3, 4, gpu_count=3) == ("gloo", torch.device("cpu"))


def test_counts_the_gpus_of_this_machine_by_default(monkeypatch):
    monkeypatch.setattr(devices.torch.cuda, "device_count", lambda: 2)
    assert pick(1, 2) == ("nccl", torch.device("cuda", 1))
    monkeypatch.setattr(devices.torch.cuda, "device_count", lambda: 1)
    assert pick(1, 2) == ("gloo", torch.device("cpu"))


@pytest.mark.parametrize("local_rank", [-1, 2])
def test_rejects_a_local_rank_outside_the_machine(local_rank):
    with pytest.raises(ValueError, match="local_rank"):
        pick(local_rank, 2, gpu_count=2)
