# Joins a group of 4 whatever the launcher started: the ranks wait for peers that never come.
import os

import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo", world_size=4, rank=int(os.environ["RANK"]))
    dist.destroy_process_group()
