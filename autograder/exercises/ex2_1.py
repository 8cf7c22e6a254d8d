"""Exercise 2.1: join the process group torchrun prepared and bind the process to its device."""

from __future__ import annotations

from autograder.checks import Check, each_rank
from autograder.exercises import Exercise
from autograder.launch import Layout


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


def _backend(runs):
    want = runs.backend
    for world, r in each_rank(runs):
        called = r.first("init_process_group_called")
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
        called = r.first("init_process_group_called")
        if called is None:
            return f"{world.label}: rank {r.rank} never called init_process_group"
        if called["init_method"] not in (None, "env://"):
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


EXERCISE = Exercise(
    id="2.1",
    title="process group and device",
    kind="function",
    entry="setup",
    layout=layout,
    timeout=10.0,
    work=lambda runs: None if any(r.of("init_process_group_called") for w in runs for r in w.ranks) else
    "init_process_group was never called",  # joining a group takes well under a second; a wrong rendezvous waits forever
    checks=[
        Check("process group initialized when setup() returns", 1, _initialized,
              hint="call dist.init_process_group(backend) inside setup()"),
        Check("backend: gloo on CPUs, nccl on GPUs", 1, _backend, needs="partial",
              hint='backend = "nccl" if torch.cuda.is_available() else "gloo"'),
        Check("rank, local rank and world size come from the launcher's environment", 1, _environment,
              hint="read RANK, LOCAL_RANK and WORLD_SIZE from os.environ; LOCAL_RANK is the index on this machine"),
        Check("rendezvous through the launcher's environment (no hard-coded address or port)", 1, _rendezvous,
              needs="partial", hint="call init_process_group(backend) without init_method"),
        Check("device: cpu on CPUs, cuda:LOCAL_RANK on GPUs", 1, _device,
              hint='torch.device("cuda", local_rank) on GPUs, torch.device("cpu") otherwise'),
        Check("each process bound to its own GPU: torch.cuda.set_device(local_rank)", 1, _bound_to_local_rank,
              gpu_only=True, hint="call torch.cuda.set_device(local_rank) before creating tensors on the GPU"),
    ],
)
