"""SGD and Adam written out: the updates torch.optim's make with their defaults, for the references the
grader trains and the steps a harness measures.

torch.optim imports torch._dynamo on first use (seconds), which neither needs.
"""

from __future__ import annotations

import torch


class SGD:
    """SGD, the update torch.optim.SGD makes with its defaults (and `momentum`, without dampening)."""

    def __init__(self, params, lr: float, momentum: float = 0.0):
        self.params, self.lr, self.momentum = list(params), lr, momentum
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        for k, p in enumerate(self.params):
            if p.grad is None:
                continue
            update = p.grad
            if self.momentum:
                buffer = self.buffers[k]
                self.buffers[k] = update = (p.grad.clone() if buffer is None else buffer.mul_(self.momentum).add_(p.grad))
            p.add_(update, alpha=-self.lr)


class Adam:
    """The update torch.optim.Adam makes with its defaults (no weight decay, no amsgrad), in float64.

    Its state is what Adam's state_dict holds per parameter: step, exp_avg, exp_avg_sq.
    """

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.state = [{"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                      for p in self.params]

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        beta1, beta2 = self.betas
        for p, s in zip(self.params, self.state):
            if p.grad is None:
                continue
            s["step"] += 1
            s["exp_avg"].mul_(beta1).add_(p.grad, alpha=1 - beta1)
            s["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            correction1, correction2 = 1 - beta1 ** s["step"], 1 - beta2 ** s["step"]
            denominator = (s["exp_avg_sq"].sqrt() / correction2 ** 0.5).add_(self.eps)
            p.addcdiv_(s["exp_avg"], denominator, value=-self.lr / correction1)
