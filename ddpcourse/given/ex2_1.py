"""Exercise 2.1: the dataset's size, the batch size asked for, and the epochs the harness reads the loader."""

N, BATCH, EPOCHS = 96, 8, 3
