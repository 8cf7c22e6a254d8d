# Starts its own processes with mp.spawn inside a script the launcher already started once per process.
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(index):
    dist.init_process_group("gloo")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, nprocs=2)
