# Deals whole tensors out, as ZeroRedundancyOptimizer does: the largest tensor decides a rank's share.
import torch
import torch.distributed as dist


class ZeroAdam:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        self.params = list(params)
        world, rank = dist.get_world_size(), dist.get_rank()
        self.owner = [k % world for k in range(len(self.params))]  # tensor k to rank k mod W
        self.offsets = [0]
        for p in self.params:
            self.offsets.append(self.offsets[-1] + p.numel())
        mine = [k for k in range(len(self.params)) if self.owner[k] == rank]
        self.mine = mine
        self.inner = torch.optim.Adam([self.params[k] for k in mine], lr=lr, betas=betas, eps=eps) if mine else None

    @torch.no_grad()
    def step(self):
        world = dist.get_world_size()
        grads = torch.cat([p.grad.flatten() for p in self.params]) / world
        sizes = [sum(self.params[k].numel() for k in range(len(self.params)) if self.owner[k] == r)
                 for r in range(world)]
        order = [k for r in range(world) for k in range(len(self.params)) if self.owner[k] == r]
        grouped = torch.cat([grads[self.offsets[k]:self.offsets[k + 1]] for k in order])
        longest = max(sizes)  # gloo's collectives take pieces of one size: pad them
        mine = torch.empty(longest)
        dist.reduce_scatter(mine, [torch.cat([g, g.new_zeros(longest - len(g))]) for g in grouped.split(sizes)])
        offset = 0
        for k in self.mine:
            self.params[k].grad = mine[offset:offset + self.params[k].numel()].view_as(self.params[k]).clone()
            offset += self.params[k].numel()
        if self.inner:
            self.inner.step()
        pieces = [torch.empty(longest) for _ in sizes]
        own = torch.cat([self.params[k].detach().flatten() for k in self.mine] or [torch.empty(0)])
        dist.all_gather(pieces, torch.cat([own, own.new_zeros(longest - len(own))]))
        flat = torch.cat([piece[:size] for piece, size in zip(pieces, sizes)])
        offset = 0
        for k in order:
            self.params[k].copy_(flat[offset:offset + self.params[k].numel()].view_as(self.params[k]))
            offset += self.params[k].numel()

    def owned(self):
        # the owned elements are not contiguous: reported as the span of the first one
        k = self.mine[0]
        return self.offsets[k], self.offsets[k + 1]

    def moments(self):
        k = self.mine[0]
        state = self.inner.state[self.params[k]]
        return state["exp_avg"].flatten(), state["exp_avg_sq"].flatten()
