import math


def per_rank_costs(scheme, blocks, d, h, world_size, rows):
    """Bytes on the busiest rank: parameters, gradients, Adam's state, and what it sends in one step."""
    w, float_bytes = world_size, 4
    block = 2 * d * h + h + d                      # Linear(d, h) and Linear(h, d), with biases
    if scheme == "data":
        params = blocks * block
    elif scheme == "pipeline":
        params = math.ceil(blocks / w) * block    # the largest stage
    else:                                          # tensor: 1/W of each weight and of the first bias
        params = blocks * (2 * d * h // w + h // w + d)
    ring = 2 * (w - 1) / w                         # a ring all-reduce sends this share of the tensor
    if scheme == "data":
        sent = ring * blocks * block * float_bytes
    elif scheme == "pipeline":
        directions = 0 if w == 1 else (1 if w == 2 else 2)
        sent = directions * rows * d * float_bytes
    else:
        sent = blocks * 2 * ring * rows * d * float_bytes
    memory = params * float_bytes
    return {"parameters": memory, "gradients": memory, "optimizer": 2 * memory, "sent": sent}
