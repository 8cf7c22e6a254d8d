import torch
import torch.distributed as dist


def stage_of(model, rank, world_size):
    # YOUR CODE HERE
    raise NotImplementedError()


def pipeline_step(stage, inputs, targets, micro_batches):
    # YOUR CODE HERE
    raise NotImplementedError()
