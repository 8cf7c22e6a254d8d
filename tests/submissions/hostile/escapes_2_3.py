# Tries to read and change what lies outside its work directory: the grader's package and answer keys, the
# course and its solutions, homes, other graders' files; and to reach its rank host: trace it, read its
# memory, take its descriptors.
import ctypes
import glob
import os

import ranks

tried = [f"processes seen: {len(glob.glob('/proc/[0-9]*'))}"]
course = os.path.dirname(os.path.dirname(ranks.__file__))
targets = [os.path.join(course, "autograder", "checks.py"), os.path.join(course, "autograder", "exercises", "ex1_0.py"),
           os.path.join(course, "solutions", "02_ddp_basics.ipynb"), os.path.join(course, "README.md"),
           "/root/.bashrc", "/etc/shadow", *glob.glob("/tmp/**/gradebook.db", recursive=True),
           *glob.glob("/home/*/*"), *glob.glob("/*/solutions/*.ipynb"), *glob.glob("/*/*/solutions/*.ipynb")]
for path in targets:
    for mode in ("r", "a"):
        try:
            with open(path, mode) as f:
                if mode == "a":
                    f.write("\n# changed by a submission\n")
            tried.append(f"opened {path} for {mode}")
        except OSError:
            pass
host = os.getppid()
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, host, None, None) == 0:  # PTRACE_ATTACH
    tried.append("traced its rank host")
for path in (f"/proc/{host}/mem", f"/proc/{host}/environ", *glob.glob(f"/proc/{host}/fd/*")):
    try:
        open(path, "rb").close()
        tried.append(f"opened {path}")
    except OSError:
        pass
os.makedirs("/tmp/autograder-shared", exist_ok=True)  # would the next submission see it?


def evaluate(model, dataset, batch_size=16):
    raise RuntimeError(f"TRIED {tried}")
