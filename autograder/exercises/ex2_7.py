"""Exercise 2.7: a model of the overlap: exposed_communication(numels, bucket_numel, compute_s, alpha_s, beta_s).

The student's function is arithmetic, called in a rank on schedules of every kind (ddpcourse/given/ex2_7.py).
The grader plays each schedule out itself: backward produces the gradients from the last parameter to the
first, a bucket's all-reduce starts once its last gradient is ready and the previous all-reduce is done, and
what is exposed is the time from the end of backward to the end of the last all-reduce. The first two checks
are the schedule's two limits, each naming its mistake; the third judges the cases in between only, and leaves
a mistake that one of the limits has named to that check.
"""

from __future__ import annotations

from autograder.checks import Check
from autograder.exercises import Exercise
from autograder.exercises.ex2_6 import buckets
from autograder.hints import Hint
from ddpcourse.given.ex2_7 import cases

RTOL, ATOL = 1e-6, 1e-12


def exposed(case: dict, closes_at_cap: bool = False, queued: bool = True, forward: bool = False,
            from_start: bool = False, latency_once: bool = False, first_gradient_first: bool = False) -> float:
    """The exposed seconds of ``case``'s schedule; the keywords play out the mistakes the messages name."""
    numels, compute = case["numels"], case["compute_s"]
    ready, t = [0.0] * len(numels), 0.0
    for i in (range(len(numels)) if first_gradient_first else reversed(range(len(numels)))):
        t += compute[i]
        ready[i] = t
    if forward:  # buckets filled from the first parameter, started in the order they complete
        partition = [[len(numels) - 1 - i for i in b] for b in buckets(numels[::-1], case["bucket_numel"], closes_at_cap)]
        partition.sort(key=lambda b: min(b), reverse=True)
    else:
        partition = buckets(numels, case["bucket_numel"], closes_at_cap)
    free = end = 0.0
    for bucket in partition:
        start = max(max(ready[i] for i in bucket), free if queued else 0.0)
        free = start + (0.0 if latency_once else case["alpha_s"]) + case["beta_s"] * sum(numels[i] for i in bucket)
        end = max(end, free)
    end += case["alpha_s"] if latency_once else 0.0
    return end if from_start else end - t


def _right(got, want: float) -> bool:
    return isinstance(got, (int, float)) and abs(got - want) <= ATOL + RTOL * abs(want)


def _accepted(case: dict) -> list[float]:
    return [exposed(case), exposed(case, closes_at_cap=True)]


MISTAKES = (  # (what the answers match, what it means)
    ({"queued": False}, "the all-reduces were taken to run at the same time; they run one after another, so a "
                        "bucket that is ready waits until the previous all-reduce is done"),
    ({"forward": True}, "these are the times of buckets filled from the first parameter on; backward produces the "
                        "last parameter's gradient first, so the buckets are filled from the last parameter back"),
    ({"latency_once": True}, "alpha was charged once per step; every all-reduce pays it, once per bucket"),
    ({"first_gradient_first": True}, "these times have backward produce the first parameter's gradient first; it "
                                     "produces the last parameter's first, the order the layers ran in, reversed"),
    ({"from_start": True}, "this is the time from the start of backward; exposed is only what comes after "
                           "backward's last gradient"),
)


def _named_mistake(answers, judged) -> str | None:
    """What the student's answers on ``judged`` cases match, if a known mistake explains every one."""
    for keywords, meaning in MISTAKES:
        for rule in (False, True):
            if all(_right(answers[k], exposed(c, closes_at_cap=rule, **keywords)) for k, c in judged):
                return meaning
    return None


def _judge(runs, kind: tuple[str, str] | None, what: str) -> str | None:
    answers = runs.worlds[0].ranks[0].result.get("answers") if isinstance(runs.worlds[0].ranks[0].result, dict) else None
    if answers is None:
        return "exposed_communication was not called"
    every = list(enumerate(cases(runs.params["seed"])))
    judged = [(k, c) for k, c in every
              if (c["compute"], c["network"]) == kind or (kind is None and (c["compute"], c["network"]) not in LIMITS)]
    wrong = [(k, c) for k, c in judged if not any(_right(answers[k], a) for a in _accepted(c))]
    if not wrong:
        return None
    if kind is None and _charged_by_a_limit(answers, wrong, every):
        return None  # one known mistake explains these answers and a limit's: charged there
    k, case = wrong[0]
    if isinstance(answers[k], str):
        return f"{what}: {answers[k]}"
    shown = (f"{len(wrong)} of {len(judged)} schedules wrong; for example numels={case['numels']}, "
             f"bucket_numel={case['bucket_numel']}: you said {answers[k]:.6g} s where the schedule gives "
             f"{_accepted(case)[0]:.6g} s")
    meaning = _named_mistake(answers, judged)
    return f"{what}: {shown}" + (f": {meaning}" if meaning else "")


LIMITS = (("free", "slow"), ("slow", "slow"))


def _charged_by_a_limit(answers, wrong, every) -> bool:
    """Whether the known mistake that explains the wrong answers here also fails a limit's schedules."""
    meaning = _named_mistake(answers, wrong)
    if meaning is None:
        return False
    for limit in LIMITS:
        judged = [(k, c) for k, c in every if (c["compute"], c["network"]) == limit]
        failed = [(k, c) for k, c in judged if not any(_right(answers[k], a) for a in _accepted(c))]
        if failed and _named_mistake(answers, failed) == meaning:
            return True
    return False


def _free_computation(runs):
    return _judge(runs, LIMITS[0], "with every gradient ready at once (no computation)")


def _slow_computation(runs):
    return _judge(runs, LIMITS[1], "with backward much slower than the network")


def _every_schedule(runs):
    return _judge(runs, None, "on schedules where buckets queue behind each other")


def _work(runs):
    result = runs.worlds[0].ranks[0].result if runs.worlds and runs.worlds[0].ranks else None
    answers = result.get("answers") if isinstance(result, dict) else None
    if not answers or all(isinstance(a, str) for a in answers):
        return "exposed_communication returned no number for any schedule"


EXERCISE = Exercise(
    id="2.7",
    title="a model of the overlap: communication exposed after backward",
    kind="function", on_cpu=True,
    entry="exposed_communication",
    params=lambda seed: {"seed": seed},
    work=_work,
    world_sizes=(1,),
    checks=[
        Check("with no computation, every bucket's all-reduce is exposed, one after another", 3, _free_computation,
              hint=Hint(
                  idea="With no computation every gradient is ready at the start, so nothing hides the "
                       "communication: the buckets' all-reduces run back to back, and all of that time is exposed.",
                  section="Communication overlaps the backward pass: buckets",
                  where="The part of your `exposed_communication` that forms the buckets and charges each all-reduce "
                        "its time, read for the case where every compute time is zero.",
                  how="Check that your function forms 2.6's buckets, from the last parameter back, charges every "
                      "all-reduce the fixed cost alpha plus beta per element of its own bucket, and runs the "
                      "all-reduces one after another rather than side by side.")),
        Check("with slow computation, only the last bucket's all-reduce is exposed", 3, _slow_computation, hint=Hint(
            idea="When backward is much slower than the network, each all-reduce ends before the next gradient is "
                 "ready, except the one of the bucket that holds backward's final gradient: it can only start when "
                 "backward is over.",
            section="Communication overlaps the backward pass: buckets",
            where="How your function orders the gradients in time, and from which moment it counts the exposed time.",
            how="Let backward produce the gradients from the last parameter to the first, and count the exposed time "
                "from the moment it produces its final gradient, not from its start; the bucket holding that gradient "
                "is the one left exposed.")),
        Check("the exposed time equals the schedule's on schedules in between", 4, _every_schedule, hint=Hint(
            idea="Between the two limits buckets queue: a bucket's all-reduce starts at the later of two moments, "
                 "when its last gradient is ready and when the previous all-reduce has ended.",
            section="Communication overlaps the backward pass: buckets",
            where="The part of your function that plays the schedule out, bucket by bucket.",
            how="Play the schedule forward: when each gradient is ready (the compute times added up from the last "
                "parameter back), when each bucket's all-reduce can start (its gradients ready and the network free), "
                "when it ends; what is exposed is the last end minus the end of backward.")),
    ],
)
