"""the per-bucket ready counters are never reset, so from step 2 on no bucket is ever all-reduced."""
import torch
import torch.distributed as dist
from torch import nn


class BucketedDataParallel(nn.Module):
    def __init__(self, module, bucket_numel):
        super().__init__()
        self.module = module
        for p in module.parameters():
            dist.broadcast(p.data, src=0)
        params = [p for p in module.parameters() if p.requires_grad]
        self.buckets, bucket, size = [], [], 0
        for p in reversed(params):  # gradients become ready from the last layer back
            if bucket and size + p.numel() > bucket_numel:
                self.buckets.append(bucket)
                bucket, size = [], 0
            bucket.append(p)
            size += p.numel()
        if bucket:
            self.buckets.append(bucket)
        self.bucket_of = {p: k for k, b in enumerate(self.buckets) for p in b}
        self.pending = [0] * len(self.buckets)
        self.in_flight = []
        for p in params:
            p.register_post_accumulate_grad_hook(self._ready)

    def _ready(self, p):
        k = self.bucket_of[p]
        self.pending[k] += 1
        if self.pending[k] == len(self.buckets[k]):
            flat = torch.cat([q.grad.flatten() for q in self.buckets[k]])
            self.in_flight.append((k, flat, dist.all_reduce(flat, async_op=True)))

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        world_size = dist.get_world_size()
        for k, flat, handle in self.in_flight:
            handle.wait()
            flat /= world_size
            start = 0
            for q in self.buckets[k]:
                q.grad.copy_(flat[start:start + q.numel()].view_as(q.grad))
                start += q.numel()
        self.in_flight = []
