"""Small, seeded building blocks shared by the lessons, the exercises and the grader.

Everything here is deterministic: the same seed gives the same data and the same
initial weights in every process, so distributed runs can be compared with a
single-process reference bit for bit (up to float rounding).
"""

from ddpcourse.data import toy_dataset
from ddpcourse.devices import pick
from ddpcourse.models import BNNet, MLP, TinyNet, make_bn_model, make_mlp, make_model

__all__ = ["toy_dataset", "TinyNet", "make_model", "BNNet", "make_bn_model", "MLP", "make_mlp", "pick",
           "convert_sync_batchnorm", "CpuSyncBatchNorm"]


def __getattr__(name: str):
    # Imported on first use, so that a grader can hide the stand-in (it is exercise 3.1's answer).
    if name in ("convert_sync_batchnorm", "CpuSyncBatchNorm"):
        from ddpcourse import syncbn

        return getattr(syncbn, name)
    raise AttributeError(f"module 'ddpcourse' has no attribute {name!r}")
