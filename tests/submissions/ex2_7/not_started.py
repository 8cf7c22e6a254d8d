def exposed_communication(numels, bucket_numel, compute_s, alpha_s, beta_s):
    # YOUR CODE HERE
    raise NotImplementedError()
