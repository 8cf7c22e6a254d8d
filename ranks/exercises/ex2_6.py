"""Exercise 2.6's harness: BucketedDataParallel(model, bucket_numel), trained for a few steps by hand.

The harness hooks every parameter before the student's wrapper does, so that the moment each gradient
is ready is recorded among the all-reduces the wrapper starts and the waits for them.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddpcourse.given.ex2_6 import BUCKET_NUMEL, LR, STEPS, make_deep_model, shard, start_seed
from ranks.rig import flat, flat_grads, join_group


def harness(student, place, rec, seed, **_):
    join_group()
    rank, w = place.rank, place.world_size
    model = make_deep_model(start_seed(seed, rank))
    for index, p in enumerate(model.parameters()):
        p.register_post_accumulate_grad_hook(lambda p, index=index: rec.event("gradient_ready", index=index))
    wrapped = student.BucketedDataParallel(model, BUCKET_NUMEL[w])
    rec.keep("after construction", flat(model.parameters()))
    for step in range(STEPS):
        x, y = shard(seed, step, w, rank)
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(wrapped(x), y)
        rec.event("phase", step=step, phase="backward")
        loss.backward()
        rec.event("phase", step=step, phase="finish_gradient_synchronization")
        wrapped.finish_gradient_synchronization()
        rec.event("phase", step=step, phase="step")
        rec.keep(f"gradients at step {step}", flat_grads(model))
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= LR * p.grad
        rec.keep(f"parameters after step {step}", flat(model.parameters()))
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
    return {}
