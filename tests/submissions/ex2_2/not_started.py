def build_loader(dataset, batch_size):
    # YOUR CODE HERE
    raise NotImplementedError()
