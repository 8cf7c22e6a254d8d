"""Exercise 1.5's harness: per_rank_costs on every case; then one step of the first model under each scheme,
with the course's own ring all-reduce, pipeline and tensor-parallel MLP, measuring what each rank holds
(parameters, gradients, Adam's moments) and sends (its traced messages). The step's Adam is the course's
(ddpcourse.optim.Adam), which keeps the state torch.optim.Adam keeps: in a graded rank torch.optim would
first import torch._dynamo.

With the student's own cells of 1.1-1.4 (``companions``), the same step runs with their code instead.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddpcourse.given.ex1_5 import MEASURED, OWN, QUANTITIES, SCHEMES, cases
from ddpcourse.optim import Adam
from ranks.rig import join_group, number


def harness(student, place, rec, companions=None, **_):
    join_group()
    rank, w = place.rank, place.world_size
    if companions is not None:  # the launch of the student's own 1.1-1.4 cells (Exercise.uses)
        _own_runs(companions, rank, w, rec)
        dist.barrier()
        dist.destroy_process_group()
        return None
    results = _predictions(student)
    for scheme in SCHEMES:
        rec.event("measure", index=scheme)
        held = _MEASURED_RUNS[scheme](rank, w)
        rec.event("measured", index=scheme, **held)
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
    return results


def _predictions(student) -> list[dict]:
    results = []
    for scheme, blocks, d, h, w, rows in cases():
        try:
            got = student.per_rank_costs(scheme, blocks, d, h, w, rows)
            results.append({q: number(got.get(q)) if isinstance(got, dict) else None for q in QUANTITIES})
        except NotImplementedError:
            raise  # the exercise cell as released: said as such
        except Exception as exc:
            results.append({"error": f"{type(exc).__name__}: {str(exc)[:200]}"})
    return results


# The measured runs: one step of MEASURED under each scheme, on the launch's ranks -------------

def ring_all_reduce(t: torch.Tensor) -> torch.Tensor:
    """Sum `t` over the ranks in place with point-to-point messages: reduce-scatter, then all-gather,
    chunks cut with tensor_split (exercise 1.2's algorithm)."""
    w, r = dist.get_world_size(), dist.get_rank()
    chunks = list(torch.tensor_split(t.view(-1), w))
    for s, reduce in [(s, True) for s in range(w - 1)] + [(s, False) for s in range(w - 1)]:
        out, into = ((r - s) % w, (r - s - 1) % w) if reduce else ((r + 1 - s) % w, (r - s) % w)
        incoming = torch.empty_like(chunks[into])
        request = dist.isend(chunks[out].clone(), (r + 1) % w)
        dist.recv(incoming, (r - 1) % w)
        request.wait()
        chunks[into].add_(incoming) if reduce else chunks[into].copy_(incoming)
    return t


def _model(blocks: int) -> torch.nn.Sequential:
    """`blocks` MLP blocks of MEASURED's widths: Linear(d, h), GELU, Linear(h, d) each."""
    _, d, h, _ = MEASURED
    return torch.nn.Sequential(*[layer for _ in range(blocks)
                                 for layer in (torch.nn.Linear(d, h), torch.nn.GELU(), torch.nn.Linear(h, d))])


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _held(params: list[torch.Tensor], optimizer) -> dict[str, int]:
    """The bytes of parameters, gradients and Adam's two moments this rank holds, after a step."""
    optimizer.step()
    states = optimizer.state.values() if isinstance(optimizer.state, dict) else optimizer.state  # torch's, or ours
    moments = [t for state in states for k, t in state.items() if k in ("exp_avg", "exp_avg_sq")]
    return {"parameters": _bytes(params), "gradients": _bytes(p.grad for p in params if p.grad is not None),
            "optimizer": _bytes(moments)}


def _local_gradients(rank: int, w: int) -> torch.nn.Sequential:
    """The whole model, its gradients from this rank's share of the rows (data parallelism before averaging)."""
    blocks, d, _, rows = MEASURED
    model = _model(blocks)
    x = torch.tensor_split(torch.randn(rows, d, generator=torch.Generator().manual_seed(0)), w)[rank]
    model(x).square().mean().backward()
    return model


def _data_step(rank: int, w: int, adam=Adam) -> dict[str, int]:
    params = list(_local_gradients(rank, w).parameters())
    gradients = torch.cat([p.grad.flatten() for p in params])
    ring_all_reduce(gradients).div_(w)
    torch.nn.utils.vector_to_parameters(gradients, [p.grad for p in params])
    return _held(params, adam(params, lr=1e-3))


def _pipeline_step(rank: int, w: int, adam=Adam) -> dict[str, int]:
    blocks, d, h, rows = MEASURED
    stage = _model(len(torch.tensor_split(torch.arange(blocks), w)[rank]))
    x = torch.randn(rows, d, generator=torch.Generator().manual_seed(0))
    if rank > 0:
        dist.recv(x, rank - 1)
    x.requires_grad_()
    out = stage(x)
    if rank < w - 1:
        dist.send(out.detach(), rank + 1)
        grad = torch.empty(rows, d)
        dist.recv(grad, rank + 1)
        out.backward(grad)
    else:
        out.square().mean().backward()
    if rank > 0:
        dist.send(x.grad, rank - 1)
    params = list(stage.parameters())
    return _held(params, adam(params, lr=1e-3)) if params else {"parameters": 0, "gradients": 0, "optimizer": 0}


class _Copy(torch.autograd.Function):  # f: the input to every rank forward, its gradient all-reduced back
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return ring_all_reduce(grad.clone())


class _Sum(torch.autograd.Function):  # g: the partial outputs all-reduced forward, the gradient passed back
    @staticmethod
    def forward(ctx, x):
        return ring_all_reduce(x.clone())

    @staticmethod
    def backward(ctx, grad):
        return grad


def _tensor_step(rank: int, w: int, adam=Adam) -> dict[str, int]:
    blocks, d, h, rows = MEASURED
    cols = h // w
    params = []
    y = torch.randn(rows, d, generator=torch.Generator().manual_seed(0)).requires_grad_()
    for _ in range(blocks):
        a, a_bias = torch.randn(cols, d, requires_grad=True), torch.zeros(cols, requires_grad=True)
        b, b_bias = torch.randn(d, cols, requires_grad=True), torch.zeros(d, requires_grad=True)
        params += [a, a_bias, b, b_bias]
        y = _Sum.apply(torch.nn.functional.gelu(_Copy.apply(y) @ a.T + a_bias) @ b.T) + b_bias
    y.square().mean().backward()
    return _held(params, adam(params, lr=1e-3))


_MEASURED_RUNS = {"data": _data_step, "pipeline": _pipeline_step, "tensor": _tensor_step}


def _own_runs(companions: dict, rank: int, w: int, rec):
    """Each exercise whose cell came, in turn. A rank whose code raises stops there: the others would
    wait for it in their next message (the grader sees the deadlock), and the events say how far each got."""
    for exercise_id in OWN:
        cell = companions.get(exercise_id)
        if cell is None:
            continue
        if isinstance(cell, str):
            rec.event("own_failed", index=exercise_id, error=f"the cell could not be imported: {cell}")
            return
        rec.event("own", index=exercise_id)
        try:
            held = _OWN_STEPS[exercise_id](cell, rank, w)
        except NotImplementedError:  # the cell as released: every rank alike, so the next one can run
            rec.event("own_not_done", index=exercise_id)
            continue
        except Exception as exc:
            rec.event("own_failed", index=exercise_id, error=f"{type(exc).__name__}: {str(exc)[:200]}")
            return
        rec.event("own_done", index=exercise_id, parameters=held)


def _own_data_step(average_gradients, rank: int, w: int) -> int:
    """Data parallelism: this rank's gradients on its share of the rows, then `average_gradients(model)`."""
    model = _local_gradients(rank, w)
    average_gradients(model)
    return _bytes(model.parameters())


def _ring_of(cell):
    """1.2's ring_all_reduce used as 1.1's average_gradients: all the gradients as one tensor."""
    def average_gradients(model):
        params = list(model.parameters())
        gradients = torch.cat([p.grad.flatten() for p in params])
        cell.ring_all_reduce(gradients)
    return average_gradients


def _own_pipeline_step(cell, rank: int, w: int) -> int:
    blocks, d, h, rows = MEASURED
    stage = cell.stage_of(_model(blocks), rank, w)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(rows, d, generator=g), torch.randn(rows, d, generator=g)
    cell.pipeline_step(stage, x, y, 2)
    return _bytes(stage.parameters())


def _own_tensor_step(cell, rank: int, w: int) -> int:
    """The student's MLP for each block. 1.4's has no biases; the bytes held count them as the model has
    them: the first Linear's split with its columns, the second's whole."""
    blocks, d, h, rows = MEASURED
    g = torch.Generator().manual_seed(0)
    y, held = torch.randn(rows, d, generator=g).requires_grad_(), 0
    for _ in range(blocks):
        a, b = (t.detach().clone().requires_grad_()
                for t in cell.shard_weights(torch.randn(d, h, generator=g), torch.randn(h, d, generator=g), rank, w))
        held += (a.numel() + b.numel() + h // w + d) * a.element_size()
        y = cell.tensor_parallel_mlp(y, a, b)
    y.square().mean().backward()
    return held


_OWN_STEPS = {"1.1": lambda cell, rank, w: _own_data_step(cell.average_gradients, rank, w),
              "1.2": lambda cell, rank, w: _own_data_step(_ring_of(cell), rank, w),
              "1.3": _own_pipeline_step, "1.4": _own_tensor_step}
