"""Exercise 2.2: the dataset's size, the batch size asked for, and the epochs the harness runs."""

N, BATCH, EPOCHS = 96, 8, 3
