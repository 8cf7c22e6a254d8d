"""The course's autograder: run a student's DDP code on real processes and check it from inside every rank.

Front ends: ``python -m autograder`` (cli.py), the notebook check cell (notebook.py),
pytest (pytest_plugin.py) and nbgrader (the check cells call notebook.check).
All of them call ``autograder.engine.grade``.

``import autograder`` stays light (no torch): pytest loads the plugin, and Jupyter the
extension, through this package in every run, graded or not.
"""

from autograder.report import CheckResult, Report

__all__ = ["grade", "Report", "CheckResult"]


def __getattr__(name):
    if name == "grade":
        from autograder.engine import grade

        return grade
    raise AttributeError(f"module 'autograder' has no attribute {name!r}")


def load_ipython_extension(ipython):
    """``%load_ext autograder``: registers the ``%%exercise`` cell magic."""
    from autograder.notebook import register

    register(ipython)
