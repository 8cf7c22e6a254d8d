def setup():
    # YOUR CODE HERE
    raise NotImplementedError()


def build_loader(dataset, batch_size):
    # YOUR CODE HERE
    raise NotImplementedError()
