"""Exercise 1.4's negative controls that are one edit of correct_functions.py (see ../edits.py)."""

BASE = "correct_functions.py"
MLP = """    x = CopyToTensorParallel.apply(x)
    z = F.gelu(x @ a)
    return ReduceFromTensorParallel.apply(z @ b)
"""
G_FORWARD = """        total = partial.clone()
        dist.all_reduce(total)
        return total
"""

MISTAKES = {
    "wrong_plain_all_reduce": (
        "sums the partial outputs with a plain dist.all_reduce, which autograd cannot see, and has no f",
        [(MLP, "    y = F.gelu(x @ a) @ b\n    dist.all_reduce(y)\n    return y\n")]),
    "wrong_no_f": (
        "has g but no f: the input's gradient is never summed over the ranks",
        [("    x = CopyToTensorParallel.apply(x)\n", "")]),
    "wrong_no_g": (
        "has f but no g: each rank returns its own partial output",
        [("    return ReduceFromTensorParallel.apply(z @ b)\n", "    return z @ b\n")]),
    "wrong_differentiable_all_reduce": (
        "uses torch.distributed.nn.functional.all_reduce for g, whose backward all-reduces the gradient again",
        [("    return ReduceFromTensorParallel.apply(z @ b)\n",
          "    from torch.distributed.nn.functional import all_reduce\n    return all_reduce(z @ b)\n")]),
    "wrong_f_and_g_swapped": (
        "all-reduces the input in the forward pass and the output's gradient in the backward pass",
        [(MLP, "    x = ReduceFromTensorParallel.apply(x)\n    z = F.gelu(x @ a)\n"
               "    return CopyToTensorParallel.apply(z @ b)\n")]),
    "wrong_second_weight_by_columns": (
        "splits B by columns, like A, instead of by the rows that match A's columns",
        [("    return A[:, cols], B[cols, :]\n", "    return A[:, cols], B[:, cols]\n")]),
    "wrong_rows_do_not_match": (
        "takes every W-th row of B while taking a block of A's columns",
        [("    return A[:, cols], B[cols, :]\n", "    return A[:, cols], B[rank::world_size, :]\n")]),
}
