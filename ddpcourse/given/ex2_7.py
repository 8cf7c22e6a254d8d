"""Exercise 2.7: schedules of backward and bucketed all-reduces, for the student's model of the overlap.

Each case is the arguments of exposed_communication(numels, bucket_numel, compute_s, alpha_s, beta_s):
the parameters' sizes in model.parameters() order, the bucket cap, the seconds backward spends on each
parameter's gradient, and the cost of an all-reduce of n elements, alpha_s + beta_s * n.
"""

from __future__ import annotations

import random

from ddpcourse.given.ex2_6 import make_deep_model

DEEP = [p.numel() for p in make_deep_model(0).parameters()]  # exercise 2.6's model


def _case(rng: random.Random, numels: list[int], compute: str, network: str) -> dict:
    per_element = {"free": 0.0, "slow": 1e-4, "fast": 1e-9}[compute]
    alpha, beta = {"free": (0.0, 0.0), "slow": (rng.uniform(1e-3, 5e-3), rng.uniform(1e-6, 1e-5)),
                   "mixed": (rng.uniform(1e-5, 1e-3), rng.uniform(1e-8, 1e-6))}[network]
    return {"numels": numels, "bucket_numel": rng.choice([max(numels) // 2, sum(numels) // 3, sum(numels) // 2]),
            "compute_s": [n * per_element * rng.uniform(0.5, 2) + (1e-4 if compute != "free" else 0) for n in numels],
            "alpha_s": alpha, "beta_s": beta, "compute": compute, "network": network}


def cases(seed: int) -> list[dict]:
    """Schedules of every kind: free computation, computation that hides everything but the last bucket,
    and mixed ones where buckets queue up behind each other."""
    rng = random.Random(seed)
    models = [DEEP] + [[rng.randint(1, 4000) for _ in range(rng.randint(3, 10))] for _ in range(5)]
    found = []
    for numels in models:
        found += [_case(rng, numels, "free", "slow"), _case(rng, numels, "slow", "slow"),
                  _case(rng, numels, "fast", "mixed"), _case(rng, numels, "fast", "slow")]
    return found
