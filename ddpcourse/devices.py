"""The one place where the course decides which backend and device a process uses.

A rank gets a GPU of its own only when the machine has one for every process on it;
otherwise every rank runs on the CPU with gloo. So the same code runs on a laptop
without a GPU, on a Colab machine with one GPU (two processes cannot both own it)
and on a server with several.
"""

from __future__ import annotations

import torch


def pick(local_rank: int, local_world_size: int, gpu_count: int | None = None) -> tuple[str, torch.device]:
    """The backend and device for the process with `local_rank` out of `local_world_size` on this machine.

    Returns ``("nccl", cuda:<local_rank>)`` when the machine has at least `local_world_size`
    GPUs, else ``("gloo", cpu)``. `gpu_count` defaults to ``torch.cuda.device_count()``;
    pass it to ask what another machine would get (the tests do). On a single machine
    `local_world_size` is the world size; under torchrun it is ``LOCAL_WORLD_SIZE``.
    """
    if not 0 <= local_rank < local_world_size:
        raise ValueError(f"local_rank {local_rank} is not in 0..{local_world_size - 1}")
    if gpu_count is None:
        gpu_count = torch.cuda.device_count()
    if gpu_count >= local_world_size:
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")
