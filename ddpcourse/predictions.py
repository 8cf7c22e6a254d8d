"""A prediction set beside what the run showed: the lessons' "Predict, then run" cells close with ``beside``.

A lesson asks for a guess in a variable (``my_guess = None  # your guess``) before a cell that measures.
That cell ends with ``beside(my_guess, measured, "what was measured", why="...")``, which prints the guess
next to the truth, says whether they agree, and gives the reason the truth is what it is. Without a guess
(the variable still None) it says so, and shows the truth anyway.
"""

from __future__ import annotations

import math
import numbers

REL_TOL = 0.1  # a number within 10% agrees: a prediction is an estimate


def agrees(prediction, truth) -> bool:
    """Numbers within 10% (or both about zero); text by its words, case aside; lists and dicts item by item."""
    if isinstance(truth, dict):
        return isinstance(prediction, dict) and all(agrees(prediction.get(k), v) for k, v in truth.items())
    if isinstance(truth, (list, tuple)):
        return (isinstance(prediction, (list, tuple)) and len(prediction) == len(truth)
                and all(agrees(p, t) for p, t in zip(prediction, truth)))
    if isinstance(truth, bool) or isinstance(prediction, bool):
        return isinstance(truth, bool) and isinstance(prediction, bool) and prediction == truth
    if isinstance(truth, numbers.Real) and isinstance(prediction, numbers.Real):
        return math.isclose(prediction, truth, rel_tol=REL_TOL, abs_tol=1e-9)
    if isinstance(truth, str) and isinstance(prediction, str):
        return prediction.strip().lower().split() == truth.strip().lower().split()
    return prediction == truth


def _unanswered(prediction) -> bool:
    if isinstance(prediction, dict):
        return all(v is None for v in prediction.values())
    if isinstance(prediction, (list, tuple)):
        return all(v is None for v in prediction)
    return prediction is None


def beside(prediction, truth, what: str, why: str = "") -> str:
    """Print (and return) the prediction beside the truth, whether they agree, and why the truth is so."""
    if _unanswered(prediction):
        lines = [f"{what}: the run shows {_shown(truth)}. You wrote no prediction (it is still None): "
                 "guess first next time, then run; a guess you can check is what trains the intuition."]
    elif agrees(prediction, truth):
        lines = [f"{what}: you predicted {_shown(prediction)}, the run shows {_shown(truth)}: they agree."]
    else:
        lines = [f"{what}: you predicted {_shown(prediction)}, the run shows {_shown(truth)}: they differ."]
    if why:
        lines.append(f"Why: {why}")
    text = "\n".join(lines)
    print(text)
    return text


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return str(value)
