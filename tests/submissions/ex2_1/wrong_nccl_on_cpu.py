import os

import torch
import torch.distributed as dist


def setup():
    # nccl needs GPUs: on a CPU-only machine this cannot work
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    return int(os.environ["RANK"]), local_rank, int(os.environ["WORLD_SIZE"]), torch.device("cuda", local_rank)
