"""Exercise 1.5: the models, world sizes and schemes per_rank_costs is asked about, and the step measured."""

from __future__ import annotations

SCHEMES = ("data", "pipeline", "tensor")
QUANTITIES = ("parameters", "gradients", "optimizer", "sent")
# (blocks, d, h, rows): h a multiple of every world size; blocks that some world sizes do not divide
MODELS = ((3, 16, 48, 32), (5, 8, 24, 12), (4, 32, 96, 7))
WORLD_SIZES = (1, 2, 3, 4)


def cases():
    for blocks, d, h, rows in MODELS:
        for w in WORLD_SIZES:
            for scheme in SCHEMES:
                yield scheme, blocks, d, h, w, rows


MEASURED = MODELS[0]  # the model each launch trains one step of, under each scheme
# The student's own code: the exercise of each cell 1.5 also runs, and the scheme it runs
OWN = {"1.1": "data", "1.2": "data", "1.3": "pipeline", "1.4": "tensor"}
