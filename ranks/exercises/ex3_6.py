"""Exercise 3.6's harness: the student's predictions first, then one step under each scheme, measuring on
each rank the bytes of its parameters, gradients and Adam moments."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ddpcourse.given.ex3_6 import SCHEMES, make, shapes_of, widths
from ranks.rig import join_group, raised
from ranks.trace import plain


def harness(student, place, rec, seed, **_):
    join_group()
    rank, w = place.rank, place.world_size
    shapes = shapes_of(seed)
    for scheme in SCHEMES:  # predictions first: nothing has been measured yet
        try:
            rec.event("predicted", scheme=scheme, value=plain(student.predict(scheme, list(shapes), w)), error=None)
        except NotImplementedError:
            raise
        except Exception as exc:
            rec.event("predicted", scheme=scheme, value=None, error=raised(exc))
    for scheme in SCHEMES:
        rec.event("measured", scheme=scheme, value=measure(scheme, seed, rank, w))
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()


def measure(scheme: str, seed: int, rank: int, w: int) -> dict[str, int]:
    """This rank's bytes of parameters, gradients and Adam moments after one step under `scheme`."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = make(seed)
    if scheme == "FSDP":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (w,))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        model = DDP(model)
        if scheme == "ZeRO-1":
            from torch.distributed.optim import ZeroRedundancyOptimizer

            optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
        else:
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(4, widths(seed)[0], generator=torch.Generator().manual_seed(rank))
    F.mse_loss(model(x), torch.zeros(4, widths(seed)[-1])).backward()
    optimizer.step()
    local = getattr(optimizer, "optim", optimizer)
    moments = [t for state in local.state.values() for k, t in state.items() if k in ("exp_avg", "exp_avg_sq")]
    return {"parameters": sum(_bytes(p) for p in model.parameters()),
            "gradients": sum(_bytes(p.grad) for p in model.parameters() if p.grad is not None),
            "optimizer": sum(_bytes(t) for t in moments)}


def _bytes(t: torch.Tensor) -> int:
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()
