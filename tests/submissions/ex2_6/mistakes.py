"""Exercise 2.6's negative controls that are one edit of correct_hooks.py (see ../edits.py)."""

BASE = "correct_hooks.py"
START = "            self.in_flight.append((k, flat, dist.all_reduce(flat, async_op=True)))\n"

MISTAKES = {
    "wrong_one_all_reduce_after_backward": (
        "registers no hook: one blocking all-reduce of every gradient, after backward",
        [(START, "            pass\n"),
         ("        for k, flat, handle in self.in_flight:\n            handle.wait()\n",
          "        flat = torch.cat([q.grad.flatten() for q in self.module.parameters()])\n"
          "        dist.all_reduce(flat)\n"
          "        self.in_flight = [(k, flat, None)] if False else []\n"
          "        start = 0\n"
          "        for q in self.module.parameters():\n"
          "            q.grad.copy_(flat[start:start + q.numel()].view_as(q.grad) / world_size)\n"
          "            start += q.numel()\n"
          "        for k, flat, handle in self.in_flight:\n")]),
    "wrong_never_waits_nor_copies_back": (
        "starts each bucket's all-reduce in the hook, then drops the handles: no wait, nothing copied back",
        [("        for k, flat, handle in self.in_flight:\n            handle.wait()\n",
          "        for k, flat, handle in []:\n")]),
    "wrong_waits_for_all_gradients": (
        "queues each bucket when it is ready but all-reduces them all in finish_gradient_synchronization",
        [(START, "            self.in_flight.append((k, flat, None))\n"),
         ("            handle.wait()\n", "            dist.all_reduce(flat)\n")]),
    "wrong_buckets_in_forward_order": (
        "fills the buckets from the first parameter on, in forward order",
        [("        for p in reversed(params):", "        for p in params:")]),
    "wrong_no_wait": (
        "never waits for the all-reduces it started before reading their results",
        [("            handle.wait()\n", "")]),
    "wrong_bucket_size_ignored": (
        "uses DDP's default of 25 MB per bucket, not the bucket_numel it is given",
        [("size + p.numel() > bucket_numel", "size + p.numel() > 25 * 2**20 // 4")]),
    "wrong_one_all_reduce_per_parameter": (
        "gives every parameter a bucket of its own",
        [("if bucket and size + p.numel() > bucket_numel:", "if bucket:")]),
    "wrong_blocking_all_reduce_in_hook": (
        "all-reduces each bucket in the hook without async_op: backward waits for every bucket",
        [(START, "            dist.all_reduce(flat)\n            self.in_flight.append((k, flat, None))\n"),
         ("            handle.wait()\n", "")]),
    "wrong_waits_in_the_hook": (
        "starts each all-reduce asynchronously, then waits for it at once in the hook",
        [(START, "            handle = dist.all_reduce(flat, async_op=True)\n            handle.wait()\n"
                 "            self.in_flight.append((k, flat, handle))\n")]),
    "wrong_summed": (
        "sums the gradients and never divides by the world size",
        [("            flat /= world_size\n", "")]),
    "wrong_not_copied_back": (
        "all-reduces a flattened copy of each bucket and never copies the result back into .grad",
        [("                q.grad.copy_(flat[start:start + q.numel()].view_as(q.grad))\n", "")]),
    "wrong_no_broadcast": (
        "never broadcasts the parameters: every rank trains from its own initial weights",
        [("        for p in module.parameters():\n            dist.broadcast(p.data, src=0)\n", "")]),
}
MISTAKES["wrong_waits_on_rank0_for_a_bucket_rank1_never_started"] = (
    "starts the first layer's bucket on rank 0 only, in the last step: rank 0 then waits for it forever",
    [(START, "            if k < len(self.buckets) - 1 or dist.get_rank() == 0 or self.steps < 2:\n"
             "                self.in_flight.append((k, flat, dist.all_reduce(flat, async_op=True)))\n"),
     ("        self.in_flight = []\n        self.pending", "        self.steps = getattr(self, 'steps', 0) + 1\n"
      "        self.in_flight = []\n        self.pending"),
     ("        self.in_flight = []\n        for p in params:", "        self.in_flight = []\n        self.steps = 0\n"
      "        for p in params:")])
