EPOCHS = 3
BATCH_SIZE = 8
LR = 0.1
CHECKPOINT = "checkpoint.pt"


def main():
    # YOUR CODE HERE
    raise NotImplementedError()


if __name__ == "__main__":
    main()
