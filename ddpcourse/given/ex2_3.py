"""Exercise 2.3: the size of the evaluation set."""

N = 97  # not a multiple of 2 or 3: padding and uneven shares show; and the shares hold different numbers of
        # batches of 16 (49 and 48 samples at 2 ranks: 4 batches and 3), so an exchange per batch leaves a rank waiting
