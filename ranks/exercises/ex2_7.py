"""Exercise 2.7's harness: exposed_communication(...) on every case; what it returned, or the error it raised."""

from __future__ import annotations

from ddpcourse.given.ex2_7 import cases
from ranks.rig import number, raised

ARGUMENTS = ("numels", "bucket_numel", "compute_s", "alpha_s", "beta_s")


def harness(student, place, rec, seed, **_):
    answers = []
    for case in cases(seed):
        try:
            value = student.exposed_communication(*(list(case[a]) if isinstance(case[a], list) else case[a]
                                                    for a in ARGUMENTS))
        except NotImplementedError:
            raise
        except Exception as exc:
            answers.append(raised(exc))
            continue
        answers.append(number(value) if number(value) is not None else f"returned {repr(value)[:100]}, not a number")
    return {"answers": answers}
