# Shares as tensor_split makes them (the first ranks one element more), the list forms of the
# collectives (padded: gloo's take pieces of one size), and torch.optim.Adam stepping a flat shard of its own.
import torch
import torch.distributed as dist


class ZeroAdam:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        self.params = list(params)
        world, rank = dist.get_world_size(), dist.get_rank()
        total = sum(p.numel() for p in self.params)
        self.sizes = [len(piece) for piece in torch.arange(total).tensor_split(world)]
        self.start = sum(self.sizes[:rank])
        self.stop = self.start + self.sizes[rank]
        flat = torch.cat([p.detach().flatten() for p in self.params])
        self.shard = torch.nn.Parameter(flat[self.start:self.stop].clone())
        self.inner = torch.optim.Adam([self.shard], lr=lr, betas=betas, eps=eps)

    @torch.no_grad()
    def step(self):
        world = dist.get_world_size()
        grads = torch.cat([p.grad.flatten() for p in self.params]) / world
        longest = max(self.sizes)  # gloo's collectives take pieces of one size: pad them
        padded = [torch.cat([g, g.new_zeros(longest - len(g))]) for g in grads.split(self.sizes)]
        mine = torch.empty(longest)
        dist.reduce_scatter(mine, padded)
        self.shard.grad = mine[: self.stop - self.start].clone()
        self.inner.step()
        pieces = [torch.empty(longest) for _ in self.sizes]
        dist.all_gather(pieces, torch.cat([self.shard.detach(), mine.new_zeros(longest - len(self.shard))]))
        flat = torch.cat([piece[:size] for piece, size in zip(pieces, self.sizes)])
        torch.nn.utils.vector_to_parameters(flat, self.params)

    def owned(self):
        return self.start, self.stop

    def moments(self):
        state = self.inner.state[self.shard]
        return state["exp_avg"], state["exp_avg_sq"]
