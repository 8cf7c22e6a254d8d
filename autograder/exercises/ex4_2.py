"""Exercise 4.2: survive a killed worker, with snapshots and a resume, under the real torchrun.

The student adds to 4.1's script a snapshot (model, optimizer, epoch) written by rank 0 at the end of
every epoch, and a resume from it when the job starts. The grader runs the script three times under
``torchrun --max-restarts=2`` with two processes: never interrupted; with rank 1 killed (SIGKILL)
in the middle of epoch 2; and with rank 0 killed while it writes its second file; and once more as
two agents of one job, one process each, as on two machines (a writer chosen by LOCAL_RANK shows
there only). Each killed job must finish after torchrun restarts it, with weights equal to the
uninterrupted run's bit for bit, and without training again an epoch that a snapshot already held.
"""

from __future__ import annotations

from pathlib import Path

import torch

from autograder import jobs
from autograder.checks import FIX, Check, runs_to_the_end
from autograder.exercises import Exercise
from ddpcourse import TinyNet

N, EPOCHS, GLOBAL_BATCH, LR, OUT, SNAPSHOT = 96, 4, 12, 0.05, "trained.pt", "snapshot.pt"
STEPS_PER_EPOCH = N // GLOBAL_BATCH
STEPS = EPOCHS * STEPS_PER_EPOCH
ARGS = ("--epochs", str(EPOCHS), "--global-batch", str(GLOBAL_BATCH), "--lr", str(LR), "--out", OUT,
        "--snapshot", SNAPSHOT)
KILLED_IN_EPOCH = {"rank": 1, "attempt": 0, "when": "step", "n": 2 * STEPS_PER_EPOCH + 3}
KILLED_WRITING = {"rank": 0, "attempt": 0, "when": "save", "n": 2}
# Every job's workers ask the rank host before going on after each step and save (ranks/faults.py), the
# never interrupted one's too: no worker can tell from its own process which job it is in.
JOBS = (
    jobs.standalone(2, ARGS, restarts=2, name="torchrun, 2 processes, never interrupted", planted=True),
    jobs.standalone(2, ARGS, restarts=2, fault=KILLED_IN_EPOCH, name="torchrun, 2 processes, rank 1 killed in epoch 2"),
    jobs.standalone(2, ARGS, restarts=2, fault=KILLED_WRITING,
                    name="torchrun, 2 processes, rank 0 killed while writing its 2nd file"),
)


def two_machines() -> jobs.Job:
    """The job on two machines, on a rendezvous of its own each grading: a writer chosen by LOCAL_RANK shows."""
    return jobs.machines(2, 1, ARGS, restarts=2, planted=True, name="torchrun, 2 machines of 1 process, never interrupted")


def steps(r) -> list[torch.Tensor]:
    """A rank's parameters after each of its optimizer steps, in order."""
    return r.kept_all("optimizer step")


def sampler_epochs(r) -> list:
    """The epochs a rank's sampler was iterated at, in order (set_epoch's, as the trace saw them)."""
    return [e.get("epoch") for e in r.of("sampler_iter")]


def uninterrupted(runs):
    return next((w for w in runs if not w.job.endswith(("epoch 2", "2nd file"))), None)


def killed(runs):
    return [w for w in runs if w.job.endswith(("epoch 2", "2nd file"))]


def fault(world) -> dict | None:
    """The kill, as the rank host that made it said (no worker records it: none knows where it lands)."""
    return next((f for f in world.faults if f.get("attempt") == 0), None)


def _work(runs):
    if not any(r.of("optimizer_step") for w in runs for a in w.attempts for r in a):
        return "no job took a single optimizer step"
    saved = [e for w in runs for a in w.attempts for r in a for e in r.of("save")
             if Path(str(e.get("path"))).name != OUT]
    if not saved:
        return (f"no snapshot was ever written: only {OUT}. This is the script as given; write a snapshot at the "
                "end of every epoch, and resume from it when the job starts")


def _restarted(runs):
    for world in killed(runs):
        if fault(world) is None:
            what = ("rank 0 never wrote a 2nd file" if world.job.endswith("2nd file") else
                    f"rank 1 never took step {KILLED_IN_EPOCH['n']}")
            return (f"{world.label}: the grader had nothing to interrupt: {what}. Write a snapshot at the end of "
                    "every epoch (rank 0), and train every epoch")
        if len(world.attempts) < 2:
            return f"{world.label}: torchrun did not start the workers again after the kill"
        counts = {(r.first("worker") or {}).get("env", {}).get("TORCHELASTIC_RESTART_COUNT") for r in world.attempts[1]}
        if counts != {"1"}:
            return f"{world.label}: the restarted workers saw TORCHELASTIC_RESTART_COUNT {sorted(map(str, counts))}"


def _snapshot(runs) -> tuple[dict | None, str | None]:
    world = uninterrupted(runs)
    found = world.exports.get(str(world.workdir / "run" / SNAPSHOT), {}) if world else {}
    if found.get("error") == "missing":
        return None, f"{world.label}: no {SNAPSHOT} after the run: keep the last snapshot (--snapshot names it)"
    if "error" in found or found.get("type") != "dict":
        return None, (f"{world.label}: {SNAPSHOT} could not be read with torch.load(weights_only=True) as a "
                      f"dictionary ({found.get('error') or found.get('type')})")
    return found, None


def _snapshot_holds_model_optimizer_epoch(runs):
    held, problem = _snapshot(runs)
    if problem:
        return problem
    arrays, values = held.get("arrays", {}), held.get("values", {})
    model = TinyNet()
    names = {}
    for name, p in model.named_parameters():
        match = [k for k in arrays if (k == name or k.endswith("." + name)) and tuple(arrays[k].shape) == tuple(p.shape)
                 and "momentum" not in k and not k.split(".")[0].startswith("optim")]
        if not match:
            return f"{SNAPSHOT} holds no {name} of TinyNet's shape: save model.state_dict() in it"
        names[name] = match[0]
    if not any("momentum_buffer" in k for k in arrays):
        return (f"{SNAPSHOT} holds no optimizer state (SGD's momentum buffers): save optimizer.state_dict() too, or a "
                "resumed run steps differently from an uninterrupted one")
    if not any(isinstance(v, int) and not isinstance(v, bool) for k, v in values.items() if _not_optimizer(k)):
        return f"{SNAPSHOT} holds no epoch number: save the epoch it finished, to resume after it"
    final = uninterrupted(runs).ranks[0].final_params()
    saved = torch.cat([torch.from_numpy(arrays[names[n]]).flatten() for n, _ in model.named_parameters()])
    if final is None or saved.shape != final.shape or not torch.equal(saved, final):
        return f"the last {SNAPSHOT} does not hold the weights after the last epoch: write it at the end of every epoch"


def _not_optimizer(key: str) -> bool:
    """A key outside an optimizer's state dict (whose param_groups hold integers of their own)."""
    return ".param_groups." not in key and ".state." not in key


def _one_writer(runs):
    for world in runs:
        for k, attempt in enumerate(world.attempts):
            writers = sorted({r.rank for r in attempt if r.of("save")})
            if writers and writers != [0]:
                return (f"{world.label}, attempt {k}: torch.save was called by rank(s) {writers}{FIX}one rank, "
                        "global rank 0, writes the snapshot (every rank holds the same weights)")


def _atomic(runs):
    world = next((w for w in runs if w.job.endswith("2nd file")), None)
    event = fault(world) if world else None
    if event is None:
        return f"{world.label}: rank 0 never wrote a 2nd file, so no write could be interrupted" if world else None
    path = event.get("path")
    target = str(world.workdir / "run" / SNAPSHOT)
    if path == target:
        copying = any(e.get("path") == target for a in world.attempts[:1] for r in a if r.rank == 0
                      for e in r.of("copy"))
        return (f"{world.label}: rank 0 was killed while it wrote {SNAPSHOT} itself, and left it half written: "
                "a restart then finds no snapshot it can load"
                + (". A copy onto it is such a write (shutil.move copies when the file comes from another file "
                   "system, as the system's temporary directory may be)" if copying else "")
                + f"{FIX}write to a temporary file in the same directory, then os.replace() it onto the snapshot")


def _goes_on_from_the_snapshot(runs):
    """Observed in the restarted ranks' state, however it got there (every rank loading the file, or rank 0
    loading it and sending it on): rank 0 starts from the snapshot's weights, and every rank goes on at its
    epoch and with its optimizer state (a rank stepping from other momentum leaves rank 0's weights)."""
    base = uninterrupted(runs)
    want = steps(base.ranks[0]) if base and base.ranks else []
    for world in killed(runs):
        start = _resume_point(world)
        if not start or len(want) < start:
            continue  # no whole snapshot was in place when the job restarted: nothing to go on from
        for k, attempt in enumerate(world.attempts[1:], start=1):
            ranks = {r.rank: r for r in attempt}
            if 0 not in ranks:
                continue
            first = next((v for label, v in ranks[0].snapshots if label.startswith("epoch")), None)
            # which snapshot is charged by the check on epochs trained twice: here, that it is one
            snapshots = [want[n - 1] for n in range(STEPS_PER_EPOCH, len(want) + 1, STEPS_PER_EPOCH)]
            if first is not None and not any(torch.equal(first, w) for w in snapshots):
                return (f"{world.label}, attempt {k}: rank 0 began training from weights that no snapshot held "
                        f"(the last one before the kill held the weights after step {start}){FIX}load the "
                        "snapshot when the job starts")
            problem = _ranks_apart(ranks)
            if problem:
                return f"{world.label}, attempt {k}: {problem}"


def _ranks_apart(ranks: dict) -> str | None:
    """Where a restarted rank left rank 0: another epoch, or other weights after a step."""
    epoch0 = next(iter(sampler_epochs(ranks[0])), None)
    steps0 = steps(ranks[0])
    for rank, r in sorted(ranks.items()):
        epoch = next(iter(sampler_epochs(r)), None)
        if epoch != epoch0:
            return (f"rank {rank} went on at epoch {epoch}, rank 0 at epoch {epoch0}{FIX}every rank goes on from "
                    "the snapshot (each loads it, or rank 0 sends what it loaded)")
        apart = next((n for n, (a, b) in enumerate(zip(steps0, steps(r)), 1) if not torch.equal(a, b)), None)
        if apart is not None:
            return (f"rank {rank}'s weights left rank 0's at its step {apart} after the restart: it stepped with "
                    "another optimizer state than rank 0's")
    return None


def _done(r, seq: int) -> tuple[int, int, int]:
    """Up to a rank's event ``seq``: its optimizer steps, the collectives it entered, those it left."""
    def count(kind):
        return sum(1 for e in r.of(kind) if e["seq"] < seq)
    return count("optimizer_step"), count("collective"), count("collective_done")


def _ordered(first, first_seq: int, then, then_seq: int) -> bool:
    """Whether rank ``first``'s event is known to happen before rank ``then``'s: a collective, or a DDP
    step (its gradients are all-reduced in backward), that ``first`` entered after its event and
    ``then`` finished before its own. Collectives inside DDP are not traced; its steps stand for them."""
    steps, entered, _ = _done(first, first_seq)
    steps_then, _, left_then = _done(then, then_seq)
    return steps_then >= steps + 1 or left_then >= entered + 1


def _reads_after_the_write(runs):
    for world in runs:
        for k, attempt in enumerate(world.attempts):
            writer = next((r for r in attempt if r.rank == 0), None)
            if writer is None:
                continue
            ends = [e["seq"] for e in writer.of("saved")]
            writes = [(e["seq"], ends[i] if i < len(ends) else None) for i, e in enumerate(writer.of("save"))]
            for r in (r for r in attempt if r.rank != 0):
                for load in (e for e in r.of("load") if Path(e.get("path") or "").name == SNAPSHOT):
                    for start, end in writes:
                        after = end is not None and _ordered(writer, end, r, load["seq"])
                        if not after and not _ordered(r, load["seq"], writer, start):
                            return (f"{world.label}, attempt {k}: rank {r.rank} read {SNAPSHOT} while rank 0 "
                                    "wrote a snapshot, with nothing to make it wait for the write to end: it "
                                    "reads the previous snapshot, or none, depending on which rank is faster")


def _snapshot_in_place(r) -> list[int]:
    """When a whole snapshot was put at its path: saved there, or renamed or copied onto it (a save to a file
    object whose path the trace cannot tell counts too)."""
    def onto_snapshot(e):
        return e.get("path") is None or Path(str(e["path"])).name == SNAPSHOT
    return sorted(e["seq"] for kind in ("saved", "placed") for e in r.of(kind) if onto_snapshot(e))


def _resume_point(world) -> int | None:
    """Steps the restart must not take again: the epochs completed before a kill in an epoch; the steps
    before the last file written whole, for a kill during a write."""
    first = {r.rank: r for r in world.attempts[0]} if world.attempts else {}
    if 0 not in first:
        return None
    rank0 = first[0]
    if world.job.endswith("2nd file"):
        done = _snapshot_in_place(rank0)
        if not done:
            return 0
        return sum(1 for e in rank0.of("optimizer_step") if e["seq"] < done[-1])
    return len(rank0.of("optimizer_step")) // STEPS_PER_EPOCH * STEPS_PER_EPOCH


def _no_epoch_trained_twice(runs):
    for world in killed(runs):
        if len(world.attempts) < 2:
            continue  # no restart: told by the restart check
        start = _resume_point(world)
        taken = len(world.ranks[0].of("optimizer_step"))
        if start is None or taken <= STEPS - start:
            continue
        again = taken - (STEPS - start)
        if taken == STEPS:
            return (f"{world.label}: after the restart rank 0 took all {STEPS} steps again, from the start: "
                    f"{start // STEPS_PER_EPOCH} completed epoch(s) were trained twice{FIX}resume from the "
                    "snapshot: the weights, the optimizer, and the epoch to go on from")
        return (f"{world.label}: after the restart rank 0 took {taken} steps; the last snapshot before the kill "
                f"held step {start} of {STEPS}, so {STEPS - start} were left: {again} step(s) were trained twice"
                f"{FIX}resume at the epoch after the one the snapshot holds")


def _bit_for_bit(runs):
    base = uninterrupted(runs)
    if base is None:
        return None
    want = steps(base.ranks[0])
    for world in killed(runs):
        got = world.ranks[0].final_params()
        final = base.ranks[0].final_params()
        if got is None or final is None or got.shape != final.shape:
            return f"{world.label}: rank 0 has no trained weights to compare"
        if torch.equal(got, final):
            continue
        gap = (got - final).abs().max().item()
        return f"{world.label}: the final weights differ from the uninterrupted run's by up to {gap:.3g}. " + \
            _where_it_went_wrong(world, want, sampler_epochs(base.ranks[0]))


def _where_it_went_wrong(world, want: list[torch.Tensor], drawn: list) -> str:
    """Why a resumed run left the uninterrupted one: at the restart, or at its first step after.
    ``drawn``: the sampler epochs the uninterrupted run's rank 0 went through, in order."""
    start = next((v for label, v in world.ranks[0].snapshots if label.startswith("epoch")), None)
    after = steps(world.ranks[0])
    initial = world.ranks[0].snapshots[0][1] if world.ranks[0].snapshots else None
    if start is None:
        return "The restarted rank 0 drew no samples from its DistributedSampler."
    held = [k + 1 for k, w in enumerate(want) if torch.equal(w, start)]
    if not held:
        if initial is not None and want and torch.equal(start, initial) and not any(torch.equal(w, start) for w in want):
            return "The restart began from the initial weights."
        return ("The restart began from weights the uninterrupted run never had"
                f"{FIX}load the snapshot's model state into the model before training.")
    step = held[-1]
    if step < len(want) and after and not torch.equal(after[0], want[step]):
        epoch = next((e.get("epoch") for e in world.ranks[0].of("sampler_iter")), None)
        due = step // STEPS_PER_EPOCH
        expected = drawn[due] if due < len(drawn) else due
        if epoch != expected and len(after) == len(want) - step:  # the loop went on where it should
            return (f"The restart began from the weights after step {step} and took the {len(after)} steps left, "
                    f"but its sampler drew the order of epoch {epoch} where the uninterrupted run drew epoch "
                    f"{expected}'s{FIX}set_epoch with the epoch the loop is at, in every attempt.")
        if epoch != expected:
            return (f"The restart began from the weights after step {step}, the end of epoch "
                    f"{step // STEPS_PER_EPOCH - 1}, but then trained epoch {epoch}'s batches{FIX}go on at the "
                    "epoch after the one the snapshot holds.")
        return (f"The restart began from the weights after step {step}, as it should, but its first step differs "
                f"from the uninterrupted run's step {step + 1}: the optimizer's state (momentum) was not restored"
                f"{FIX}load optimizer.state_dict() from the snapshot too.")
    return f"The restart began from the weights after step {step}, then trained other steps than the uninterrupted run."


EXERCISE = Exercise(
    id="4.2",
    title="survive a killed worker: snapshots and resume",
    kind="script",
    jobs=JOBS,
    jobs_of=lambda code: (*JOBS, two_machines()),
    exported=(SNAPSHOT,),
    timeout=60.0,
    warm_imports=jobs.WARM_IMPORTS,
    work=_work,
    checks=[
        runs_to_the_end("every job finishes: never interrupted, and after each kill", 3),
        Check("after each kill torchrun restarted the workers (TORCHELASTIC_RESTART_COUNT 1)", 1, _restarted,
              needs="partial", hint="torchrun --max-restarts restarts the whole group; the script only has to resume"),
        Check("the snapshot holds the model, the optimizer's state and the epoch", 2,
              _snapshot_holds_model_optimizer_epoch,
              hint='torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, ...)'),
        Check("snapshots written by one rank: global rank 0", 1, _one_writer, needs="partial",
              hint="if rank == 0: save the snapshot"),
        Check("a snapshot is written atomically: a kill during the write leaves the last one whole", 2, _atomic,
              needs="partial", hint="torch.save(state, path + '.tmp'); os.replace(path + '.tmp', path)"),
        Check("after a restart every rank goes on from the snapshot: its weights, optimizer state and epoch", 1,
              _goes_on_from_the_snapshot,
              hint="if os.path.exists(args.snapshot): every rank torch.load()s it and restores model and optimizer"),
        Check("every rank reads a snapshot only once rank 0 has finished writing it", 1, _reads_after_the_write,
              needs="partial", hint="if rank == 0: save the snapshot; then dist.barrier() before any rank reads it"),
        Check("no completed epoch is trained twice: the restart resumes after the last whole snapshot", 3,
              _no_epoch_trained_twice, hint="for epoch in range(snapshot['epoch'] + 1, args.epochs)"),
        Check("after each kill the final weights equal the uninterrupted run's, bit for bit", 3, _bit_for_bit,
              needs="all",  # a killed job that never finished has no final weights: nothing else can stand for them
              hint="restore the model, the optimizer and the epoch; set_epoch(epoch) keeps the data order"),
    ],
)
