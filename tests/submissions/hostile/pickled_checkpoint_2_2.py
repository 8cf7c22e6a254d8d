# Trains like the tutorial, then saves a checkpoint whose unpickling would run a command.
import os

import torch
import torch.distributed as dist


class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('MARKER', '/tmp/unpickled')}",))


def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        torch.save({"net.0.weight": Payload()}, "checkpoint.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
