"""What each rank did, recorded from the inside, written as plain data.

Before the student's code runs, ``install()`` wraps the public entry points a DDP
program goes through (init/destroy of the process group, the collectives, point-to-point
messages, DDP itself, DistributedSampler, DataLoader, torch.save, optimizer steps). The
wrappers record and then call the original, so the student's code runs unchanged.

Every event is one JSON line appended to ``rank<N>.events`` the moment it happens, with a
sequence number and a time stamp, so a rank that hangs or is killed still tells what it was
doing, and the grader can watch the ranks' progress while they run. A call that can block
(joining the group, a collective, a message, ``mp.spawn``) writes an ``enter`` event before
it and a ``leave`` event after it.

When the rank ends, ``Recorder.save()`` writes ``rank<N>.result.json`` (what the graded
function returned, the error if any, whether the instrumentation was still in place) and
``rank<N>.snapshots.npy`` (the parameters after each optimizer step, float64). The grader
reads these as data only: JSON and a NumPy array, never a pickle.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import math
import os
import threading
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler


COLLECTIVES = (
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "barrier", "all_gather_object",
    "broadcast_object_list", "gather", "scatter", "all_to_all", "all_to_all_single",
    "monitored_barrier", "all_reduce_coalesced", "all_gather_coalesced", "gather_object", "scatter_object_list",
    "all_gather_single", "reduce_scatter_single",
)
POINT_TO_POINT = ("send", "recv", "isend", "irecv", "batch_isend_irecv")
_ENGINE_DIRS = (str(Path(torch.__file__).parent), str(Path(__file__).parent))
STUDENT_FILE = "student.py"  # the grader's name for the file of the student's cell: "exercise cell" in messages
_torch_save = torch.save  # the grader's own files must not show up as the student's saves
_TEXT_LIMIT = 2000  # characters of any one string recorded
_BUFFER_LIMIT = 4096  # numbers of one buffer recorded


class Recorder:
    def __init__(self, workdir: Path, rank: int):
        self.rank = rank
        self.workdir = workdir
        self.snapshots: list[tuple[str, torch.Tensor]] = []
        self.result: Any = None
        self.error: str | None = None
        self.error_type: str | None = None
        self.counts: dict[str, int] = {}  # calls so far, per operation: "all_reduce #3"
        self._seq = 0
        self._ddp: list[weakref.ref] = []
        self._optimizer: weakref.ref | None = None
        self._patched: list[tuple[object, str, object]] = []
        self._forged = 0  # events the submission tried to record itself
        self._kept_size: int | None = None  # the length of what the harness keeps (keep)
        self._buffers_recorded = False
        # A fault a job plants (worker.py): called after each optimizer step, and in place of torch.save.
        self.on_step = None
        self.on_save = None
        self.on_copy = None  # the same, in place of shutil.copyfile
        self._digest = hashlib.sha256()  # of every line written: the grader compares it with the file
        self._lock = threading.RLock()
        self._log = open(workdir / f"rank{rank}.events", "w", buffering=1)

    def event(self, kind: str, **data):
        if id(sys._getframe(1).f_code) not in _RECORDERS:
            self._forged += 1  # only this package's wrappers and harnesses record (by identity: a code
            return  # object compiled elsewhere, whatever file name it claims, is not one of them)
        with self._lock:  # DDP's all-reduce ends on a thread of the process group's (_wrap_ddp)
            self._seq += 1
            data.update(kind=kind, seq=self._seq, t=round(time.time(), 6))
            line = json.dumps(data, default=_short) + "\n"
            self._digest.update(line.encode())
            self._log.write(line)

    def enter(self, call: str, **data) -> int:
        """A call that may block: returns its number among this rank's calls of the same name."""
        n = self.counts[call] = self.counts.get(call, 0) + 1
        self.event("enter", call=call, n=n, **data)
        return n

    def leave(self, call: str, n: int):
        self.event("leave", call=call, n=n)

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
        if params and any(_is_dtensor(p) for p in params):
            return  # sharded (FSDP): gathering would be a collective; the exercise's harness keeps full ones
        if params:
            with torch.no_grad():
                flat = torch.cat([p.detach().double().cpu().flatten() for p in params])
            self.snapshots.append((label, flat))
            self.event("snapshot", label=label, index=len(self.snapshots) - 1)

    def buffers(self, model=None):
        """The DDP model's floating-point buffers (batch norm's running statistics), as numbers, and
        its batch norm layers as they are now: the latest DDP model's, or ``model``'s."""
        models = [model] if model is not None else [m for m in (ref() for ref in self._ddp) if m is not None]
        if not models:
            return
        with torch.no_grad():
            held = {name: b.detach().double().cpu().flatten()[:_BUFFER_LIMIT].tolist()
                    for name, b in list(models[-1].module.named_buffers())[:100] if b.dtype.is_floating_point}
        self.event("buffers", values=held, norms=_norm_layers(models[-1].module))
        self._buffers_recorded = True

    def buffers_at_the_end(self):
        """A script that never destroyed its group nor freed its DDP model left no record of the final
        buffers: they are taken as the script ends (its model is alive still, in DDP's reference cycles)."""
        if not self._buffers_recorded:
            try:
                self.buffers()
            except Exception:  # a model the script left broken: nothing to record
                pass

    def keep(self, label: str, values: torch.Tensor):
        """A flat vector the exercise's harness saves beside the parameter snapshots (same length)."""
        with torch.no_grad():
            self.snapshots.append((label, values.detach().double().cpu().flatten().clone()))
        self._kept_size = self.snapshots[-1][1].numel()

    def fail(self, exc: BaseException):
        self.error = "".join(traceback.format_exception(exc))[-20000:]
        self.error_type = type(exc).__name__

    def patched(self, owner, name: str, wrapper):
        self._patched.append((owner, name, wrapper))

    def tampered(self) -> list[str]:
        """The wrapped entry points that no longer hold the recorder's wrapper, and forged events."""
        found = [f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"
                 for owner, name, wrapper in self._patched if getattr(owner, name, None) is not wrapper]
        return found + ([f"{self._forged} event(s) recorded by the submission"] if self._forged else [])

    def save(self):
        self._log.flush()
        if self._kept_size is not None:
            # what the harness kept is what its checks read: snapshots of an optimizer the student's code
            # steps inside its own (a shard of the parameters) have another length, and are left out
            self.snapshots = [(label, flat) for label, flat in self.snapshots if len(flat) == self._kept_size]
        sizes = {len(flat) for _, flat in self.snapshots}
        if len(sizes) == 1:
            np.save(self.workdir / f"rank{self.rank}.snapshots.npy",
                    torch.stack([flat for _, flat in self.snapshots]).numpy(), allow_pickle=False)
        data = {
            "rank": self.rank,
            "result": self.result,
            "error": self.error,
            "error_type": self.error_type,
            "snapshot_labels": [label for label, _ in self.snapshots] if len(sizes) == 1 else [],
            "snapshot_sizes_differ": len(sizes) > 1,
            "tampered": self.tampered(),
            "events_sha256": self._digest.hexdigest(),
        }
        with open(self.workdir / f"rank{self.rank}.result.json", "w") as f:
            json.dump(data, f, default=_short)
        self._log.close()


def _is_dtensor(value) -> bool:
    return type(value).__name__ == "DTensor" or (isinstance(value, torch.nn.Parameter) and hasattr(value, "_local_tensor"))


def _short(value) -> str:
    return repr(value)[:_TEXT_LIMIT]


def plain(value):
    """A value as JSON can hold it: numbers, strings, lists and dicts (anything else as its repr)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value if not isinstance(value, str) else value[:_TEXT_LIMIT]
    if isinstance(value, (int, float)):
        return value if not (isinstance(value, float) and not math.isfinite(value)) else repr(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return plain(value.item())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value[:10000]]
    if isinstance(value, dict):
        return {str(k)[:200]: plain(v) for k, v in list(value.items())[:10000]}
    return _short(value)


def by_the_grader() -> bool:
    """Whether the innermost frame outside torch is this package's (a harness's own call, not the student's)."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if frame.filename == __file__ or frame.filename.startswith((_ENGINE_DIRS[0], "<frozen ", "<string>")):
            continue  # the recording wrappers, torch, how the rank started
        return frame.filename.startswith(_ENGINE_DIRS[1])
    return False


def caller() -> str | None:
    """'file:line in function' of the innermost frame outside torch and the grader."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.startswith(_ENGINE_DIRS + ("<frozen ", "<string>")):  # <string>: how a rank starts
            name = Path(frame.filename).name
            return f"{'exercise cell' if name == STUDENT_FILE else name} line {frame.lineno}, in {frame.name}"
    return None


_RECORDERS: set[int] = set()  # ids of the code objects that may record events: this package's own
_KEPT: list = []  # those code objects, kept alive so that no other can take their ids


def _trust_this_package():
    """Every code object of the modules of this package imported so far (the harness's too), nested ones included."""
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "ranks" or name.startswith("ranks.")):
            continue
        for value in list(vars(module).values()):
            for item in [value, *vars(value).values()] if isinstance(value, type) else [value]:
                code = getattr(getattr(item, "__func__", item), "__code__", None)
                if code is not None and getattr(item, "__module__", None) == name:
                    found.append(code)
    while found:
        code = found.pop()
        if id(code) not in _RECORDERS:
            _RECORDERS.add(id(code))
            _KEPT.append(code)
            found += [c for c in code.co_consts if isinstance(c, type(code))]


def install(rec: Recorder):
    """Wrap the entry points; called once in a fresh rank, before the student's code."""
    _trust_this_package()
    _wrap_process_group(rec)
    for name in COLLECTIVES:
        _wrap_collective(rec, name)
    for name in POINT_TO_POINT:
        _wrap_point_to_point(rec, name)
    _wrap_functional_collectives(rec)
    _wrap_waits(rec)
    _wrap_spawn(rec)
    _wrap_ddp(rec)
    _wrap_sampler(rec)
    _wrap_dataloader(rec)
    _wrap_save(rec)
    _wrap_file_moves(rec)
    _wrap_optimizer(rec)


def _patch(rec: Recorder, owner, name: str, make):
    original = getattr(owner, name)
    wrapper = functools.wraps(original)(make(original))
    setattr(owner, name, wrapper)
    rec.patched(owner, name, wrapper)
    if owner is dist:
        # torch.distributed re-exports distributed_c10d's functions: wrap them where they are
        # defined too, so a call through the module (or P2POp's check of isend) sees the same wrapper.
        from torch.distributed import distributed_c10d

        if getattr(distributed_c10d, name, None) is original:
            setattr(distributed_c10d, name, wrapper)
            rec.patched(distributed_c10d, name, wrapper)


_calling = threading.local()  # inside a recorded communication call: the calls it makes are its own


def _outermost(make):
    """Record a communication call only when the student made it, not when another one did.

    dist.send is isend(...).wait(), all_gather_object uses all_gather: one call, one record.
    """
    def outer_make(original):
        recorded = make(original)

        def wrapper(*args, **kwargs):
            if getattr(_calling, "active", False):
                return original(*args, **kwargs)
            _calling.active = True
            try:
                return recorded(*args, **kwargs)
            finally:
                _calling.active = False
        return wrapper
    return outer_make


def _tensor_info(value) -> dict:
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return {"shape": [len(value)] + list(value[0].shape), "dtype": str(value[0].dtype).removeprefix("torch.")}
    return {}


def _wrap_process_group(rec: Recorder):
    def init(original):
        def wrapper(*args, **kwargs):
            backend = kwargs.get("backend", args[0] if args else None)
            init_method = kwargs.get("init_method", args[1] if len(args) > 1 else None)
            asked = {k: kwargs[k] for k in ("world_size", "rank") if isinstance(kwargs.get(k), int)}
            rec.event("init_process_group_called", requested_backend=str(backend), init_method=init_method,
                      by_grader=by_the_grader(), **asked)
            master = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
            n = rec.enter("init_process_group", init_method=init_method, master=master, caller=caller(), **asked)
            out = original(*args, **kwargs)
            rec.leave("init_process_group", n)
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
            if group is None or group is dist.group.WORLD:  # WORLD destroys every group, the default one too
                rec.snapshot("destroy_process_group")
                rec.buffers()
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

    _patch(rec, dist, "init_process_group", init)
    _patch(rec, dist, "destroy_process_group", destroy)
    _patch(rec, torch.cuda, "set_device", set_device)


def _wrap_collective(rec: Recorder, name: str):
    if not hasattr(dist, name):
        return

    def make(original):
        def wrapper(*args, **kwargs):
            where = caller()
            op = kwargs.get("op")
            if op is None and name in ("all_reduce", "reduce") and len(args) > (1 if name == "all_reduce" else 2):
                op = args[1] if name == "all_reduce" else args[2]
            info = _tensor_info(args[0] if args else kwargs.get("tensor"))
            root = _root(name, args, kwargs)
            if root is not None:
                info["root"] = root
            rec.event("collective", op=name, reduce_op=str(op) if op is not None else None, caller=where, done=False,
                      **({"root": root} if root is not None else {}))
            if where is None and by_the_grader():
                info["by"] = "grader"
            started = kwargs.get("async_op", args[3] if name == "all_reduce" and len(args) > 3 else False)
            if started:
                info["async_op"] = True
            n = rec.enter(name, caller=where, **info)
            out = original(*args, **kwargs)
            rec.leave(name, n)
            rec.event("collective_done", op=name, caller=where)
            if started and out is not None:
                _in_flight[id(out)] = (out, [(name, n)])
            return out
        return wrapper

    _patch(rec, dist, name, _outermost(make))


# Collectives started with async_op=True, by the id of their Work (or of a future that stands for them):
# the Work itself is kept with it, so that no other object takes its id while it may still be waited for.
_in_flight: dict[int, tuple[object, list[tuple[str, int]]]] = {}


def _wrap_waits(rec: Recorder):
    """When a collective started with async_op=True is waited for: Work.wait(), or wait() on its future
    (get_future(), a future chained with then(), torch.futures.collect_all / wait_all).

    A wait can block like the collective itself, so it is recorded as one (enter/leave): a rank waiting
    for an all-reduce that another rank never started is told as a deadlock.
    """
    from torch.distributed.distributed_c10d import Work

    def waiting(started: list[tuple[str, int]], original, *args, **kwargs):
        numbers = [rec.enter("wait()", of=f"{name} #{n}", caller=caller()) for name, n in started]
        out = original(*args, **kwargs)
        for (name, n), k in zip(started, numbers):
            rec.leave("wait()", k)
            rec.event("waited", op=name, n=n, caller=caller())
        return out

    def waits(original):
        def wrapper(self, *args, **kwargs):
            if id(self) not in _in_flight:  # not the student's: a barrier's own wait, DDP's, the grader's
                return original(self, *args, **kwargs)
            return waiting(_in_flight.pop(id(self))[1], original, self, *args, **kwargs)
        return wrapper

    def waits_for_all(original):
        def wrapper(futures, *args, **kwargs):
            started = [s for f in futures for s in _in_flight.pop(id(f), (None, []))[1]]
            return waiting(started, original, futures, *args, **kwargs)
        return wrapper

    def stands_for_the_same(original):
        def wrapper(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            if id(self) in _in_flight and out is not None:
                _in_flight[id(out)] = (out, _in_flight[id(self)][1])
            return out
        return wrapper

    def collected(original):
        def wrapper(futures, *args, **kwargs):
            out = original(futures, *args, **kwargs)
            started = [s for f in futures if id(f) in _in_flight for s in _in_flight[id(f)][1]]
            if started and out is not None:
                _in_flight[id(out)] = (out, started)
            return out
        return wrapper

    _patch(rec, Work, "wait", waits)
    _patch(rec, Work, "get_future", stands_for_the_same)
    _patch(rec, torch._C.Future, "wait", waits)
    _patch(rec, torch._C.Future, "then", stands_for_the_same)
    _patch(rec, torch.futures, "collect_all", collected)
    _patch(rec, torch.futures, "wait_all", waits_for_all)


# The functional collectives (what DTensor and torch.compile use) return at once, the result to be waited
# for: recorded as issued, never as a wait (a first call takes seconds to set up, and is no deadlock).
FUNCTIONAL = ("all_reduce", "all_reduce_coalesced", "all_gather_tensor", "all_gather_tensor_autograd",
              "all_gather_single", "all_gather_single_autograd", "reduce_scatter_tensor",
              "reduce_scatter_tensor_autograd", "reduce_scatter_single", "reduce_scatter_single_autograd",
              "all_to_all_single", "all_to_all_single_autograd", "broadcast")


def _wrap_functional_collectives(rec: Recorder):
    import torch.distributed._functional_collectives as funcol

    def issued(name):
        def make(original):
            def wrapper(*args, **kwargs):
                where = caller()
                rec.event("collective", op=name, functional=True, caller=where, done=False,
                          **_tensor_info(args[0] if args else kwargs.get("self")))
                out = original(*args, **kwargs)
                rec.event("collective_done", op=name, caller=where)  # issued: no wait until its result is used
                return out
            return wrapper
        return make

    for name in FUNCTIONAL:
        if hasattr(funcol, name):
            _patch(rec, funcol, name, _outermost(issued(name)))


# The rank a rooted collective sends from or gathers to, and where it is among the arguments.
_ROOTS = {"broadcast": ("src", 1), "reduce": ("dst", 1), "gather": ("dst", 2), "scatter": ("src", 2),
          "broadcast_object_list": ("src", 1), "gather_object": ("dst", 2), "scatter_object_list": ("src", 2)}


def _root(name: str, args, kwargs) -> int | None:
    if name not in _ROOTS:
        return None
    keyword, position = _ROOTS[name]
    value = kwargs.get(keyword, kwargs.get(f"group_{keyword}", args[position] if len(args) > position else 0))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _wrap_point_to_point(rec: Recorder, name: str):
    if not hasattr(dist, name):
        return

    def make(original):
        def wrapper(*args, **kwargs):
            where = caller()
            if name == "batch_isend_irecv":
                ops = args[0] if args else kwargs.get("p2p_op_list", [])
                info = {"ops": [{"op": getattr(o.op, "__name__", str(o.op)), "peer": o.peer,
                                 "bytes": o.tensor.numel() * o.tensor.element_size()} for o in ops]}
            else:
                tensor = args[0] if args else kwargs.get("tensor")
                peer = args[1] if len(args) > 1 else next(
                    (kwargs[k] for k in ("dst", "src", "group_dst", "group_src") if kwargs.get(k) is not None), None)
                info = {"peer": peer, "bytes": tensor.numel() * tensor.element_size()} if isinstance(tensor, torch.Tensor) else {}
            n = rec.enter(name, caller=where, **info)
            out = original(*args, **kwargs)
            rec.leave(name, n)
            return out
        return wrapper

    _patch(rec, dist, name, _outermost(make))


def _wrap_spawn(rec: Recorder):
    import torch.multiprocessing as mp

    def make(original):
        def wrapper(*args, **kwargs):
            n = rec.enter("mp.spawn", caller=caller(), nprocs=kwargs.get("nprocs", args[2] if len(args) > 2 else 1))
            out = original(*args, **kwargs)
            rec.leave("mp.spawn", n)
            return out
        return wrapper

    _patch(rec, mp, "spawn", make)
    _patch(rec, mp, "start_processes", make)


def _wrap_ddp(rec: Recorder):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    # DDP all-reduces its gradients inside backward(), bucket by bucket: while one is in flight the rank
    # waits on the others like in any collective, so a rank in backward() and another in a barrier is
    # told as the deadlock it is, not left to the time limit.
    in_flight = {"buckets": 0, "n": 0}
    lock = threading.RLock()  # a future already done runs its callback at once, on this thread
    name = "DDP's gradient all-reduce in backward()"

    def counting_allreduce(state, bucket):
        if bucket.is_last():
            rec.event("gradient_allreduce")
        with lock:
            outer, _calling.active = getattr(_calling, "active", False), True  # DDP's call, not the student's
            try:
                future = default_hooks.allreduce_hook(state, bucket)
            finally:
                _calling.active = outer
            in_flight["buckets"] += 1
            if in_flight["buckets"] == 1:
                in_flight["n"] = rec.enter(name, caller=caller())
            return future.then(done)

    def done(future):
        with lock:
            in_flight["buckets"] -= 1
            if in_flight["buckets"] == 0:
                rec.leave(name, in_flight["n"])
        return future.value()

    def init(original):
        def wrapper(self, module, *args, **kwargs):
            n = rec.enter("DistributedDataParallel", caller=caller())
            out = original(self, module, *args, **kwargs)
            rec.leave("DistributedDataParallel", n)
            device_ids = kwargs.get("device_ids", args[0] if args else None)
            rec.event(
                "ddp",
                module=type(module).__name__,
                norms=_norm_layers(module),
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
            first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
            rec.event("ddp_forward", sync=bool(self.require_backward_grad_sync and torch.is_grad_enabled()),
                      rows=int(first.shape[0]) if first is not None and first.dim() else None, inputs=_small(first))
            return original(self, *args, **kwargs)
        return wrapper

    def at_deletion(self):
        # A script that frees its DDP model before leaving the group (lesson 2, section 8) has no model left
        # when destroy_process_group records the final buffers: they are recorded as it goes, while intact.
        if dist.is_initialized() and any(ref() is self for ref in rec._ddp):
            rec.buffers(self)

    _patch(rec, DistributedDataParallel, "__init__", init)
    _patch(rec, DistributedDataParallel, "forward", forward)
    DistributedDataParallel.__del__ = at_deletion


_INPUT_LIMIT = 4096


def _small(t) -> list | None:
    """A small floating-point input, as numbers (which samples, and what noise, a step was given); else None."""
    if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point or t.numel() > _INPUT_LIMIT or _is_dtensor(t):
        return None
    return t.detach().double().cpu().flatten().tolist()


def _norm_layers(module) -> list[dict]:
    """The batch norm layers of a model: their names, classes, and whether they are synchronized."""
    from torch.nn.modules.batchnorm import _BatchNorm

    stand_in = getattr(sys.modules.get("ddpcourse.syncbn"), "CpuSyncBatchNorm", ())
    return [{"name": name, "type": type(m).__name__, "synchronized": isinstance(m, (torch.nn.SyncBatchNorm, stand_in))}
            for name, m in list(module.named_modules())[:1000] if isinstance(m, (_BatchNorm, torch.nn.SyncBatchNorm))]


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
                seed=self.seed,
                drop_last=self.drop_last,
                dataset_len=len(self.dataset),
            )
            return iter(indices)
        return wrapper

    _patch(rec, DistributedSampler, "set_epoch", set_epoch)
    _patch(rec, DistributedSampler, "__iter__", iterate)


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

    _patch(rec, DataLoader, "__init__", init)


def _path_of(f) -> str | None:
    """The absolute path a save writes to: given as a path, or the name of an open file (a temporary one)."""
    name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
    return os.path.abspath(name) if isinstance(name, (str, os.PathLike)) else None


def _wrap_file_moves(rec: Recorder):
    """Copies and renames of whole files, recorded as each puts a file in place ("placed"). A copy writes bytes
    (shutil.move across file systems copies): where a fault is planted, it asks halfway like a save does."""
    import shutil

    def copyfile(original):
        def wrapper(src, dst, *args, **kwargs):
            where = {"path": _path_of(dst), "source": _path_of(src)}
            rec.event("copy", **where)
            if rec.on_copy is not None and not os.path.isdir(dst):
                out = rec.on_copy(original, src, dst, args, kwargs)
            else:
                out = original(src, dst, *args, **kwargs)
            rec.event("placed", how="copy", **where)
            return out
        return wrapper

    def rename(original):
        def wrapper(src, dst, *args, **kwargs):
            out = original(src, dst, *args, **kwargs)
            rec.event("placed", how="rename", path=_path_of(dst), source=_path_of(src))
            return out
        return wrapper

    _patch(rec, shutil, "copyfile", copyfile)
    _patch(rec, os, "replace", rename)
    _patch(rec, os, "rename", rename)


def _wrap_save(rec: Recorder):
    def save(original):
        def wrapper(obj, f, *args, **kwargs):
            if getattr(_calling, "active", False):  # a collective serializing objects, not a checkpoint
                return original(obj, f, *args, **kwargs)
            keys = [str(k) for k in obj.keys()] if isinstance(obj, dict) else None
            path = _path_of(f)
            rec.event("save", path=path, keys=keys, type=type(obj).__name__, caller=caller())
            if rec.on_save is not None:
                out = rec.on_save(original, obj, f, args, kwargs)
            else:
                out = original(obj, f, *args, **kwargs)
            rec.event("saved", path=path)
            return out
        return wrapper

    def load(original):
        def wrapper(f, *args, **kwargs):
            if getattr(_calling, "active", False):
                return original(f, *args, **kwargs)
            path = os.path.abspath(f) if isinstance(f, (str, os.PathLike)) else None
            rec.event("load", path=path, caller=caller())
            return original(f, *args, **kwargs)
        return wrapper

    _patch(rec, torch, "save", save)
    _patch(rec, torch, "load", load)


def _wrap_optimizer(rec: Recorder):
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from torch.optim.optimizer import register_optimizer_step_pre_hook

    depth = threading.local()  # an optimizer that steps others (ZeroRedundancyOptimizer): one step, not two

    def before_step(optimizer, args, kwargs):
        depth.n = getattr(depth, "n", 0) + 1

    def after_step(optimizer, args, kwargs):
        depth.n = max(getattr(depth, "n", 1) - 1, 0)
        if depth.n == 0 and _has_gradients(optimizer):  # with none, step() changes nothing: no step was taken
            rec.snapshot("optimizer step", optimizer)
            lr = optimizer.param_groups[0].get("lr") if optimizer.param_groups else None
            rec.event("optimizer_step", optimizer=type(optimizer).__name__,
                      lr=float(lr) if isinstance(lr, (int, float)) else None)
            if rec.on_step is not None:
                rec.on_step()

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)
    _wrap_consolidate(rec)
    _wrap_state_dict_gathering(rec)


def _has_gradients(optimizer) -> bool:
    return any(p.grad is not None for group in optimizer.param_groups for p in group["params"])


def _traced_as_collective(rec: Recorder, owner, name: str, root=None, label: str | None = None, measure=None):
    """A library call that is a collective inside (every rank must make it): traced as one, by name;
    ``root(args, kwargs)`` says which rank it gathers to, where it has one; ``measure(args, kwargs)``, what
    else to record of its arguments."""
    op = label or name

    def make(original):
        def wrapper(*args, **kwargs):
            where = caller()
            rooted = {"root": root(args, kwargs)} if root else {}
            if measure is not None:
                try:
                    rooted.update(measure(args, kwargs))
                except Exception:
                    pass
            rec.event("collective", op=op, reduce_op=None, caller=where, done=False, **rooted)
            n = rec.enter(op, caller=where, **rooted)
            out = original(*args, **kwargs)
            rec.leave(op, n)
            rec.event("collective_done", op=op, caller=where)
            return out
        return wrapper

    _patch(rec, owner, name, _outermost(make))


def _wrap_state_dict_gathering(rec: Recorder):
    """torch.distributed.checkpoint's state dict functions gather or scatter sharded tensors: collectives.
    Wrapped where the grader imported them before the rank started (see _wrap_consolidate)."""
    module = sys.modules.get("torch.distributed.checkpoint.state_dict")
    if module is None:
        return
    for name in ("get_model_state_dict", "get_optimizer_state_dict", "get_state_dict",
                 "set_model_state_dict", "set_optimizer_state_dict", "set_state_dict"):
        if hasattr(module, name):
            _traced_as_collective(rec, module, name)
    # Saving and loading a distributed checkpoint: every rank writes or reads its shards, and they
    # agree on the index first.
    package = sys.modules.get("torch.distributed.checkpoint")
    saver = sys.modules.get("torch.distributed.checkpoint.state_dict_saver")
    loader = sys.modules.get("torch.distributed.checkpoint.state_dict_loader")
    # save_state_dict and load_state_dict: deprecated in 2.13, still working, and still in older tutorials
    for owner, name, label in ((package, "save", "save"), (package, "load", "load"), (package, "async_save", "async_save"),
                               (saver, "save", "save"), (loader, "load", "load"),
                               (package, "save_state_dict", "save"), (package, "load_state_dict", "load"),
                               (saver, "save_state_dict", "save"), (loader, "load_state_dict", "load")):
        if owner is not None and hasattr(owner, name):
            _traced_as_collective(rec, owner, name, label=f"dcp.{label}",
                                  measure=_state_held if label in ("save", "async_save") else None)


def _state_held(args, kwargs) -> dict:
    """How many numbers of the state handed to a checkpoint save this rank holds itself, of how many in all: a
    DTensor counts its local shard; a plain tensor, all of it."""
    state = kwargs.get("state_dict", args[0] if args else None)
    local = whole = 0
    stack, seen = [state], 0
    while stack and seen < 100_000:
        value = stack.pop()
        seen += 1
        if isinstance(value, torch.Tensor):
            whole += value.numel()
            local += value._local_tensor.numel() if _is_dtensor(value) else value.numel()
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif hasattr(value, "state_dict") and callable(value.state_dict):  # a Stateful: what DCP saves of it
            stack.append(value.state_dict())
    return {"held": local, "numbers": whole}


def _wrap_consolidate(rec: Recorder):
    """ZeroRedundancyOptimizer.consolidate_state_dict: a collective (every rank sends its shard).

    Importing torch.distributed.optim takes about a second, so it is wrapped only where it was
    imported before the rank started: the exercises that use it list it in ``warm_imports``.
    """
    module = sys.modules.get("torch.distributed.optim.zero_redundancy_optimizer")
    if module is None:
        return
    _traced_as_collective(rec, module.ZeroRedundancyOptimizer, "consolidate_state_dict",
                          root=lambda args, kwargs: kwargs.get("to", args[1] if len(args) > 1 else 0))
