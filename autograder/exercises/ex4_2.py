"""Exercise 4.2: survive a worker killed at any step, with step-level snapshots, under the real torchrun.

The student adds to 4.1's script, which now has a learning-rate schedule and random noise from a generator
of each rank's own, a snapshot written by rank 0 every ``--snapshot-every`` optimizer steps (whatever the
next step depends on) and a resume from it in the middle of an epoch. The grader runs the script three
times under ``torchrun --max-restarts=2`` with two processes: never interrupted; with rank 1 killed
(SIGKILL) after step 23, three steps past a snapshot, in the middle of epoch 2; and with rank 0 killed
while it writes its second file; and once more as two agents of one job, one process each, as on two
machines (a writer chosen by LOCAL_RANK shows there only). Each killed job must finish after torchrun
restarts it, with weights equal to the uninterrupted run's bit for bit, and without training again a step
that a snapshot already held. Where the weights part, the report says whether the restarted step drew
other samples, other noise, another learning rate, or stepped from another optimizer state.

4.4 judges its planted script, which snapshots every epoch, by these checks and its own jobs.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from autograder import jobs
from autograder.checks import CAUSE, FIX, Check, NotJudged, runs_to_the_end
from autograder.exercises import Exercise
from autograder.hints import Hint
from autograder.reference import nearest_samples
from ddpcourse import TinyNet, toy_dataset

N, EPOCHS, GLOBAL_BATCH, LR, OUT, SNAPSHOT, EVERY = 96, 4, 12, 0.05, "trained.pt", "snapshot.pt", 5
STEPS_PER_EPOCH = N // GLOBAL_BATCH
STEPS = EPOCHS * STEPS_PER_EPOCH
ARGS = ("--epochs", str(EPOCHS), "--global-batch", str(GLOBAL_BATCH), "--lr", str(LR), "--out", OUT,
        "--snapshot", SNAPSHOT)
KILLED_AT_STEP = {"rank": 1, "attempt": 0, "when": "step", "n": 4 * EVERY + 3}
KILLED_WRITING = {"rank": 0, "attempt": 0, "when": "save", "n": 2}
NEVER = "torchrun, 2 processes, never interrupted"
# Every job's workers ask the rank host before going on after each step and save (ranks/faults.py), the
# never interrupted one's too: no worker can tell from its own process which job it is in.
JOBS = (
    jobs.standalone(2, (*ARGS, "--snapshot-every", str(EVERY)), restarts=2, name=NEVER, planted=True),
    jobs.standalone(2, (*ARGS, "--snapshot-every", str(EVERY)), restarts=2, fault=KILLED_AT_STEP,
                    name=f"torchrun, 2 processes, rank 1 killed after step {KILLED_AT_STEP['n']}"),
    jobs.standalone(2, (*ARGS, "--snapshot-every", str(EVERY)), restarts=2, fault=KILLED_WRITING,
                    name="torchrun, 2 processes, rank 0 killed while writing its 2nd file"),
)


def two_machines() -> jobs.Job:
    """The job on two machines, on a rendezvous of its own each grading: a writer chosen by LOCAL_RANK shows."""
    return jobs.machines(2, 1, (*ARGS, "--snapshot-every", str(EVERY)), restarts=2, planted=True,
                         name="torchrun, 2 machines of 1 process, never interrupted")


def steps(r) -> list[torch.Tensor]:
    """A rank's parameters after each of its optimizer steps, in order."""
    return r.kept_all("optimizer step")


def sampler_epochs(r) -> list:
    """The epochs a rank's sampler was iterated at, in order (set_epoch's, as the trace saw them)."""
    return [e.get("epoch") for e in r.of("sampler_iter")]


def planned(world) -> dict | None:
    """The kill this job planned, if any (its name says where)."""
    return getattr(world.plan, "fault", None)


NOISE = 0.05  # the spread of the noise the script handed out adds to every input


def schedule(step: int) -> float:
    """The learning rate of the script handed out at optimizer step ``step`` (from 0): a cosine over the run."""
    return LR * (1 + math.cos(math.pi * step / STEPS)) / 2


def noise_spread(values) -> float:
    """How far the rows a model was given lie from the dataset's samples nearest them: the noise's spread."""
    dataset = toy_dataset(n=N, seed=0)
    features = dataset.tensors[0].double()
    samples, _ = nearest_samples(values, dataset)
    rows = torch.as_tensor(values, dtype=torch.float64).reshape(-1, features.shape[1])
    return (rows - features[samples]).std().item()


def _trains_as_handed_out(runs):
    """What the script handed out trains, kept: every step's learning rate on its cosine, and noise on every input
    (a script that drops either has less to carry across a restart)."""
    base = uninterrupted(runs)
    if base is None or not base.ranks:
        return None
    r = base.ranks[0]
    for k, lr in enumerate(e.get("lr") for e in r.of("optimizer_step")):
        if isinstance(lr, (int, float)) and abs(lr - schedule(k)) > 1e-6 * LR:
            return (f"{base.label}: step {k + 1} used learning rate {lr:.6g}, where the script's cosine schedule gives "
                    f"{schedule(k):.6g}{CAUSE}the schedule was dropped or changed{FIX}keep the script's scheduler, "
                    "stepped once after every optimizer step, and carry its state across a restart")
    rows = next((step for step in _inputs(r) if step), None)
    if rows:
        spread = noise_spread(rows)
        if spread < NOISE / 2:
            return (f"{base.label}: the first step's inputs are the dataset's samples with noise of spread "
                    f"{spread:.3g}, not {NOISE}{CAUSE}the noise was dropped{FIX}keep the script's noise on every input, "
                    "and carry each rank's generator across a restart")


def uninterrupted(runs):
    return next((w for w in runs if planned(w) is None), None)


def killed(runs):
    return [w for w in runs if planned(w) is not None]


def while_writing(world) -> bool:
    return (planned(world) or {}).get("when") == "save"


def fault(world) -> dict | None:
    """The kill, as the rank host that made it said (no worker records it: none knows where it lands)."""
    return next((f for f in world.faults if f.get("attempt") == 0), None)


def _work(runs):
    if not any(r.of("optimizer_step") for w in runs for a in w.attempts for r in a):
        return "no job took a single optimizer step"
    saved = [e for w in runs for a in w.attempts for r in a for e in r.of("save")
             if Path(str(e.get("path"))).name != OUT]
    if not saved:
        return (f"no snapshot was ever written: only {OUT}. This is the script as given; write a snapshot as the "
                "exercise says, and resume from it when the job starts")


def _restarted(runs):
    for world in killed(runs):
        if fault(world) is None:
            plan = planned(world)
            what = (f"rank 0 never wrote a file {plan['n']} times" if while_writing(world) else
                    f"rank {plan['rank']} never took step {plan['n']}")
            return (f"{world.label}: the grader had nothing to interrupt: {what}. Write the snapshots as the "
                    "exercise says (rank 0), and train every step")
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


def snapshot_points(r) -> list[int]:
    """After how many of a rank's optimizer steps each whole snapshot was put in place, in order."""
    steps_at = sorted(e["seq"] for e in r.of("optimizer_step"))
    return [sum(1 for s in steps_at if s < seq) for seq in _snapshot_in_place(r)]


def _snapshot_holds_model_optimizer_position(runs):
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
        return f"{SNAPSHOT} holds no number of where the run is: save the step (or epoch) it was taken after"
    base = uninterrupted(runs)
    want, points = steps(base.ranks[0]), snapshot_points(base.ranks[0])
    saved = torch.cat([torch.from_numpy(arrays[names[n]]).flatten() for n, _ in model.named_parameters()])
    last = points[-1] if points else 0
    if not 0 < last <= len(want) or saved.shape != want[last - 1].shape or not torch.equal(saved, want[last - 1]):
        return (f"the last {SNAPSHOT} does not hold the weights of the step it was written after (step {last}): "
                "write it after the optimizer step, from the model being trained")


def _not_optimizer(key: str) -> bool:
    """A key outside an optimizer's state dict (whose param_groups hold integers of their own)."""
    return ".param_groups." not in key and ".state." not in key


def _every_k_steps(runs):
    """Observed where rank 0 put whole snapshots in place in the uninterrupted run: after every EVERY-th step."""
    base = uninterrupted(runs)
    if base is None or not base.ranks:
        return None
    points = snapshot_points(base.ranks[0])
    due = list(range(EVERY, STEPS + 1, EVERY))
    missing = [n for n in due if n not in points]
    if missing:
        seen = f"after steps {points}" if points else "none"
        return (f"{base.label}: with --snapshot-every {EVERY}, a snapshot is due after steps {due}; rank 0 put "
                f"whole ones in place {seen}, none after step {missing[0]}: a kill then loses more than "
                f"{EVERY - 1} steps{FIX}count optimizer steps across epochs, and snapshot when the count is a "
                "multiple of --snapshot-every")


def _one_writer(runs):
    for world in runs:
        for k, attempt in enumerate(world.attempts):
            writers = sorted({r.rank for r in attempt if r.of("save")})
            if writers and writers != [0]:
                return (f"{world.label}, attempt {k}: torch.save was called by rank(s) {writers}{FIX}one rank, "
                        "global rank 0, writes the snapshot (every rank holds the same weights)")


def _written_in_place(runs) -> str | None:
    """A write seen going straight onto the snapshot's path (torch.save or a copy onto it), in any job."""
    for world in runs:
        target = str(world.workdir / "run" / SNAPSHOT)
        for k, attempt in enumerate(world.attempts):
            for r in attempt:
                for e in (*r.of("save"), *r.of("copy")):
                    if e.get("path") == target:
                        how = "copied a file onto" if e["kind"] == "copy" else "called torch.save onto"
                        return (f"{world.label}, attempt {k}: rank {r.rank} {how} {SNAPSHOT} itself: a kill during "
                                "that write leaves it half written, and a restart finds no snapshot it can load"
                                f"{FIX}write to a temporary file in the same directory, then os.replace() it onto "
                                "the snapshot")
    return None


def _atomic(runs):
    """The file the rank host found open when it killed rank 0 in the middle of a write; and every write the
    trace saw going onto the snapshot's own path, wherever the kill landed."""
    return _killed_writing_the_snapshot(runs) or _written_in_place(runs)


def _killed_writing_the_snapshot(runs):
    world = next((w for w in runs if while_writing(w)), None)
    event = fault(world) if world else None
    if event is None:
        n = planned(world)["n"] if world else 0
        return f"{world.label}: rank 0 never wrote a file {n} times, so no write could be interrupted" if world else None
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
    loading it and sending it on): rank 0 starts from a snapshot's weights, and every rank goes on at its
    epoch and with its optimizer state (a rank stepping from other momentum leaves rank 0's weights)."""
    base = uninterrupted(runs)
    want = steps(base.ranks[0]) if base and base.ranks else []
    held = [want[n - 1] for n in snapshot_points(base.ranks[0]) if 0 < n <= len(want)] if want else []
    for world in killed(runs):
        start = _resume_point(world)
        if not start or len(want) < start:
            continue  # no whole snapshot was in place when the job restarted: nothing to go on from
        for k, attempt in enumerate(world.attempts[1:], start=1):
            ranks = {r.rank: r for r in attempt}
            if 0 not in ranks:
                continue
            first = next((v for label, v in ranks[0].snapshots if label.startswith("epoch")), None)
            # which snapshot is charged by the check on steps trained twice: here, that it is one
            if first is not None and not any(torch.equal(first, w) for w in held):
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
    """Steps the restart must not take again: rank 0's steps before the last snapshot it put in place, whole,
    before the kill (observed, whatever the snapshots' schedule)."""
    first = {r.rank: r for r in world.attempts[0]} if world.attempts else {}
    if 0 not in first:
        return None
    points = snapshot_points(first[0])
    return points[-1] if points else 0


def _no_step_trained_twice(runs):
    for world in killed(runs):
        if len(world.attempts) < 2:
            continue  # no restart: told by the restart check
        start = _resume_point(world)
        taken = len(world.ranks[0].of("optimizer_step"))
        if start is None or taken <= STEPS - start:
            continue
        again = taken - (STEPS - start)
        if taken == STEPS:
            return (f"{world.label}: after the restart rank 0 took all {STEPS} steps again, from the start: the "
                    f"{start} steps the last snapshot held were trained twice{FIX}resume from the snapshot: the "
                    "weights, the optimizer, and where the run was")
        return (f"{world.label}: after the restart rank 0 took {taken} steps; the last snapshot before the kill "
                f"held step {start} of {STEPS}, so {STEPS - start} were left: {again} step(s) were trained twice"
                f"{FIX}go on at the step after the one the snapshot holds, in the middle of its epoch if need be")


def _bit_for_bit(runs):
    """Judged on the killed jobs that finished, and earning their share of the points: one that did not has no
    final weights, and its "runs to the end" (with the check its kill found wrong, such as the atomic write)
    says why."""
    base = uninterrupted(runs)
    if base is None or not base.complete:
        raise NotJudged("not judged: the uninterrupted job did not run to the end (see above)")
    jobs_killed = killed(runs)
    finished = [w for w in jobs_killed if w.complete]
    unfinished = [w for w in jobs_killed if not w.complete]
    if not finished:
        raise NotJudged("not judged: no job that was killed ran to the end (see above)")
    for world in finished:
        got = world.ranks[0].final_params()
        final = base.ranks[0].final_params()
        if got is None or final is None or got.shape != final.shape:
            return f"{world.label}: rank 0 has no trained weights to compare"
        if torch.equal(got, final):
            continue
        gap = (got - final).abs().max().item()
        return f"{world.label}: the final weights differ from the uninterrupted run's by up to {gap:.3g}. " + \
            _where_it_went_wrong(world, base)
    if unfinished:
        raise NotJudged(f"held at {'; '.join(w.label for w in finished)}; not judged at "
                        f"{'; '.join(w.label for w in unfinished)}, where the job did not complete (see above)",
                        held=len(finished) / (len(finished) + len(unfinished)))


def _where_it_went_wrong(world, base) -> str:
    """Why a resumed run left the uninterrupted one: at the restart, or at its first step after."""
    want = steps(base.ranks[0])
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
    apart = next((k for k, (a, b) in enumerate(zip(after, want[step:])) if not torch.equal(a, b)), None)
    if apart is not None:
        return _step_differs(world, base, step, apart, len(after))
    return f"The restart began from the weights after step {step}, then trained other steps than the uninterrupted run."


def _step_differs(world, base, step: int, k: int, taken: int) -> str:
    """The restart began from the weights after ``step`` and its ``k``-th step (from 0) left the uninterrupted
    run's: in what that step was given (the epoch's order, the samples, their noise, the learning rate) or
    else, at the first step, the optimizer's state."""
    which = "first step" if k == 0 else f"step {step + k + 1} ({k + 1} steps after the restart)"
    began = f"The restart began from the weights after step {step}, as it should, but its {which} "
    epoch = next((e.get("epoch") for e in world.ranks[0].of("sampler_iter")), None)
    drawn = sampler_epochs(base.ranks[0])
    due = step // STEPS_PER_EPOCH
    expected = drawn[due] if due < len(drawn) else due
    if epoch != expected and taken == STEPS - step:  # the loop went on where it should
        return (f"The restart began from the weights after step {step} and took the {taken} steps left, but its "
                f"sampler drew the order of epoch {epoch} where the uninterrupted run drew epoch {expected}'s"
                f"{FIX}set_epoch with the epoch the loop is at, in every attempt.")
    if epoch != expected:
        return (f"The restart began from the weights after step {step}, in epoch {due}, but then trained epoch "
                f"{epoch}'s batches{FIX}go on in the epoch of the step the snapshot holds.")
    fed = _what_differs(world, base, step, k)
    if fed:
        return began + fed
    lr, lr_then = _lr(world.ranks[0], k), _lr(base.ranks[0], step + k)
    if lr is not None and lr_then is not None and lr != lr_then:
        told = f"stepped with learning rate {lr:.6g} where the uninterrupted run's step {step + k + 1} used {lr_then:.6g}"
        if k == 0:  # the learning rate a step uses is the optimizer's: the scheduler only changes it after
            return (began + f"{told}{CAUSE}the optimizer's param_groups, which hold the learning rate the schedule "
                    f"had reached, were not restored{FIX}load optimizer.state_dict() from the snapshot (and the "
                    "scheduler's state, for the steps after).")
        return (began + f"{told}{CAUSE}the learning-rate schedule did not go on where it was{FIX}keep the scheduler's "
                "state_dict() in the snapshot, and load it on resume.")
    if k:
        return began + "differs from the uninterrupted run's, given the same inputs, with the same learning rate."
    return (began + f"differs from the uninterrupted run's step {step + 1}, given the same inputs, with the same "
            f"learning rate{CAUSE}the optimizer's state (momentum) was not restored{FIX}load optimizer.state_dict() "
            "from the snapshot too.")


def _inputs(r) -> list[list[float] | None]:
    """What a rank's model was given in each training step, as numbers (None where too large to record)."""
    return [e.get("inputs") for e in r.of("ddp_forward") if e.get("sync")]


def _lr(r, k: int) -> float | None:
    lrs = [e.get("lr") for e in r.of("optimizer_step")]
    return lrs[k] if k < len(lrs) else None


def _what_differs(world, base, step: int, k: int) -> str | None:
    """Whether a rank's ``k``-th step after the restart was given other samples, or the same samples with other
    noise, than the uninterrupted run's rank at step ``step + k + 1``: the samples are told by the dataset row
    nearest each input row."""
    before = {r.rank: r for r in base.ranks}
    n = step + k
    for r in world.ranks:
        now, then = _inputs(r), _inputs(before[r.rank]) if r.rank in before else []
        if k >= len(now) or n >= len(then) or now[k] is None or then[n] is None or now[k] == then[n]:
            continue
        got, wanted = _samples(now[k]), _samples(then[n])
        if got != wanted:
            return (f"trained rank {r.rank} on samples {got} where the uninterrupted run's step {n + 1} trained "
                    f"it on {wanted}{CAUSE}the restart did not go on at the snapshot's place in the data{FIX}skip, in the "
                    "snapshot's epoch only, the batches its step had already trained.")
        return (f"gave rank {r.rank} the samples of the uninterrupted run's step {n + 1} with other random noise"
                f"{CAUSE}rank {r.rank}'s generator did not go on where it was: its state was not kept and restored, "
                f"or the restart drew noise for the batches it skipped{FIX}keep every rank's generator state in the "
                "snapshot (rank 0 gathers them), restore each rank's own on resume, and draw noise only for the "
                "batches a step trains.")
    return None


def _samples(values: list[float]) -> list[int]:
    return nearest_samples(values, toy_dataset(n=N, seed=0))[0]


# check -> its hints (4.4 judges by these checks without them; 4.5 shares EVERY_K's).
SNAPSHOTS = "3. Fault tolerance: restarts and snapshots"
HINTS = {
    "restarted": Hint(
        idea="The grader kills a worker at a planned point, a step or a snapshot's write, and torchrun's "
             "--max-restarts then starts the whole group again; the check looks for that second attempt.",
        section=SNAPSHOTS,
        where="Look at whether your script reaches the planned point: every optimizer step of the run, and the "
              "snapshot files rank 0 writes. The message says which point was never reached.",
        how="The grader's command already allows the restarts: your script only has to train every step and write "
            "its snapshots from rank 0 as the exercise asks, so that the kill lands where it was planned.",
        lines_of=("save",)),
    "holds": Hint(
        idea="A restart starts new processes from the first line of the script: only what the snapshot holds "
             "survives. It holds at least the model's weights, the optimizer's state (the momentum) and a number "
             "saying where the run is, all taken after the same step.",
        section=SNAPSHOTS,
        where="Look at what your rank 0 puts in the snapshot, and at the point of the loop where it writes it.",
        how="Put in the snapshot the state dicts of the model being trained and of its optimizer, and the count of "
            "steps taken (or another whole number that says where the run is), right after the optimizer step it "
            "follows. Anything else the next step depends on belongs there too.",
        lines_of=("save",)),
    "every_k": Hint(
        idea="A kill loses the steps since the last snapshot: with one after every --snapshot-every optimizer steps, "
             "counted across epochs, it never loses that many.",
        section=SNAPSHOTS,
        where="Look at the condition that decides when rank 0 writes a snapshot, and at the counter it tests.",
        how="Count optimizer steps in one counter that runs across epochs and goes on from the snapshot after a "
            "restart, and put a whole snapshot in place each time that count reaches a multiple of --snapshot-every, "
            "not at the end of an epoch.",
        lines_of=("save",)),
    "writer": Hint(
        idea="Every rank holds the same weights, so one process writes the snapshot for the whole job: global rank "
             "0, on one machine or several.",
        section=SNAPSHOTS,
        where="Look at the condition in front of every torch.save of your script, and at which rank it tests.",
        how="Let only the process whose global rank is 0 call torch.save; LOCAL_RANK 0 exists on every machine. The "
            "other ranks still take part in anything the snapshot needs from them, but write nothing.",
        lines_of=("save",)),
    "atomic": Hint(
        idea="A kill in the middle of writing the snapshot's own file leaves half a file that no restart can load; a "
             "snapshot finished under another name and then renamed onto its path leaves the previous one whole.",
        section="Break it: a kill during the save",
        where="Look at the code that writes your snapshot: the path torch.save writes to, and how the file then "
              "reaches the snapshot's path.",
        how="Have the whole file ready under another name in the snapshot's own directory, then put it in place with "
            "one atomic rename, such as os.replace. Never write or copy onto the snapshot's path itself: a copy, "
            "or a move from another file system, writes its bytes there again.",
        lines_of=("save",)),
    "goes_on": Hint(
        idea="A restarted job is new processes: each of them must start from what the snapshot holds, the same "
             "weights, the same optimizer state and the same epoch on every rank, so that they go on as one.",
        section=SNAPSHOTS,
        where="Look at the start of your script, where it looks for a snapshot, and at what each rank does with it "
              "before it trains.",
        how="When a snapshot exists, make every rank restore the model's weights and the optimizer's state and take "
            "the run's place from it, whether each rank loads the file or rank 0 loads it and sends it to the others.",
        lines_of=("load",)),
    "read_after": Hint(
        idea="A rank that reads the snapshot while rank 0 is still writing it gets the previous snapshot or none, "
             "depending on which process is faster.",
        section=SNAPSHOTS,
        where="Look at where your ranks read the snapshot, and at what makes them wait for rank 0's write to end.",
        how="Put something every rank passes between rank 0's write and any other rank's read, such as a barrier "
            "after the save, or let the other ranks never read the file and receive what rank 0 read instead.",
        lines_of=("load",)),
    "not_twice": Hint(
        idea="The snapshot says how many steps were done; a restart that trains any of them again wastes the work "
             "and no longer follows the uninterrupted run.",
        section=SNAPSHOTS,
        where="Look at where your training loop starts after a resume: the first epoch it runs, and the first batch "
              "it trains in that epoch.",
        how="From the snapshot's step work out its epoch and how many of that epoch's batches were already trained; "
            "start the loop in that epoch, skip exactly those batches there, and none in the epochs after."),
    "bit_for_bit": Hint(
        idea="A resumed run ends with the uninterrupted run's weights, bit for bit, only if every step after the "
             "restart gets exactly what that run's step got: weights, samples, noise, learning rate and optimizer "
             "state. The message says what differed first.",
        section=SNAPSHOTS,
        where="Read which step the message says differed first and in what, then look at the part of your snapshot "
              "and of your resume that should carry that one thing.",
        how="Whatever the next step depends on must come back exactly after a restart: keep it in the snapshot and "
            "restore it, on every rank its own where ranks differ, or make it depend on the step alone. That covers "
            "the optimizer's and the schedule's state, each rank's random generator and the place in the data."),
}

CHECKS = [
    runs_to_the_end("every job finishes: never interrupted, and after each kill", 3),
    Check("after each kill torchrun restarted the workers (TORCHELASTIC_RESTART_COUNT 1)", 1, _restarted,
          needs="partial", hint=HINTS["restarted"]),
    Check("the snapshot holds the model, the optimizer's state and where the run is", 2,
          _snapshot_holds_model_optimizer_position, hint=HINTS["holds"]),
    Check("snapshots written by one rank: global rank 0", 1, _one_writer, needs="partial", hint=HINTS["writer"]),
    Check("a snapshot is written atomically: a kill during the write leaves the last one whole", 2, _atomic,
          needs="partial", hint=HINTS["atomic"]),
    Check("after a restart every rank goes on from the snapshot: its weights, optimizer state and epoch", 1,
          _goes_on_from_the_snapshot, hint=HINTS["goes_on"]),
    Check("every rank reads a snapshot only once rank 0 has finished writing it", 1, _reads_after_the_write,
          needs="partial", hint=HINTS["read_after"]),
    Check("no step a snapshot held is trained again: the restart resumes after the last whole snapshot", 3,
          _no_step_trained_twice, hint=HINTS["not_twice"]),
    Check("after each kill the final weights equal the uninterrupted run's, bit for bit", 3, _bit_for_bit,
          needs="partial", hint=HINTS["bit_for_bit"]),
]
AS_HANDED_OUT = Check("the uninterrupted run trains as the script handed out: its noise and its learning-rate schedule", 2,
                      _trains_as_handed_out, hint=Hint(
    idea="Surviving a kill means carrying everything the next step depends on; the script handed out adds noise "
         "from each rank's generator and follows a cosine schedule, and both must stay, uninterrupted or not.",
    section=SNAPSHOTS,
    where="Your training step: the line that adds noise to the inputs, and the scheduler stepped after each "
          "optimizer step.",
    how="Keep the script's training as it was handed out, noise and schedule included, and make the snapshot carry "
        "what they need to go on: each rank's generator state and the scheduler's state."))
EVERY_K = Check("a snapshot after every --snapshot-every steps: a kill loses fewer than that many", 2,
                _every_k_steps, hint=HINTS["every_k"])

EXERCISE = Exercise(
    id="4.2",
    title="survive a worker killed at any step: step-level snapshots and resume",
    kind="script",
    jobs=JOBS,
    jobs_of=lambda code: (*JOBS, two_machines()),
    exported=(SNAPSHOT,),
    timeout=60.0,
    warm_imports=jobs.WARM_IMPORTS,
    work=_work,
    checks=[*CHECKS[:3], EVERY_K, *CHECKS[3:], AS_HANDED_OUT],
)
