"""What runs inside the sandbox, beside the student's code: nothing here is trusted by the grader.

- ``host.py``: the rank host, the one process the grader starts (by absolute path, in Python's
  isolated mode); it forks the ranks and lesson 4's torchrun agents, and reads a saved checkpoint
  back as plain arrays (``export.py``);
- ``target.py``: what a forked rank runs: the trace installed, then the student's module handed to
  its exercise's harness (``exercises/exL_N.py``), or a whole script run as ``__main__``;
- ``trace.py``: the ranks' half of the trace, the events and arrays each rank writes;
- ``worker.py`` and ``forkserver.py``: every worker of a torchrun job, forked warm; ``faults.py``:
  where 4.2's fault lands, decided by the rank host alone;
- ``rig.py``: what the harnesses share (the process group, the device, where the rank is).

This package imports nothing from ``autograder``, the judge: the sandbox does not even show it.
What the grader knows of a launch it reads from files the ranks wrote, capped and as plain data,
and from the exit codes the host reports.
"""
