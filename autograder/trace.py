"""What each rank did, recorded from the inside.

Before the student's code runs, ``install()`` wraps the public entry points a DDP
program goes through (init/destroy of the process group, the collectives, DDP itself,
DistributedSampler, DataLoader, torch.save, optimizer steps). The wrappers record and
then call the original, so the student's code runs unchanged.

Light events are appended to ``rank<N>.events`` as JSON lines the moment they happen,
so a rank that hangs or is killed still tells what it was doing. Everything else
(parameter snapshots, the value a graded function returned) is saved with
``Recorder.save()`` in ``rank<N>.trace`` when the rank ends.
"""

from __future__ import annotations

import functools
import json
import os
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from autograder.source import STUDENT_MODULE

COLLECTIVES = (
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "barrier", "all_gather_object",
    "broadcast_object_list", "gather", "scatter", "all_to_all", "all_to_all_single",
)
_ENGINE_DIRS = (str(Path(torch.__file__).parent), str(Path(__file__).parent))
_torch_save = torch.save  # the grader's own files must not show up as the student's saves


class Recorder:
    def __init__(self, workdir: Path, rank: int):
        self.rank = rank
        self.workdir = workdir
        self.events: list[dict] = []
        self.snapshots: list[tuple[str, torch.Tensor]] = []
        self.result: Any = None
        self.error: str | None = None
        self.error_type: str | None = None
        self._ddp: list[weakref.ref] = []
        self._optimizer: weakref.ref | None = None
        self._log = open(workdir / f"rank{rank}.events", "w", buffering=1)

    def event(self, kind: str, **data):
        data["kind"] = kind
        self.events.append(data)
        self._log.write(json.dumps(data, default=str) + "\n")

    def track(self, ddp: DistributedDataParallel):
        self._ddp.append(weakref.ref(ddp))

    def snapshot(self, label: str, optimizer=None):
        """The trained parameters, flattened to float64: the DDP model's, or else the optimizer's."""
        if optimizer is not None:
            self._optimizer = weakref.ref(optimizer)
        params = None
        models = [m for m in (ref() for ref in self._ddp) if m is not None]
        if models:
            params = list(models[-1].module.parameters())
        elif self._optimizer is not None and self._optimizer() is not None:
            params = [p for group in self._optimizer().param_groups for p in group["params"]]
        if params:
            with torch.no_grad():
                flat = torch.cat([p.detach().double().cpu().flatten() for p in params])
            self.snapshots.append((label, flat))

    def fail(self, exc: BaseException):
        self.error = "".join(traceback.format_exception(exc))
        self.error_type = type(exc).__name__

    def save(self):
        _torch_save(
            {
                "rank": self.rank,
                "events": self.events,
                "snapshots": self.snapshots,
                "result": self.result,
                "error": self.error,
                "error_type": self.error_type,
            },
            self.workdir / f"rank{self.rank}.trace",
            _use_new_zipfile_serialization=True,
        )
        self._log.close()


def caller() -> str | None:
    """'file:line in function' of the innermost frame outside torch and the grader."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.startswith(_ENGINE_DIRS):
            name = Path(frame.filename).name
            return f"{'exercise cell' if name == STUDENT_MODULE else name} line {frame.lineno}, in {frame.name}"
    return None


def install(rec: Recorder):
    """Wrap the entry points; called once in a fresh rank, before the student's code."""
    _wrap_process_group(rec)
    for name in COLLECTIVES:
        _wrap_collective(rec, name)
    _wrap_ddp(rec)
    _wrap_sampler(rec)
    _wrap_dataloader(rec)
    _wrap_save(rec)
    _wrap_optimizer(rec)


def _patch(owner, name: str, make):
    original = getattr(owner, name)
    setattr(owner, name, functools.wraps(original)(make(original)))


def _wrap_process_group(rec: Recorder):
    def init(original):
        def wrapper(*args, **kwargs):
            backend = kwargs.get("backend", args[0] if args else None)
            init_method = kwargs.get("init_method", args[1] if len(args) > 1 else None)
            rec.event("init_process_group_called", requested_backend=str(backend), init_method=init_method)
            out = original(*args, **kwargs)
            rec.event(
                "init_process_group",
                requested_backend=str(backend),
                init_method=init_method,
                backend=dist.get_backend(),
                rank=dist.get_rank(),
                world_size=dist.get_world_size(),
                caller=caller(),
            )
            return out
        return wrapper

    def destroy(original):
        def wrapper(group=None):
            if group is None:
                rec.snapshot("destroy_process_group")
                rec.event("destroy_process_group", caller=caller())
            # Let gloo's worker threads finish releasing completed work first: they need the GIL
            # for that, and a DDP model freed after the group is gone joins them while holding it.
            time.sleep(0.02)
            return original(group)
        return wrapper

    def set_device(original):
        def wrapper(device):
            rec.event("cuda_set_device", device=str(torch.device("cuda", device) if isinstance(device, int) else device))
            return original(device)
        return wrapper

    _patch(dist, "init_process_group", init)
    _patch(dist, "destroy_process_group", destroy)
    _patch(torch.cuda, "set_device", set_device)


def _wrap_collective(rec: Recorder, name: str):
    if not hasattr(dist, name):
        return

    def make(original):
        def wrapper(*args, **kwargs):
            where = caller()
            op = kwargs.get("op")
            if op is None and name in ("all_reduce", "reduce") and len(args) > (1 if name == "all_reduce" else 2):
                op = args[1] if name == "all_reduce" else args[2]
            rec.event("collective", op=name, reduce_op=str(op) if op is not None else None, caller=where, done=False)
            out = original(*args, **kwargs)
            rec.event("collective_done", op=name, caller=where)
            return out
        return wrapper

    _patch(dist, name, make)


def _wrap_ddp(rec: Recorder):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def counting_allreduce(state, bucket):
        if bucket.is_last():
            rec.event("gradient_allreduce")
        return default_hooks.allreduce_hook(state, bucket)

    def init(original):
        def wrapper(self, module, *args, **kwargs):
            out = original(self, module, *args, **kwargs)
            device_ids = kwargs.get("device_ids", args[0] if args else None)
            rec.event(
                "ddp",
                module=type(module).__name__,
                device_ids=[str(d) for d in device_ids] if device_ids else None,
                param_device=str(next(module.parameters()).device),
                caller=caller(),
            )
            rec.track(self)
            self.register_comm_hook(None, counting_allreduce)
            return out
        return wrapper

    def forward(original):
        def wrapper(self, *args, **kwargs):
            rec.event("ddp_forward", sync=bool(self.require_backward_grad_sync and torch.is_grad_enabled()))
            return original(self, *args, **kwargs)
        return wrapper

    _patch(DistributedDataParallel, "__init__", init)
    _patch(DistributedDataParallel, "forward", forward)


def _wrap_sampler(rec: Recorder):
    def set_epoch(original):
        def wrapper(self, epoch):
            rec.event("set_epoch", epoch=epoch, caller=caller())
            return original(self, epoch)
        return wrapper

    def iterate(original):
        def wrapper(self):
            indices = list(original(self))
            rec.snapshot(f"epoch {self.epoch} start")
            rec.event(
                "sampler_iter",
                epoch=self.epoch,
                indices=indices,
                num_replicas=self.num_replicas,
                sampler_rank=self.rank,
                shuffle=self.shuffle,
                dataset_len=len(self.dataset),
            )
            return iter(indices)
        return wrapper

    _patch(DistributedSampler, "set_epoch", set_epoch)
    _patch(DistributedSampler, "__iter__", iterate)


def _wrap_dataloader(rec: Recorder):
    def init(original):
        def wrapper(self, dataset, *args, **kwargs):
            shuffle = kwargs.get("shuffle", args[1] if len(args) > 1 else None)
            sampler = kwargs.get("sampler", args[2] if len(args) > 2 else None)
            info = dict(shuffle=shuffle, sampler=type(sampler).__name__ if sampler is not None else None, caller=caller())
            try:
                out = original(self, dataset, *args, **kwargs)
            except ValueError as exc:
                rec.event("dataloader", error=str(exc), **info)
                raise
            rec.event("dataloader", batch_size=self.batch_size, error=None, **info)
            return out
        return wrapper

    _patch(DataLoader, "__init__", init)


def _wrap_save(rec: Recorder):
    def save(original):
        def wrapper(obj, f, *args, **kwargs):
            keys = list(obj.keys()) if isinstance(obj, dict) else None
            path = os.path.abspath(f) if isinstance(f, (str, os.PathLike)) else repr(f)
            rec.event("save", path=path, keys=keys, type=type(obj).__name__, caller=caller())
            return original(obj, f, *args, **kwargs)
        return wrapper

    _patch(torch, "save", save)


def _wrap_optimizer(rec: Recorder):
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def after_step(optimizer, args, kwargs):
        rec.snapshot("optimizer step", optimizer)
        rec.event("optimizer_step")

    register_optimizer_step_post_hook(after_step)
