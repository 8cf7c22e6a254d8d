"""Helpers the exercise harnesses share inside a rank: where it is, the process group, the device, sample ids."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Place:
    """Where this rank is, as the launcher's variables say (RANK, LOCAL_RANK, WORLD_SIZE, ...)."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node: int
    nodes: int

    @classmethod
    def from_environment(cls) -> "Place":
        env = os.environ
        world_size = int(env.get("WORLD_SIZE", "1"))
        return cls(int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0")), world_size,
                   int(env.get("LOCAL_WORLD_SIZE", str(world_size))), int(env.get("GROUP_RANK", "0")),
                   int(env.get("GROUP_WORLD_SIZE", "1")))


def backend() -> str:
    """The backend the grader chose for this launch (gloo unless every rank has its own GPU)."""
    return os.environ.get("AUTOGRADER_BACKEND", "gloo")


def join_group():
    if backend() == "nccl":  # each rank on the GPU of its local rank, before the group's first collective
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group(backend())
    # Every rank connected before the student's code runs: a rank that finishes (and exits)
    # while another is still connecting would make that one fail to start, not the code under test.
    dist.barrier()


def device_for(place: Place) -> torch.device:
    if backend() == "nccl":
        torch.cuda.set_device(place.local_rank)
        return torch.device("cuda", place.local_rank)
    return torch.device("cpu")


def flat(tensors) -> torch.Tensor:
    """Tensors as one detached vector, in order (what a harness keeps: Recorder.keep)."""
    return torch.cat([t.detach().flatten() for t in tensors])


def flat_grads(model) -> torch.Tensor:
    """Every parameter's gradient as one vector, NaN where a gradient is None."""
    return flat(p.grad if p.grad is not None else torch.full_like(p, float("nan")) for p in model.parameters())


def row_index(x: torch.Tensor) -> dict[bytes, int]:
    """Map each row's bytes to its index: the toy data's rows are all distinct."""
    return {row.tobytes(): i for i, row in enumerate(x.numpy())}


def raised(exc: BaseException) -> str:
    """An error the student's code raised, caught by a harness, as one line:
    "ValueError at exercise cell line 7: the message"."""
    import traceback

    from ranks.trace import STUDENT_FILE

    lines = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(STUDENT_FILE)]
    where = f" at exercise cell line {lines[-1].lineno}" if lines else ""
    return f"{type(exc).__name__}{where}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def record_call(rec, kind: str, function, *args, passes: tuple[type, ...] = ()) -> None:
    """Call the student's `function`, then record a `kind` event: error None, or the error it raised as
    one line (see `raised`), which the checks tell with the line it came from. Errors of the types
    in `passes` go on up (NotImplementedError: the exercise is not started)."""
    try:
        function(*args)
        rec.event(kind, error=None)
    except passes:
        raise
    except Exception as exc:
        rec.event(kind, error=raised(exc))


def number(value) -> float | None:
    """What a student's function returned, as a float when it is one number (a one-element tensor too), else None."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def keep_parts(rec, label: str, parts) -> None:
    """Several tensors, (tensor, like) pairs, kept as one vector (what a rank keeps has one length):
    each as it is when it has its `like`'s shape, else NaNs of that shape (missing or malformed)."""
    rec.keep(label, torch.cat([
        (t.detach() if isinstance(t, torch.Tensor) and t.shape == like.shape else torch.full_like(like, float("nan")))
        .flatten() for t, like in parts]))
