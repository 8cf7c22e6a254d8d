"""Checks: named by what they verify, each worth points, judged on every world size.

A check's ``verify(runs)`` returns ``None`` when what it verifies holds, or a message
saying what was seen (and on which rank) when it does not; it raises ``Skip`` when it
cannot mean anything on this machine. ``needs`` says what evidence the check must have:

- "complete": judged on the launches that ran to the end on every rank. When a launch did
  not, the check keeps its points if it holds on every launch that did and one of those had
  several ranks (the crash itself is charged by the exercise's "runs to the end" check);
  otherwise it reports why it could not be judged, as an error or a timeout;
- "partial": the check may *fail* on what was seen before a crash or a hang (a rank that
  called a collective the others never called), but can only *pass* on complete runs;
- "all": judged only when every launch completed (a promise about every launch, like "after each
  kill the final weights equal the uninterrupted run's", that no subset can keep).
- "seen": judged on what was seen, complete or not: a check of something the launch showed before it
  could fail (4.6's agents' command lines, recorded as each agent starts).

Where each launch is one world size (``Exercise.credit_per_world``), a check instead earns its points
in proportion to the launches at which it was judged and held (``Check._judge_each_world``).

Before any check, two gates (``judge_all``): a submission that replaced the grader's
instrumentation scores nothing, and so does one that did none of the exercise's work
(``Exercise.work`` says what that work leaves behind): doing nothing must not earn the
points of checks that only look for mistakes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable

import torch

from autograder.evidence import RankRecord, WorldRun
from autograder.hints import Hint, first_step_line
from autograder.report import SKIPPED_ON_CPU, CheckResult




# Where a message turns from what was seen to its likely cause, or to what to do. The "find the bugs"
# exercises (2.5, 4.4) show only what was seen: finding the cause is their work (``symptom``).
CAUSE = "; likely cause: "
FIX = ". To fix: "
# Their points are the planted bugs': the script as handed out earns only what it already did right.
PLANTED_BUG_POINTS, OTHER_CHECK_POINTS = 4, 0.5


def symptom(message: str | None) -> str | None:
    """A message with only what was seen: cut where it turns to a cause or a fix."""
    if not message:
        return message
    cut = min((message.index(s) for s in (CAUSE, FIX) if s in message), default=None)
    return message if cut is None else message[:cut] + "."


class Skip(Exception):
    """The check cannot be judged here; the message says why."""


class NotJudged(Exception):
    """Some of the launches this check observes did not complete, and it held on the others: it earns the share
    ``held`` of its points (none, where none completed). Not a failure of its own: the message says which
    launches, and their "runs to the end" why."""

    def __init__(self, message: str, held: float = 0.0):
        super().__init__(message)
        self.held = held


@dataclass
class Runs:
    """Everything the checks of one grading see."""

    worlds: list[WorldRun]
    backend: str
    params: dict
    own: WorldRun | None = None  # the launch of the student's cells of other exercises (Exercise.uses)
    asked: tuple[int, ...] = ()  # the world sizes the grading was to launch (after a time limit, the rest are not)

    def __iter__(self):
        return iter(self.worlds)

    @property
    def complete(self) -> bool:
        return all(w.complete for w in self.worlds)

    def first_incomplete(self) -> WorldRun | None:
        return next((w for w in self.worlds if not w.complete), None)

    def completed(self) -> "Runs":
        return replace(self, worlds=[w for w in self.worlds if w.complete])


@dataclass
class Check:
    name: str
    points: float
    verify: Callable[[Runs], str | None]
    hint: Hint | str = ""  # the three steps of hints.py (a plain string: one line, shown as it is)
    needs: str = "complete"
    gpu_only: bool = False
    hint_for: Callable[[Runs], Hint | str] | None = None  # a hint that depends on what was seen, in place of ``hint``

    def result(self, status: str, message: str = "") -> CheckResult:
        return CheckResult(self.name, status, self.points if status == "passed" else 0, self.points, message)

    def judge(self, runs: Runs, per_world: bool = False) -> CheckResult:
        if self.gpu_only and runs.backend != "nccl":
            return self.result("skipped", SKIPPED_ON_CPU)
        broken = runs.first_incomplete()
        if broken is not None and self.needs == "all":
            return _could_not_judge(self, broken)
        if self.needs == "seen":
            return self._verify(runs) or self.result("passed")
        if broken is not None and per_world:
            return self._judge_each_world(runs, broken)
        if broken is not None and self.needs == "complete" and not _enough(runs.completed(), runs):
            return _could_not_judge(self, broken)
        judged = runs if self.needs == "partial" or broken is None else runs.completed()
        verdict = self._verify(judged)
        if verdict is not None:
            return verdict
        if broken is not None and self.needs == "partial" and not _enough(runs.completed(), runs):
            return _could_not_judge(self, broken)
        return self.result("passed")

    def _verify(self, runs: Runs) -> CheckResult | None:
        """The result when the check fails or cannot mean anything here; None when it holds on ``runs``."""
        try:
            message = self.verify(runs)
        except Skip as skip:
            return self.result("skipped", str(skip))
        except NotJudged as unjudged:
            return CheckResult(self.name, "error", round(self.points * unjudged.held, 2), self.points, str(unjudged))
        except Exception as exc:  # the evidence came from the submission: malformed is a failure, not a crash
            return self.result("failed", f"what the ranks recorded for this check is malformed ({type(exc).__name__})")
        if message:
            hint = self.hint_for(runs) if self.hint_for else self.hint
            if isinstance(hint, Hint):  # its first step is added once the lesson is known (judge_all)
                return replace(self.result("failed", message), hints=hint.steps(None, runs, message))
            return self.result("failed", message + (f"\nHint: {hint}" if hint else ""))
        return None

    def _judge_each_world(self, runs: Runs, broken: WorldRun) -> CheckResult:
        """Points in proportion to the launches at which the check was judged and held: a launch that crashed or
        hung earns the checks it would have judged nothing (its "runs to the end" says why), and so does one not
        made after a launch that ran out of time. One process shows no distributed mistake: where several were
        asked for, launches of one process do not count."""
        done = runs.completed()
        if self.needs == "partial" or done.worlds:  # a "partial" check may fail on what a broken launch showed
            verdict = self._verify(runs if self.needs == "partial" else done)
            if verdict is not None:
                return verdict
        asked = list(runs.asked) or [w.world_size for w in runs]
        several = any(size > 1 for size in asked)
        counts = (lambda size: size > 1) if several else (lambda size: True)  # noqa: E731
        held = [w for w in done if counts(w.world_size)]
        if not held:
            return _could_not_judge(self, broken)
        failed = [w for w in runs if not w.complete and counts(w.world_size)]
        unlaunched = [size for size in asked[len(runs.worlds):] if counts(size)]
        share = len(held) / (len(held) + len(failed) + len(unlaunched))
        status = "timeout" if broken.hung or broken.timed_out else "error"
        return CheckResult(self.name, status, round(self.points * share, 2), self.points,
                           f"held at {_labels(held)}; not judged at {_labels(failed)}, where the launch did not "
                           "complete (see above)" + (f", nor at world size(s) {', '.join(map(str, unlaunched))}, "
                                                     "not launched after it" if unlaunched else ""))


def _labels(worlds: list[WorldRun]) -> str:
    """"world sizes 2, 3" for launches named by their size, else their names."""
    labels = [w.label for w in worlds]
    if all(label == f"world size {w.world_size}" for label, w in zip(labels, worlds)) and len(worlds) > 1:
        return f"world sizes {', '.join(str(w.world_size) for w in worlds)}"
    return ", ".join(labels)


def _enough(completed: Runs, runs: Runs) -> bool:
    """Complete launches that can show a distributed mistake: one with several ranks, if any was asked for."""
    if not completed.worlds:
        return False
    return any(w.world_size > 1 for w in completed) or all(w.world_size == 1 for w in runs)


def _could_not_judge(check: Check, broken: WorldRun) -> CheckResult:
    status = "timeout" if broken.hung or broken.timed_out else "error"
    return check.result(status, f"not judged: {broken.label} did not complete (see above)")


def gate(exercise, runs: Runs) -> str | None:
    """Why nothing of this submission can be judged (it tampered, or did none of the work), or None."""
    tampered = sorted({f"rank {r.rank}: {t}" for w in runs for r in w.ranks for t in r.tampered})
    if tampered:
        return ("Nothing can be judged: the submission replaced the grader's instrumentation "
                f"({'; '.join(tampered[:3])}).")
    done = runs.completed()  # a launch that crashed is told as a crash, not as work not done
    try:
        idle = exercise.work(done) if exercise.work and done.worlds else None
    except Exception as exc:  # the record of the work is the submission's: malformed, it shows none
        idle = f"what the ranks recorded of their work could not be read ({type(exc).__name__})"
    return f"Nothing to grade: {idle}." if idle else None


def judge_all(exercise, runs: Runs) -> list[CheckResult]:
    if gate(exercise, runs):
        return exercise.same_result("failed", "not judged: nothing to grade (see above)", runs.backend)
    return [_with_first_hint(check.judge(runs, exercise.credit_per_world), exercise.id.split(".")[0])
            for check in exercise.checks]


def _with_first_hint(result: CheckResult, lesson: str) -> CheckResult:
    """A failed check's hints placed in the exercise's lesson, and the first step said under its message."""
    if not result.hints:
        return result
    steps = {**result.hints, "lesson": result.hints.get("lesson") or lesson}
    return replace(result, hints=steps, message=f"{result.message}\n{first_step_line(steps)}")


# Verifications shared by several exercises ------------------------------------------------


def runs_to_the_end(name: str, points: float) -> Check:
    """Every launch completed on every rank: the one check that a crash or a hang costs by itself."""
    from autograder.diagnosis import hint_for, summary

    def verify(runs):
        broken = runs.first_incomplete()
        return f"{summary(broken)} (see above)" if broken is not None else None

    # the hint fits how the launch ended: a crash, a deadlock or the time limit
    return Check(name, points, verify, needs="partial", hint_for=lambda runs: hint_for(runs.first_incomplete()))


def each_rank(runs: Runs):
    """(world, rank) for every rank of every launch, smallest world first."""
    for world in runs:
        for r in world.ranks:
            yield world, r



def first_records(world: WorldRun, kind: str, what: str) -> tuple[dict[int, dict], str | None]:
    """Each rank's first `kind` event (what a harness recorded of a student's function), by rank, for
    the ranks that got that far; or the message saying on which rank the function `what` raised."""
    held = {}
    for r in world.ranks:
        event = r.first(kind)
        if event is None:
            continue  # the rank never got this far: told as a crash
        if event.get("error"):
            return held, f"{world.label}: on rank {r.rank}, {what} raised {event['error']}"
        held[r.rank] = event
    return held, None


def writers_saves(world: WorldRun) -> tuple[RankRecord, list[dict]]:
    """The checkpoint writer and its saves to files (each path where the file ended up): rank 0, or else the one
    rank that saved. Who wrote is the writer check's concern; the checkpoint's checks judge what was written,
    so a mistake is charged once."""
    saves = {r.rank: [{**e, "path": r.where_it_ended(e)} for e in r.of("save") if e.get("path")] for r in world.ranks}
    writers = [r for r in world.ranks if saves[r.rank]]
    writer = writers[0] if len(writers) == 1 else world.ranks[0]
    return writer, saves[writer.rank]


def params_identical_across_ranks(runs: Runs, atol: float = 1e-6) -> str | None:
    for world in runs:
        base = world.ranks[0].snapshots
        if not base and world.world_size > 1:
            return f"{world.label}: no trained parameters were seen on rank 0 (no optimizer step)"
        for r in world.ranks[1:]:
            if len(r.snapshots) != len(base):
                return (f"{world.label}: rank 0 took {len(base)} steps but rank {r.rank} "
                        f"took {len(r.snapshots)}")
            for step, ((label, a), (_, b)) in enumerate(zip(base, r.snapshots)):
                gap = (a - b).abs().max().item()
                if gap > atol:
                    nth = sum(1 for other, _ in base[:step + 1] if other == label)
                    return (f"{world.label}: at {label} #{nth}, rank {r.rank}'s parameters "
                            f"differ from rank 0's by up to {gap:.3g}")
    return None


def scale_of(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-4, atol: float = 1e-6) -> float | None:
    """k when ``got`` is k times ``want`` for some k other than 1 (a loss or gradient scaled by mistake), else None."""
    norm = float((want * want).sum())
    if norm == 0 or got.shape != want.shape or not torch.isfinite(got).all():
        return None
    k = float((got * want).sum()) / norm
    if abs(k - 1) < 1e-3 or not torch.allclose(got, k * want, rtol=rtol, atol=atol):
        return None
    return k


def matches_reference(runs: Runs, reference: Callable[[WorldRun], torch.Tensor], what: str,
                      rtol: float = 1e-4, atol: float = 1e-5) -> str | None:
    for world in runs:
        got = world.ranks[0].final_params()
        if got is None:
            return f"{world.label}: rank 0 never stepped an optimizer, so there is nothing to compare"
        want = reference(world)
        if got.shape != want.shape:
            return f"{world.label}: the trained model has {got.numel()} parameters, the reference {want.numel()}"
        if not torch.allclose(got, want, rtol=rtol, atol=atol):
            gap = (got - want).abs().max().item()
            ratio = _ratio(got, want, runs, world)
            return (f"{world.label}: rank 0's final parameters differ from {what} by up to {gap:.3g}"
                    + (f"; {ratio}" if ratio else ""))
    return None


def _ratio(got: torch.Tensor, want: torch.Tensor, runs: Runs, world: WorldRun) -> str:
    """Name the classic mistake when the update was a whole multiple of the reference's."""
    start = runs.params.get("initial")
    if start is None or world.world_size == 1:
        return ""
    moved, expected = got - start, want - start
    scale = (moved @ expected / (expected @ expected)).item() if expected.norm() > 0 else 0.0
    w = world.world_size
    if abs(scale - w) < 0.15 * w:  # several steps compound, so only about w
        return (f"the parameters moved {scale:.2f} times as far as the reference, about the world size{CAUSE}"
                "gradients summed, not averaged, or the learning rate multiplied by the world size")
    if abs(scale - 1 / w) < 0.15 / w:
        return (f"the parameters moved {scale:.2f} times as far as the reference, about 1/world size{CAUSE}"
                "gradients averaged twice, or the loss or the learning rate divided by the world size")
    return ""


def how_a_gradient_differs(got: torch.Tensor, mean: torch.Tensor, local: torch.Tensor, world_size: int,
                           still_local: str, rtol: float = 1e-4, atol: float = 1e-6) -> str:
    """What a rank's gradient is, where it should be the mean over the ranks (``local``: the rank's own, and
    ``still_local`` what that means for the exercise): "is 2 times the mean...: summed, not divided...", ..."""
    w, close = world_size, (lambda a, b: torch.allclose(a, b, rtol=rtol, atol=atol))
    if torch.isnan(got).any():
        return "is missing (None)"
    if w > 1 and close(got, mean * w):
        return f"is {w} times the mean over the ranks: summed, not divided by the world size"
    if w > 1 and close(got, mean / w):
        return f"is 1/{w} of the mean over the ranks: divided by the world size twice"
    if w > 1 and close(got, local):
        return f"is still this rank's own gradient: {still_local}"
    return f"differs from the mean of the ranks' gradients by up to {(got - mean).abs().max().item():.3g}"


def every_rank_calls_the_same_collectives(runs: Runs) -> str | None:
    for world in runs:
        if world.world_size == 1 or world.culprit() is not None:
            continue  # a rank that crashed left the others waiting: the crash is the mistake, charged elsewhere
        stuck = [(r, r.pending_collective()) for r in world.ranks
                 if (r.exitcode is None or r.error) and r.pending_collective()]
        for r, event in stuck:
            others = [o.rank for o in world.ranks if o.rank != r.rank and _calls(o).count(event["op"]) < _calls(r).count(event["op"])]
            if others:
                return (f"{world.label}: rank {r.rank} waits in {event['op']} called at "
                        f"{event['caller']}, which rank(s) {', '.join(map(str, others))} never called")
        sequences = {r.rank: _calls(r) for r in world.ranks if r.finished}
        if len(set(map(tuple, sequences.values()))) > 1:
            detail = "; ".join(f"rank {k}: {', '.join(v) or 'none'}" for k, v in sequences.items())
            return f"{world.label}: the ranks called different collectives ({detail})"
    return None


def _calls(rank) -> list[str]:
    return [e["op"] for e in rank.of("collective") if e.get("caller")]


def drawn_shares(world: WorldRun, n: int, epochs: int) -> list[list[list[int]]] | None:
    """What each rank's DistributedSampler yielded, epoch by epoch (shares[epoch][rank]), where every rank made
    ``epochs`` passes and each is what a sampler of ``n`` samples can yield at this world size; None otherwise."""
    drawn = [[e.get("indices") for e in r.of("sampler_iter")] for r in world.ranks]
    a_share = lambda i: isinstance(i, list) and len(i) == n // world.world_size and \
        all(isinstance(k, int) and 0 <= k < n for k in i)  # noqa: E731
    if {len(d) for d in drawn} != {epochs} or not all(a_share(i) for d in drawn for i in d):
        return None
    return [[d[epoch] for d in drawn] for epoch in range(epochs)]


def shares_disjoint_and_covering(per_rank: dict[int, list[int]], n: int, world_size: int, label: str) -> str | None:
    """Each sample index in exactly one rank's share (world_size > 1 also means shares must differ)."""
    counts = Counter(i for share in per_rank.values() for i in share)
    missing = [i for i in range(n) if counts[i] == 0]
    repeated = sorted(i for i, c in counts.items() if c > 1)
    if world_size > 1 and all(sorted(s) == list(range(n)) for s in per_rank.values()):
        return f"{label}: every rank saw the whole dataset ({n} samples): the ranks did not split the data"
    if repeated:
        owners = {i: [r for r, s in per_rank.items() if i in s] for i in repeated[:3]}
        shown = ", ".join(f"sample {i} on ranks {owners[i]}" for i in owners)
        return f"{label}: {len(repeated)} sample(s) seen by more than one rank ({shown})"
    if missing:
        return f"{label}: {len(missing)} sample(s) seen by no rank (e.g. {missing[:5]})"
    return None
