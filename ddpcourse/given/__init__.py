"""What each graded exercise's code is given: seeded data, models and sizes, one file per exercise.

The same for the ranks, which are given them (``ranks/exercises/exL_N.py``), and for the grader,
which computes from them what a correct answer must be (``autograder/exercises/exL_N.py``). Nothing
here is an answer: it is the question.
"""
