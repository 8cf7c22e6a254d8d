"""Exercise 3.6: predict, then measure, the training state each rank holds under DDP, ZeRO-1 and FSDP:
predict(scheme, shapes, world_size) -> one {"parameters", "gradients", "optimizer"} dict of bytes per rank.

The harness asks for the predictions first, then trains one step of the same model under each
scheme and measures, on each rank, the bytes of its parameters, gradients and Adam moments. The
checks compare the predictions with the grader's exact count and show what the ranks measured
beside it (tests prove the count and the measurements agree).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from autograder.checks import Check, each_rank
from autograder.exercises import Exercise
from autograder.rig import join_group, raised
from autograder.trace import plain

SCHEMES = ("DDP", "ZeRO-1", "FSDP")
PARTS = ("parameters", "gradients", "optimizer")
WIDTHS = {0: (8, 48, 40, 5), 7: (8, 36, 50, 7)}  # layer widths by seed: tensors of unequal sizes, rows W does not divide
FLOAT = 4  # bytes per float32 number


def widths(seed: int) -> tuple[int, ...]:
    return WIDTHS.get(seed, (8, 24 + seed % 17, 30 + seed % 13, 3 + seed % 5))


def make(seed: int) -> nn.Sequential:
    """Linear layers of the seed's widths with ReLUs between (only their sizes are counted)."""
    w = widths(seed)
    layers = []
    for a, b in zip(w, w[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def shapes_of(seed: int) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in make(seed).parameters()]


def harness(student, rank, layout, rec, seed, **_):
    join_group()
    w = layout.world_size
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


# The grader's side: the exact count --------------------------------------------------------


def zero1_owners(shapes, w: int) -> list[int]:
    """The rank ZeroRedundancyOptimizer gives each tensor: largest first, to the rank with the fewest
    numbers so far (the lowest such rank)."""
    sizes = [_numel(s) for s in shapes]
    owners, held = [0] * len(shapes), [0] * w
    for i in sorted(range(len(shapes)), key=lambda i: -sizes[i]):  # stable: equal sizes keep their order
        rank = held.index(min(held))
        owners[i], held[rank] = rank, held[rank] + sizes[i]
    return owners


def fsdp_rows(rows: int, w: int, rank: int) -> int:
    """The rows of a tensor that fully_shard leaves on `rank`: chunks of ceil(rows / w), in rank order."""
    chunk = -(-rows // w)
    return max(0, min(chunk, rows - rank * chunk))


def counted(scheme: str, shapes, w: int) -> list[dict[str, int]]:
    out = []
    for rank in range(w):
        whole = sum(_numel(s) for s in shapes)
        if scheme == "FSDP":
            share = sum(fsdp_rows(s[0], w, rank) * _numel(s[1:]) for s in shapes)
            out.append({"parameters": FLOAT * share, "gradients": FLOAT * share, "optimizer": 2 * FLOAT * share})
            continue
        if scheme == "ZeRO-1":
            owners = zero1_owners(shapes, w)
            mine = sum(_numel(s) for s, owner in zip(shapes, owners) if owner == rank)
        else:
            mine = whole
        out.append({"parameters": FLOAT * whole, "gradients": FLOAT * whole, "optimizer": 2 * FLOAT * mine})
    return out


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _predictions(world, r):
    """This rank's predictions by scheme, or the message saying why one cannot be read."""
    got = {}
    for event in r.of("predicted"):
        scheme, value = event.get("scheme"), event.get("value")
        if event.get("error"):
            return None, f"{world.label}: predict({scheme!r}, ...) raised {event['error']}"
        if not (isinstance(value, list) and len(value) == world.world_size
                and all(isinstance(v, dict) and all(isinstance(v.get(p), (int, float)) for p in PARTS) for v in value)):
            return None, (f"{world.label}: predict({scheme!r}, ...) returned {str(value)[:120]}, not "
                          f"a list of {world.world_size} dicts with numbers for {', '.join(PARTS)}")
        got[scheme] = value
    return got, None


def _part(part: str):
    def verify(runs):
        seed = runs.params["seed"]
        shapes = shapes_of(seed)
        for world in sorted(runs, key=lambda w: -w.world_size):
            r = world.ranks[0]
            predicted, problem = _predictions(world, r)
            if problem:
                return problem
            for scheme in SCHEMES:
                want = [c[part] for c in counted(scheme, shapes, world.world_size)]
                said = [v[part] for v in predicted[scheme]]
                if said != want:
                    seen = [_measured(o, scheme).get(part) for o in world.ranks]
                    return (f"{world.label}, {scheme}: you predicted {said} bytes of {part} per rank; "
                            f"the ranks measured {seen}")
    return verify


def _measured(r, scheme: str) -> dict:
    return next((e.get("value") or {} for e in r.of("measured") if e.get("scheme") == scheme), {})


def _work(runs):
    if not any(r.of("predicted") for _, r in each_rank(runs)):
        return "no rank got as far as predicting"


EXERCISE = Exercise(
    id="3.6",
    title="predict, then measure, the training state per rank",
    kind="function", on_cpu=True,
    entry="predict",
    harness=harness,
    params=lambda seed: {"seed": seed},
    work=_work,
    warm_imports=("torch._dynamo", "torch.distributed.optim", "torch.distributed.fsdp"),
    timeout=40.0,
    checks=[
        Check("parameters per rank: whole under DDP and ZeRO-1, each tensor's rows cut in W under FSDP", 2,
              _part("parameters"), hint="FSDP: rank r holds min(c, rows - r c) rows of each tensor, c = ceil(rows / W)"),
        Check("gradients per rank: like the parameters they belong to", 2, _part("gradients"),
              hint="gradients are shaped like their parameters: whole under DDP and ZeRO-1 (stage 1 shards the "
                   "optimizer state only), sharded with the parameters under FSDP"),
        Check("Adam's two moments per rank: whole under DDP, whole tensors dealt out under ZeRO-1, sharded under FSDP",
              3, _part("optimizer"),
              hint="8 bytes per parameter whose state the rank holds; ZeRO-1 deals whole tensors, largest first, "
                   "each to the rank holding the fewest numbers so far"),
    ],
)
