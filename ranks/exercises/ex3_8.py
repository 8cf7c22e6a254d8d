"""Exercise 3.8's harness: build(mesh, path, reshard_after_forward) on every rank, the checkpoint's path on rank 0
only, the bytes it allocated measured as it runs; then a few training steps of what it built, and one step of a
second model built with reshard_after_forward=False, their collectives and gathered parameters observed."""

from __future__ import annotations

import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from ddpcourse.given.ex3_8 import CAPACITY, CHECKPOINT, LR, Tower, batches, tower
from ranks.exercises.ex3_4 import _full
from ranks.rig import device_for, join_group, raised
from ranks.trace import STUDENT_FILE, caller, plain


class Allocated(TorchDispatchMode):
    """The bytes of the tensors that PyTorch's operations allocate while it is on and that are still alive, at
    their peak: what a GPU's allocator would report as the peak for that code. An operation whose result is
    one of its inputs, or a view of one (set_ too, which is how torch.load hands over what it read), allocates
    nothing; so a checkpoint read from disk, held in the host's memory, is not counted."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak, self.where, self.ops = 0, None, 0
        self.past_capacity = None  # where the live bytes first went past the device's capacity

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        if not any(r.alias_info is not None for r in func._schema.returns):
            for t in out if isinstance(out, (list, tuple)) else [out]:
                if isinstance(t, torch.Tensor) and t.device.type != "meta" and type(t) is torch.Tensor:
                    storage = t.untyped_storage()
                    ref = StorageWeakRef(storage)
                    self.live[ref.cdata] = (ref, storage.nbytes())
        self.live = {k: v for k, v in self.live.items() if not v[0].expired()}
        now = sum(size for _, size in self.live.values())
        if now > self.peak:
            self.peak, self.where = now, f"{_student_line()} ({func})"
            if now > CAPACITY and self.past_capacity is None:
                self.past_capacity = self.where
        return out


def _student_line() -> str:
    """The line of the exercise cell that is running (the Tower's own constructor is not the student's line)."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename.endswith(STUDENT_FILE):
            return f"exercise cell line {frame.lineno}, in {frame.name}"
    return caller() or "inside PyTorch"


def _built(student, rec, label: str, *args):
    """What the student's build returned (None if not a module), the peak of what it allocated recorded under
    `label`. An error in build ends the rank, told as a crash from the student's line. A Tower constructed with
    its parameters allocated counts as that many bytes held, whatever the measurement saw (a second witness)."""
    mode, constructed = Allocated(), []
    original = Tower.__init__

    def noting(self, *a, **k):
        original(self, *a, **k)
        real = [p for p in self.parameters() if p.device.type != "meta"]
        if real:
            constructed.append((sum(p.numel() * p.element_size() for p in real), _student_line()))

    Tower.__init__ = noting
    try:
        with mode:
            model = student.build(*args)
            intact = _get_current_dispatch_mode() is mode
    finally:
        Tower.__init__ = original
    peak, where = mode.peak, mode.past_capacity or mode.where
    for size, line in constructed:
        if size > peak:
            peak, where = size, f"{line} (the Tower built with its parameters allocated)"
    rec.event(label, peak=peak, where=where, measured=intact and mode.ops > 0,
              type=type(model).__name__, tower=isinstance(model, Tower))
    return model if isinstance(model, torch.nn.Module) else None


def _gathered_bytes(model, shards: int) -> list[int]:
    """Hooks that note, as each block starts and ends its forward pass, the parameter bytes this rank holds:
    its shards, and every parameter gathered in full at that moment (a plain tensor, not a DTensor)."""
    seen: list[int] = []

    def note(*_):
        seen.append(shards + sum(p.numel() * p.element_size() for p in model.parameters() if not hasattr(p, "to_local")))

    for block in getattr(model, "blocks", []):
        block.register_forward_pre_hook(note)
        block.register_forward_hook(note)
    return seen


def _one_step(rec, model, x, y, step: int, setting: bool, optimizer=None):
    """One training step, between markers; the end marker says the most parameter bytes held as blocks ran and
    which blocks were still gathered when the forward pass was over."""
    shards = sum(p.to_local().numel() * p.element_size() if hasattr(p, "to_local") else 0 for p in model.parameters())
    seen = _gathered_bytes(model, shards)
    rec.event("phase", step=step, reshard_after_forward=setting, phase="start")
    if optimizer is not None:
        optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    kept = [k for k, block in enumerate(getattr(model, "blocks", []))
            if any(not hasattr(p, "to_local") for p in block.parameters())]
    loss.backward()
    if optimizer is not None:
        optimizer.step()
    rec.event("phase", step=step, reshard_after_forward=setting, phase="end", held=max(seen, default=None),
              gathered_after_forward=kept, blocks=len(getattr(model, "blocks", [])))


def _predicted(student, setting: bool):
    """What the student's predict(setting) returned, as plain values; or why there is nothing."""
    if not callable(getattr(student, "predict", None)):
        return {"error": "there is no function predict"}
    try:
        return {"value": plain(student.predict(setting))}
    except NotImplementedError:
        return {"error": "predict is not written yet (it raises NotImplementedError)"}
    except Exception as exc:
        return {"error": f"predict raised {raised(exc)}"}


def harness(student, place, rec, seed, **_):
    from torch.distributed.device_mesh import init_device_mesh

    from ranks.exercises.ex3_4 import _storage

    join_group()
    rank, w = place.rank, place.world_size
    device = device_for(place)
    mesh = init_device_mesh(device.type, (w,))
    path = Path.cwd() / CHECKPOINT
    if rank == 0:
        torch.save(tower(seed).state_dict(), path)
    dist.barrier()
    rec.event("prediction", **{str(setting): _predicted(student, setting) for setting in (True, False)})
    mine = str(path) if rank == 0 else None  # the checkpoint is on rank 0's machine only
    rec.event("building")
    model = _built(student, rec, "built", mesh, mine, True)
    if model is not None:
        rec.event("sharded", **_storage(model))
        rec.keep("loaded", _full(model))
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        for step, (x, y) in enumerate(batches(seed, w, rank)):
            _one_step(rec, model, x.to(device), y.to(device), step, True, optimizer)
            rec.keep("after step", _full(model))
        del model, optimizer
        second = _built(student, rec, "built without resharding", mesh, mine, False)
        if second is not None:
            x, y = batches(seed, w, rank)[0]
            _one_step(rec, second, x.to(device), y.to(device), 0, False)
    rec.event("done")
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
