# Buckets closed as DDP closes them (once they hold bucket_numel or more), pre-divided gradients,
# tensor hooks on the gradients, and the results collected through futures.
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters


class BucketedDataParallel(nn.Module):
    def __init__(self, module, bucket_numel):
        super().__init__()
        self.module = module
        flat = parameters_to_vector(module.parameters())
        dist.broadcast(flat, 0)
        vector_to_parameters(flat, module.parameters())
        self.buckets = []
        current = []
        for p in list(module.parameters())[::-1]:
            current.append(p)
            if sum(q.numel() for q in current) >= bucket_numel:
                self.buckets.append(current)
                current = []
        if current:
            self.buckets.append(current)
        self.grads = {}
        self.futures = []
        for p in module.parameters():
            p.register_hook(lambda g, p=p: self._arrived(p, g))

    def _arrived(self, p, grad):
        self.grads[id(p)] = grad / dist.get_world_size()
        for bucket in self.buckets:
            if any(q is p for q in bucket) and all(id(q) in self.grads for q in bucket):
                flat = torch.cat([self.grads[id(q)].reshape(-1) for q in bucket])
                work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True)
                self.futures.append((bucket, work.get_future()))
        return grad

    def forward(self, x):
        return self.module(x)

    def finish_gradient_synchronization(self):
        values = torch.futures.wait_all([f for _, f in self.futures])
        for (bucket, _), (flat,) in zip(self.futures, values):
            for q, part in zip(bucket, flat.split([q.numel() for q in bucket])):
                q.grad = part.view_as(q).clone()
        self.futures = []
        self.grads = {}
