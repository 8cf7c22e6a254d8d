# Tries to read and change what lies outside its work directory: the package, the course, homes, other graders' files.
import glob
import os

import autograder

tried = [f"processes seen: {len(glob.glob('/proc/[0-9]*'))}"]
package = os.path.dirname(autograder.__file__)
course = os.path.dirname(package)
targets = [os.path.join(package, "checks.py"), os.path.join(course, "solutions", "02_ddp_basics.ipynb"),
           "/root/.bashrc", *glob.glob("/tmp/**/gradebook.db", recursive=True), *glob.glob("/home/*/*")]
for path in targets:
    for mode in ("r", "a"):
        try:
            with open(path, mode) as f:
                if mode == "a":
                    f.write("\n# changed by a submission\n")
            tried.append(f"opened {path} for {mode}")
        except OSError:
            pass
os.makedirs("/tmp/autograder-shared", exist_ok=True)  # would the next submission see it?


def evaluate(model, dataset, batch_size=16):
    raise RuntimeError(f"TRIED {tried}")
