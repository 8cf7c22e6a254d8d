def setup():
    # YOUR CODE HERE
    raise NotImplementedError()
