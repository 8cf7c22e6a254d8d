"""Exercise 1.3's negative controls that are one edit of correct_blocking.py (see ../edits.py)."""

BASE = "correct_blocking.py"
BACKWARD = """        grad = None
        if not last:
            grad = torch.empty_like(out)
            dist.recv(grad, src=rank + 1)
        out.backward(grad)
        if not first:
            sending.append(dist.isend(x.grad, dst=rank - 1))
"""

MISTAKES = {
    "wrong_returns_loss_divided_twice": (
        "returns the mean of the losses already divided by the number of micro-batches",
        [("            losses.append(batch_loss.item())\n            out = batch_loss / len(xs)\n",
          "            out = batch_loss / len(xs)\n            losses.append(out.item())\n")]),
    "wrong_backward_only_on_last_rank": (
        "calls backward on the last rank only, as if autograd followed the activations to the other ranks",
        [(BACKWARD, "        if last:\n            out.backward()\n")]),
    "wrong_received_without_grad": (
        "receives the activations without requires_grad_(): their gradient is never computed",
        [("            x.requires_grad_()\n", "")]),
    "wrong_loss_not_divided": (
        "averages the reported loss but backpropagates each micro-batch's undivided loss",
        [("            out = batch_loss / len(xs)\n", "            out = batch_loss\n")]),
    "wrong_returns_sum_of_losses": (
        "returns the sum of the micro-batches' mean losses",
        [("    return sum(losses) / len(losses) if last else None\n", "    return sum(losses) if last else None\n")]),
    "wrong_whole_batch_at_once": (
        "ignores micro_batches: the whole batch goes through the pipeline at once",
        [("    xs, ts = inputs.chunk(micro_batches), targets.chunk(micro_batches)\n", "    xs, ts = [inputs], [targets]\n")]),
    "wrong_backward_after_each_forward": (
        "runs each micro-batch's backward right after its forward: no two stages ever work at once",
        [("        kept.append((x, out))\n    for x, out in reversed(kept):\n",
          "        kept.append((x, out))\n        x, out = kept[-1]\n")]),
    "wrong_stage_interleaved": (
        "gives rank r every W-th layer, starting at r",
        [("    layers = torch.tensor_split(torch.arange(len(model)), world_size)[rank]\n"
          "    return model[int(layers[0]):int(layers[-1]) + 1]\n", "    return model[rank::world_size]\n")]),
    "wrong_stage_drops_remainder": (
        "gives every rank len(model) // world_size layers: the remainder is on no rank",
        [("    layers = torch.tensor_split(torch.arange(len(model)), world_size)[rank]\n"
          "    return model[int(layers[0]):int(layers[-1]) + 1]\n",
          "    per = len(model) // world_size\n    return model[rank * per:(rank + 1) * per]\n")]),
    "wrong_stage_remainder_on_last": (
        "gives every rank len(model) // world_size layers and the last rank the rest: uneven when the rest is 2 or more",
        [("    layers = torch.tensor_split(torch.arange(len(model)), world_size)[rank]\n"
          "    return model[int(layers[0]):int(layers[-1]) + 1]\n",
          "    per = len(model) // world_size\n"
          "    return model[rank * per:(rank + 1) * per if rank < world_size - 1 else len(model)]\n")]),
    "correct_extra_layers_last": (
        "the stages that take one more layer are the last ones, not the first: as even as possible too",
        [("    layers = torch.tensor_split(torch.arange(len(model)), world_size)[rank]\n"
          "    return model[int(layers[0]):int(layers[-1]) + 1]\n",
          "    sizes = [len(model) // world_size + (r >= world_size - len(model) % world_size) for r in range(world_size)]\n"
          "    start = sum(sizes[:rank])\n"
          "    return model[start:start + sizes[rank]]\n")]),
    "wrong_stage_whole_model": (
        "keeps the whole model on every rank",
        [("    layers = torch.tensor_split(torch.arange(len(model)), world_size)[rank]\n"
          "    return model[int(layers[0]):int(layers[-1]) + 1]\n", "    return model\n")]),
    "wrong_buffer_shaped_like_the_input": (
        "receives into a buffer shaped like the model's input, not like the stage's first layer's input",
        [("            x = torch.empty(x.shape[0], stage[0].in_features)\n", "            x = torch.empty_like(x)\n")]),
}
