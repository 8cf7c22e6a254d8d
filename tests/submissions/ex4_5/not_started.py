# YOUR CODE HERE
raise NotImplementedError()
