"""Each function exercise's harness, run in every rank: ``harness(student, place, rec, **params)``.

It builds what the exercise gives the student's code (``ddpcourse.given``), calls it, and records
what it did (``rec``, ranks/trace.py). The checks that judge it are the grader's, in
``autograder/exercises/`` under the same file name, and never run here.
"""
