import math

import torch
import torch.distributed as dist


class ZeroAdam:
    """Looks like ZeRO-1 from outside: a reduce-scatter, an all-gather, a share and its moments. Inside, every
    rank gathers the whole mean gradient and keeps and steps Adam's state for every element."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.n = sum(p.numel() for p in self.params)
        self.chunk = math.ceil(self.n / self.world)
        self.start = min(self.rank * self.chunk, self.n)
        self.stop = min(self.start + self.chunk, self.n)
        self.m = torch.zeros(self.n)
        self.v = torch.zeros(self.n)
        self.t = 0

    @torch.no_grad()
    def step(self):
        flat = torch.cat([p.grad.flatten() for p in self.params])
        grads = torch.cat([flat, flat.new_zeros(self.chunk * self.world - self.n)])
        mine = torch.empty(self.chunk)
        dist.reduce_scatter_tensor(mine, grads)
        full = torch.empty(self.chunk * self.world)
        dist.all_gather_into_tensor(full, mine)  # every rank now has the whole summed gradient
        g = full[: self.n] / self.world
        beta1, beta2 = self.betas
        self.t += 1
        self.m.mul_(beta1).add_(g, alpha=1 - beta1)
        self.v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        update = (self.lr / (1 - beta1 ** self.t)) * self.m / (self.v.sqrt() / math.sqrt(1 - beta2 ** self.t) + self.eps)
        offset = 0
        for p in self.params:
            p.sub_(update[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    def owned(self):
        return self.start, self.stop

    def moments(self):
        return self.m[self.start:self.stop], self.v[self.start:self.stop]
