"""Faults for exercise 2.3: each is the correct solution `ex2_3/correct_strided.py` with lines
inserted just before its all-reduce (`ANCHOR`), written as edits (see ../edits.py).
"""

BASE = "../ex2_3/correct_strided.py"
ANCHOR = '    dist.all_reduce(counts, op=dist.ReduceOp.SUM)\n'

# name -> (what it does, the lines inserted before the all-reduce)
_INSERTED = {
    "crash_on_rank1": (
        "Rank 1 raises before the all-reduce; rank 0 waits for it there.",
        """\
    if rank == 1:
        raise ValueError("rank 1 lost its data")
"""),
    "exits_on_rank1": (
        "Rank 1 leaves with os._exit(3) before the all-reduce.",
        """\
    if rank == 1:
        import os
        os._exit(3)
"""),
    "segfault_on_rank1": (
        "Rank 1 dies of a segmentation fault before the all-reduce.",
        """\
    if rank == 1:
        import ctypes
        ctypes.string_at(0)  # reads address 0: SIGSEGV
"""),
    "mismatched_collectives": (
        "Rank 0 all-reduces while the other ranks broadcast: the ranks wait in different collectives.",
        """\
    if rank != 0:
        dist.broadcast(counts, src=0)
        return (counts[0] / counts[1]).item()
"""),
    "shape_mismatch": (
        "Each rank all-reduces a tensor of a different length.",
        """\
    counts = torch.cat([counts, torch.zeros(rank)])
"""),
    "slow_rank0": (
        "Correct, but rank 0 is slow: it must be waited for, not called hung.",
        """\
    if rank == 0:
        import time
        time.sleep(5)  # a long evaluation step on rank 0 only: the others wait in the all-reduce
"""),
    "crash_at_world_size_3": (
        "Correct at world sizes 1 and 2, crashes at 3.",
        """\
    if world_size == 3:
        raise RuntimeError("only three ranks break this")
"""),
    "parses_arguments": (
        "Correct, and reads its options with argparse, as a script would.",
        """\
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=batch_size)
    batch_size = parser.parse_args().batch_size
"""),
    "huge_output": (
        "Correct, but prints one 50 MB line.",
        """\
    print("x" * 50_000_000)
"""),
    "huge_output_then_crash": (
        "Prints one 50 MB line, then crashes.",
        """\
    print("y" * 50_000_000)
    raise ValueError("after a huge line")
"""),
    "memory_hog": (
        "Asks for far more memory than any rank may have.",
        """\
    hog = bytearray(64 << 30)  # 64 GiB
"""),
    "fork_bomb": (
        "Forks until it cannot.",
        """\
    import os, time
    children = 0
    try:
        while True:
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
            children += 1
    except OSError as exc:
        raise RuntimeError(f"fork failed after {children} children: {exc}")
"""),
    "reads_stdin": (
        "Every rank reads its standard input to the end: where the rank host takes the grader's requests.",
        """\
    import sys
    sys.stdin.read()
"""),
}

MISTAKES = {f"{name}_2_3": (doc, [(ANCHOR, lines + ANCHOR)]) for name, (doc, lines) in _INSERTED.items()}
