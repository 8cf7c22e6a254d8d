"""Exercise 2.1: a rank ready to train: it joins the group torchrun prepared, takes its device, and reads its share of the data."""

from __future__ import annotations

from autograder.checks import Check, each_rank, shares_disjoint_and_covering
from autograder.exercises import Exercise
from autograder.launch import Layout
from ddpcourse.given.ex2_1 import BATCH, EPOCHS, N


def layout(world_size: int) -> Layout:
    """Even world sizes run as two simulated nodes, so that LOCAL_RANK differs from RANK."""
    return Layout(world_size, nodes=2 if world_size % 2 == 0 else 1)


def _expected(r, backend: str) -> list[str]:
    # judged from the backend, never torch.cuda here: initializing CUDA in the grader breaks later forks
    env = r.result["env"]
    device = "cuda:" + env["LOCAL_RANK"] if backend == "nccl" else "cpu"
    return [env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], device]


def _initialized(runs):
    for world, r in each_rank(runs):
        if not r.result["initialized"]:
            return f"{world.label}: rank {r.rank}: no process group after setup() returned"


def _students_call(r) -> dict | None:
    """The rank's own init_process_group call: where setup() joined nothing, the harness joins the group itself."""
    return next((e for e in r.of("init_process_group_called") if not e.get("by_grader")), None)


def _backend(runs):
    want = runs.backend
    for world, r in each_rank(runs):
        called = _students_call(r)
        if called and called["requested_backend"] not in (want, "None"):
            return (f"{world.label}: rank {r.rank} asked for backend "
                    f"{called['requested_backend']!r} on a machine where {want!r} is the one that works")


def _environment(runs):
    names = ("rank", "local rank", "world size")
    for world, r in each_rank(runs):
        got = r.result["returned"]
        if not isinstance(got, list) or len(got) != 4:
            return f"setup() must return (rank, local_rank, world_size, device); it returned {got}"
        want = _expected(r, runs.backend)[:3]
        if got[:3] != want and sorted(got[:3]) == sorted(want) and len(set(want)) == 3:
            return (f"{world.label} ({world.layout.nodes} node(s)): rank {r.rank} returned "
                    f"({', '.join(got[:3])}), the launcher's numbers ({', '.join(want)}) in another order: setup() returns "
                    "(rank, local_rank, world_size, device)")
        for name, g, w in zip(names, got[:3], want):
            if g != w:
                return (f"{world.label} ({world.layout.nodes} node(s)): rank {r.rank} "
                        f"returned {name} {g}, but the launcher set {w}")


def _rendezvous(runs):
    for world, r in each_rank(runs):
        called = _students_call(r)
        if called and called["init_method"] not in (None, "env://"):
            return (f"rank {r.rank} passed init_method={called['init_method']!r}: a fixed address or port "
                    "collides with other jobs; the launcher already set MASTER_ADDR and MASTER_PORT")


def _device(runs):
    for world, r in each_rank(runs):
        got, want = r.result["returned"], _expected(r, runs.backend)
        if isinstance(got, list) and len(got) == 4 and got[3] != want[3]:
            return f"{world.label}: rank {r.rank} returned device {got[3]}, expected {want[3]}"


def _bound_to_local_rank(runs):
    for world, r in each_rank(runs):
        bound = [e["device"] for e in r.of("cuda_set_device")]
        want = "cuda:" + r.result["env"]["LOCAL_RANK"]
        if bound != [want]:
            return f"{world.label}: rank {r.rank} called set_device with {bound or 'nothing'}, expected {want}"


def _disjoint_and_covering(runs):
    for world in runs:
        for epoch in range(EPOCHS):
            shares = {r.rank: r.result["epochs"][epoch]["indices"] for r in world.ranks}
            message = shares_disjoint_and_covering(shares, N, world.world_size, f"{world.label}, epoch {epoch}")
            if message:
                sampler = world.ranks[0].result["sampler"]
                return message + (f"; the loader's sampler is a {sampler}, which knows nothing of the other ranks"
                                  if sampler in ("RandomSampler", "SequentialSampler") else "")


def _order_changes(runs):
    for world in runs:
        orders = [world.ranks[0].result["epochs"][e]["indices"] for e in range(EPOCHS)]
        if orders[0] == sorted(orders[0]):
            return f"{world.label}: rank 0 reads its share in index order: nothing is shuffled"
        if len({tuple(o) for o in orders}) < EPOCHS:
            return (f"{world.label}: rank 0 read its share in the same order in two epochs, although the "
                    "training loop called loader.sampler.set_epoch(epoch) before each: the order does not follow the epoch")


def _no_shuffle_beside_sampler(runs):
    for world, r in each_rank(runs):
        for loader in r.of("dataloader"):
            if loader.get("shuffle") and loader.get("sampler"):
                return (f"rank {r.rank}: DataLoader(shuffle=True, sampler=...) at {loader['caller']}; "
                        "the two are mutually exclusive (PyTorch raises ValueError)")


def _batch_size(runs):
    for world, r in each_rank(runs):
        sizes = r.result["epochs"][0]["batch_sizes"]
        if sizes and max(sizes) != BATCH:
            return f"{world.label}: rank {r.rank}'s batches hold {max(sizes)} samples, asked for {BATCH}"


def _work(runs):
    """Nothing of the exercise was done: setup() joined no group on any rank, and the loader gave no sample."""
    ranks = [r for w in runs for r in w.ranks if isinstance(r.result, dict)]
    if any(r.result.get("initialized") or any(e.get("indices") for e in r.result.get("epochs", [])) for r in ranks):
        return None
    return "setup() joined no process group and build_loader's loader gave no sample"


EXERCISE = Exercise(
    id="2.1",
    title="a rank ready to train: process group, device and its share of the data",
    kind="function",
    entry=("setup", "build_loader"),
    params=lambda seed: {"seed": seed},
    layout=layout,
    work=_work,
    checks=[
        Check("process group initialized when setup() returns", 1, _initialized,
              hint="call dist.init_process_group(backend) inside setup()"),
        Check("backend: gloo on CPUs, nccl on GPUs", 1, _backend, needs="partial",
              hint="the course's device rule: nccl when this machine has a GPU for each of its processes, else gloo"),
        Check("rank, local rank and world size come from the launcher's environment", 1, _environment,
              hint="RANK, LOCAL_RANK and WORLD_SIZE: LOCAL_RANK is the index on this machine"),
        Check("rendezvous through the launcher's environment (no hard-coded address or port)", 1, _rendezvous,
              needs="partial", hint="call init_process_group(backend) without init_method"),
        Check("device: cpu on CPUs, cuda:LOCAL_RANK on GPUs", 1, _device,
              hint="on GPUs the device of this process's local rank, on CPUs the CPU"),
        Check("each process bound to its own GPU: torch.cuda.set_device(local_rank)", 1, _bound_to_local_rank,
              gpu_only=True, hint="call torch.cuda.set_device(local_rank) before creating tensors on the GPU"),
        Check("each epoch the ranks' samples are disjoint and cover the dataset", 2, _disjoint_and_covering,
              hint="the loader's sampler must know this rank and the world size; DistributedSampler takes them "
                   "from the process group"),
        Check("the order changes every epoch once set_epoch is called", 1, _order_changes,
              hint="the sampler shuffles, seeded by the epoch that set_epoch gives it (DistributedSampler's "
                   "shuffle=True, its default)"),
        Check("no shuffle=True beside the sampler", 1, _no_shuffle_beside_sampler, needs="partial",
              hint="the sampler shuffles; leave DataLoader's shuffle at its default (False)"),
        Check("batches of batch_size samples on every rank", 1, _batch_size,
              hint="batch_size is per process: pass it to the DataLoader unchanged"),
    ],
)
