# Writes what chokes a parser into every file the grader reads back: JSON nested 200,000 deep, a .npy header
# that claims 8 TiB, a time stamp that is a string, and 1,000 nested directories to clean up.
import json
import os
import time
from pathlib import Path

DEEP = b"[" * 200_000 + b"]" * 200_000


def evaluate(model, dataset, batch_size=16):
    rank = int(os.environ["RANK"])
    here = Path.cwd()
    with open(here / f"rank{rank}.events", "ab") as events:
        events.write(DEEP + b"\n")
        events.write(json.dumps({"kind": "enter", "call": "all_reduce", "t": "soon", "seq": "one"}).encode() + b"\n")
        events.write(json.dumps({"kind": "collective", "op": ["all_reduce"], "caller": 7, "t": 1e400}).encode()[:60] + b"\n")
    deep = here
    for _ in range(1000):
        deep = deep / "d"
    try:
        os.makedirs(deep)
    except OSError:
        pass
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776,), }"
    npy = b"\x93NUMPY\x01\x00" + len(header.ljust(118) + "\n").to_bytes(2, "little") + (header.ljust(118) + "\n").encode()
    if os.fork() == 0:  # once the rank's own trace is saved, put these in its place
        result = here / f"rank{rank}.result.json"
        deadline = time.time() + 20
        while not result.exists() and time.time() < deadline:
            time.sleep(0.001)
        (here / f"rank{rank}.snapshots.npy").write_bytes(npy + b"\0" * 64)
        result.write_bytes(b'{"result": ' + DEEP + b', "snapshot_labels": ["a"], "tampered": []}')
        os._exit(0)
    return 0.5
