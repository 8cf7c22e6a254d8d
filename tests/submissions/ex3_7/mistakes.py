"""Exercise 3.7's negative controls that are one edit of correct_flat.py (see ../edits.py)."""

BASE = "correct_flat.py"

MISTAKES = {
    "wrong_all_reduces_the_gradients": (
        "all-reduces every gradient, then keeps its own piece: twice the traffic ZeRO-1 needs",
        [("        mine = torch.empty(self.chunk)\n        dist.reduce_scatter_tensor(mine, grads)  # the sum of this "
          "rank's piece, from every rank\n",
          "        dist.all_reduce(grads)\n        mine = grads[self.rank * self.chunk:(self.rank + 1) * self.chunk]\n")]),
    "wrong_moments_for_every_element": (
        "keeps Adam's moments for every element of the model, updating only its own share",
        [("        self.exp_avg = torch.zeros(self.stop - self.start)\n        self.exp_avg_sq = torch.zeros(self.stop - "
          "self.start)\n", "        self.exp_avg = torch.zeros(self.n)\n        self.exp_avg_sq = torch.zeros(self.n)\n"),
         ("        self.exp_avg.mul_(beta1).add_(g, alpha=1 - beta1)\n        self.exp_avg_sq.mul_(beta2).addcmul_(g, g, "
          "value=1 - beta2)\n",
          "        full = torch.zeros(self.n)\n        full[self.start:self.stop] = g\n"
          "        self.exp_avg.mul_(beta1).add_(full, alpha=1 - beta1)\n"
          "        self.exp_avg_sq.mul_(beta2).addcmul_(full, full, value=1 - beta2)\n"),
         ("        piece[: self.stop - self.start] -= step_size * self.exp_avg / denominator\n",
          "        piece[: self.stop - self.start] -= (step_size * self.exp_avg / denominator)[self.start:self.stop]\n")]),
    "wrong_summed_gradients": (
        "steps with the sum of the ranks' gradients, not their mean",
        [("        g = mine[: self.stop - self.start] / self.world\n", "        g = mine[: self.stop - self.start]\n")]),
    "wrong_no_all_gather": (
        "updates its own share in place and never sends it: the ranks' models drift apart",
        [("        gathered = torch.empty(self.chunk * self.world)\n        dist.all_gather_into_tensor(gathered, piece)\n",
          "        gathered = weights.clone()\n        gathered[self.rank * self.chunk:(self.rank + 1) * self.chunk] = piece\n")]),
}
