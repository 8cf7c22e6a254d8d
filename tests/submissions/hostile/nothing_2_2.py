# An empty training script: runs to the end, does nothing.
