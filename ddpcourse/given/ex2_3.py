"""Exercise 2.3: the size of the evaluation set."""

N = 101  # not a multiple of 2 or 3: padding and uneven shares show
