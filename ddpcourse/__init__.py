"""Small, seeded building blocks shared by the lessons, the exercises and the grader.

Everything here is deterministic: the same seed gives the same data and the same
initial weights in every process, so distributed runs can be compared with a
single-process reference bit for bit (up to float rounding).
"""

from ddpcourse.data import toy_dataset
from ddpcourse.devices import pick
from ddpcourse.models import TinyNet, make_model

__all__ = ["toy_dataset", "TinyNet", "make_model", "pick"]
