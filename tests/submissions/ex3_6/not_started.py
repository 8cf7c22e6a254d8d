import math


def predict(scheme, shapes, world_size):
    # YOUR CODE HERE
    raise NotImplementedError()
