"""Exercise 3.1's negative controls that are one edit of correct_differentiable.py (see ../edits.py)."""

BASE = "correct_differentiable.py"
STATS = """    stats = torch.cat([x.sum(dims), (x * x).sum(dims), count])
    stats = all_reduce(stats)                         # one call; autograd passes through it
    total, squares, n = stats[:channels], stats[channels:2 * channels], stats[-1]
    mean = total / n
    var = squares / n - mean ** 2                     # biased: what batch norm normalizes with
"""

MISTAKES = {
    "wrong_eps_outside_sqrt": (
        "adds eps after the square root: the same for large variances, wrong for a channel whose variance is below eps",
        [("torch.sqrt(var.view(shape) + eps)", "(torch.sqrt(var.view(shape)) + eps)")]),
    "wrong_mean_of_means": (
        "averages the ranks' means and variances, as if every rank had as many samples",
        [(STATS, "    stats = all_reduce(torch.cat([x.mean(dims), x.var(dims, unbiased=False), count]))\n"
                 "    mean = stats[:channels] / dist.get_world_size()\n"
                 "    var = stats[channels:2 * channels] / dist.get_world_size()\n"
                 "    n = stats[-1]\n")]),
    "wrong_pooled_variances": (
        "weights each rank's variance by its count, and forgets how far the ranks' means lie apart",
        [(STATS, "    stats = torch.cat([x.sum(dims), x.var(dims, unbiased=False) * count, count])\n"
                 "    stats = all_reduce(stats)\n"
                 "    total, spread, n = stats[:channels], stats[channels:2 * channels], stats[-1]\n"
                 "    mean, var = total / n, spread / n\n")]),
    "wrong_normalizes_with_unbiased_variance": (
        "normalizes with the unbiased variance",
        [("    var = squares / n - mean ** 2                     # biased: what batch norm normalizes with\n",
          "    var = (squares / n - mean ** 2) * n / (n - 1)\n"),
         ("momentum * var * n / (n - 1))", "momentum * var)")]),
    "wrong_biased_running_variance": (
        "updates the running variance with the biased variance",
        [("momentum * var * n / (n - 1))", "momentum * var)")]),
    "wrong_running_statistics_on_rank0_only": (
        "updates the running statistics on rank 0 only",
        [("    with torch.no_grad():\n", "    with torch.no_grad():\n      if dist.get_rank() == 0:\n")]),
    "wrong_one_all_reduce_per_statistic": (
        "all-reduces the sums, the sums of squares and the count in three calls",
        [("    stats = torch.cat([x.sum(dims), (x * x).sum(dims), count])\n"
          "    stats = all_reduce(stats)                         # one call; autograd passes through it\n",
          "    stats = torch.cat([all_reduce(x.sum(dims)), all_reduce((x * x).sum(dims)), all_reduce(count)])\n")]),
    "wrong_plain_all_reduce": (
        "all-reduces with dist.all_reduce, which autograd does not see",
        [("    stats = all_reduce(stats)                         # one call; autograd passes through it\n",
          "    dist.all_reduce(stats)\n")]),
}
