def per_rank_costs(scheme, blocks, d, h, world_size, rows):
    # YOUR CODE HERE
    raise NotImplementedError()
