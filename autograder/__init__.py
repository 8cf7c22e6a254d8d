"""The course's autograder: run a student's DDP code on real processes and check it from inside every rank.

Front ends: ``python -m autograder`` (cli.py), the notebook check cell (notebook.py),
pytest (pytest_plugin.py) and nbgrader (the check cells call notebook.check).
All of them call ``autograder.engine.grade``.
"""

from autograder.engine import grade
from autograder.report import CheckResult, Report

__all__ = ["grade", "Report", "CheckResult"]
