import math

import torch
import torch.distributed as dist


class ZeroAdam:
    """Adam whose state is sharded: one flat, even partition of the parameters over the ranks."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.n = sum(p.numel() for p in self.params)
        self.chunk = math.ceil(self.n / self.world)  # padded to chunk * world elements
        self.start = min(self.rank * self.chunk, self.n)
        self.stop = min(self.start + self.chunk, self.n)
        self.exp_avg = torch.zeros(self.stop - self.start)
        self.exp_avg_sq = torch.zeros(self.stop - self.start)
        self.t = 0

    def _padded(self, tensors):
        flat = torch.cat([t.detach().flatten() for t in tensors])
        return torch.cat([flat, flat.new_zeros(self.chunk * self.world - self.n)])

    @torch.no_grad()
    def step(self):
        grads = self._padded(p.grad for p in self.params)
        mine = torch.empty(self.chunk)
        dist.reduce_scatter_tensor(mine, grads)  # the sum of this rank's piece, from every rank
        g = mine[: self.stop - self.start] / self.world
        beta1, beta2 = self.betas
        self.t += 1
        self.exp_avg.mul_(beta1).add_(g, alpha=1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        step_size = self.lr / (1 - beta1 ** self.t)
        denominator = self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** self.t) + self.eps
        weights = self._padded(self.params)
        piece = weights[self.rank * self.chunk:(self.rank + 1) * self.chunk].clone()
        piece[: self.stop - self.start] -= step_size * self.exp_avg / denominator
        gathered = torch.empty(self.chunk * self.world)
        dist.all_gather_into_tensor(gathered, piece)
        offset = 0
        for p in self.params:
            p.copy_(gathered[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    def owned(self):
        return self.start, self.stop

    def moments(self):
        return self.exp_avg, self.exp_avg_sq
