"""Exercise 1.1's negative controls that are one edit of correct_loops.py (see ../edits.py)."""

BASE = "correct_loops.py"
ZEROS = ("        if p.requires_grad:\n            if p.grad is None:  # unused by this rank's forward: it contributes "
         "zeros\n                p.grad = torch.zeros_like(p)\n")
REDUCE = "            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)\n            p.grad /= world_size\n"

MISTAKES = {
    "wrong_broadcasts_a_copy": (
        "broadcasts parameters_to_vector(...) from rank 0 and never copies it back into the parameters",
        [("    for p in model.parameters():\n        dist.broadcast(p.data, src=0)\n",
          "    flat = torch.nn.utils.parameters_to_vector(model.parameters())\n    dist.broadcast(flat, src=0)\n"),
         ("import torch.distributed as dist\n", "import torch\nimport torch.distributed as dist\n")]),
    "wrong_summed": (
        "sums the gradients and never divides by the world size",
        [("            p.grad /= world_size\n", "")]),
    "wrong_averaged_twice": (
        "divides by the world size twice",
        [("            p.grad /= world_size\n", "            p.grad /= world_size\n            p.grad /= world_size\n")]),
    "wrong_broadcast_from_own_rank": (
        "broadcasts from each rank's own rank: every rank keeps its own weights",
        [("dist.broadcast(p.data, src=0)", "dist.broadcast(p.data, src=dist.get_rank())")]),
    "wrong_only_weights": (
        "averages only the weight matrices, not the biases",
        [("        if p.requires_grad:\n", "        if p.requires_grad and p.dim() > 1:\n")]),
    "wrong_frozen_crashes": (
        "all-reduces every parameter's gradient, also a frozen parameter's, which is None",
        [(ZEROS, "        if True:\n")]),
    "wrong_zeros_for_the_frozen_too": (
        "gives every parameter without a gradient zeros, the frozen one too, and averages them",
        [("        if p.requires_grad:\n            if p.grad is None:", "        if True:\n            if p.grad is None:")]),
    "wrong_skips_missing_gradients": (
        "skips a parameter whose gradient is None on this rank: the ranks' calls pair different parameters",
        [(ZEROS, "        if p.grad is not None:\n")]),
    "wrong_averages_a_copy": (
        "averages a copy of each gradient: p.grad itself never changes",
        [(REDUCE, "            g = p.grad.clone()\n            dist.all_reduce(g)\n            g /= world_size\n")]),
    "wrong_reduce_to_rank0": (
        "reduces to rank 0 only: the other ranks keep their local gradients",
        [("dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)", "dist.reduce(p.grad, dst=0, op=dist.ReduceOp.SUM)")]),
    "wrong_broadcast_on_rank0_only": (
        "broadcasts only on rank 0: the others never join the collective",
        [("        dist.broadcast(p.data, src=0)\n",
          "        if dist.get_rank() == 0:\n            dist.broadcast(p.data, src=0)\n")]),
}
