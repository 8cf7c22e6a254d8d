"""Exercise 2.1: a rank ready to train: it joins the group torchrun prepared, takes its device, and reads its share of the data."""

from __future__ import annotations

from autograder.checks import Check, each_rank, shares_disjoint_and_covering
from autograder.exercises import Exercise
from autograder.hints import Hint
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
        types = r.result.get("types") or []
        odd = [(name, t) for name, t in zip(names, types[:3]) if t != "int"]
        if odd:
            return (f"{world.label}: rank {r.rank} returned {', '.join(f'{n} as a {t}' for n, t in odd)}, not an int: "
                    "the environment holds text, and a rank of '0' is never equal to 0")


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
        Check("process group initialized when setup() returns", 1, _initialized, hint=Hint(
            idea="`setup` must leave this process a member of the job's process group: the sampler, DDP and every "
                 "collective use the default group, which exists only once the process has joined it.",
            section="3. `init_process_group` comes first",
            where="The body of your `setup`: whether every path through it joins the group before it returns.",
            how="Have `setup` join the default process group, with the backend it chose, before it returns; torchrun's "
                "environment already tells the process who and where the others are.",
            lines_of=("init_process_group",))),
        Check("backend: gloo on CPUs, nccl on GPUs", 1, _backend, needs="partial", hint=Hint(
            idea="The backend must fit where the tensors live: nccl moves GPU tensors, gloo CPU tensors, and the "
                 "course's rule takes nccl only when the machine has a GPU for each of its processes.",
            section="4. One device per process",
            where="The backend your `setup` asks init_process_group for, and the test that chooses it.",
            how="Choose the backend by the course's device rule: nccl only when this machine has at least as many GPUs "
                "as processes on it (LOCAL_WORLD_SIZE), gloo otherwise; `pick` from section 4 applies that rule.",
            lines_of=("enter:init_process_group",))),
        Check("rank, local rank and world size come from the launcher's environment", 1, _environment, hint=Hint(
            idea="torchrun gives each process its place in the job: RANK is its id in the whole job, LOCAL_RANK its "
                 "id on this machine, WORLD_SIZE the number of processes. The check runs two simulated machines, so "
                 "the rank and the local rank differ.",
            section="2. Rank, local rank and world size",
            where="The first three values your `setup` returns: where each one is read from, and their order.",
            how="Take each number from the variable (or the process group's query) that means it, the global id for "
                "the rank and the id on this machine for the local rank, as ints, and return them in the order "
                "rank, local rank, world size.")),
        Check("rendezvous through the launcher's environment (no hard-coded address or port)", 1, _rendezvous,
              needs="partial", hint=Hint(
                  idea="Under torchrun the processes meet where the launcher says, through MASTER_ADDR and "
                       "MASTER_PORT; an address or port of your own can collide with other jobs.",
                  section="3. `init_process_group` comes first",
                  where="The arguments of the init_process_group call in your `setup`.",
                  how="Give init_process_group the backend and no init_method, address or port of your own (naming "
                      "the environment as the rendezvous method is fine too), so that it reads what the launcher set.",
                  lines_of=("enter:init_process_group",))),
        Check("device: cpu on CPUs, cuda:LOCAL_RANK on GPUs", 1, _device, hint=Hint(
            idea="Each process works on one device: the GPU numbered by its local rank when the machine has one for "
                 "each process, else the CPU. `setup` returns it last.",
            section="4. One device per process",
            where="The device your `setup` builds and returns last, and the condition that picks a GPU or the CPU.",
            how="Build the device from the same decision as the backend: the CPU with gloo, and with nccl the GPU of "
                "this process's local rank, never its global rank.")),
        Check("each process bound to its own GPU: torch.cuda.set_device(local_rank)", 1, _bound_to_local_rank,
              gpu_only=True, hint=Hint(
                  idea="Every process starts with GPU 0 as its current device: unless it claims its own GPU, its "
                       "tensors and its CUDA context land on GPU 0 while the other GPUs idle.",
                  section="4. One device per process",
                  where="Your `setup` on GPUs: whether it makes the local rank's GPU the current device, and when.",
                  how="Make the GPU of this process's local rank its current CUDA device, once, in `setup`, before "
                      "anything touches a GPU (the lesson does it before joining the group).",
                  lines_of=("init_process_group",))),
        Check("each epoch the ranks' samples are disjoint and cover the dataset", 2, _disjoint_and_covering, hint=Hint(
            idea="In every epoch each sample must be read by exactly one process; a loader that knows nothing of the "
                 "other ranks gives every process the whole dataset.",
            section="6. `DistributedSampler`: a different share of the data for each rank",
            where="The sampler your `build_loader` gives the DataLoader: whether it knows this process's rank and how "
                  "many processes there are, and whether every process shuffles with the same seed.",
            how="Give the loader a sampler that deals each epoch's indices out among the processes by rank and world "
                "size, each index to one process only, from one order that every process shuffles alike (the same "
                "seed everywhere); DistributedSampler does this, taking both from the process group.")),
        Check("the order changes every epoch once set_epoch is called", 1, _order_changes, hint=Hint(
            idea="The order must change every epoch: the training loop tells the sampler the epoch through set_epoch, "
                 "and the sampler's shuffle must depend on it.",
            section="6. `DistributedSampler`: a different share of the data for each rank",
            where="How your loader's sampler orders the indices: whether it shuffles at all, and whether the epoch "
                  "given to set_epoch reaches the seed of its shuffle.",
            how="Use a sampler that shuffles, seeded by the epoch it was told (the same seed on every rank, so the "
                "shares stay disjoint): DistributedSampler does this unless its shuffling is turned off; a sampler "
                "of your own needs a set_epoch that changes its order.")),
        Check("no shuffle=True beside the sampler", 1, _no_shuffle_beside_sampler, needs="partial", hint=Hint(
            idea="A loader with a sampler takes its order from the sampler; PyTorch refuses a request to shuffle on "
                 "top of one.",
            section="6. `DistributedSampler`: a different share of the data for each rank",
            where="The arguments of the DataLoader your `build_loader` creates.",
            how="Leave the shuffling to the sampler and don't ask the DataLoader to shuffle as well: its default "
                "does not.")),
        Check("batches of batch_size samples on every rank", 1, _batch_size, hint=Hint(
            idea="batch_size is per process: each rank's batches hold batch_size samples, and the global batch is "
                 "that times the world size.",
            section="Averaged, not summed: the global batch and the learning rate",
            where="The batch size your `build_loader` gives the DataLoader.",
            how="Pass the batch_size argument to the loader as it is, neither divided nor multiplied by the world "
                "size.")),
    ],
)
