EPOCHS = 2
BATCH_SIZE = 4  # per process
LR = 0.1
CHECKPOINT = "bn_checkpoint.pt"


def main():
    # YOUR CODE HERE
    raise NotImplementedError()


if __name__ == "__main__":
    main()
