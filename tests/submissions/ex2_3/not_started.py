def evaluate(model, dataset, batch_size=16):
    # YOUR CODE HERE
    raise NotImplementedError()
