"""Exercise 3.4's negative controls that are one edit of correct_state_dict_api.py (see ../edits.py)."""

BASE = "correct_state_dict_api.py"
BLOCKS = """    for layer in model.net:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
"""
GATHER_AND_SAVE = """    state = get_model_state_dict(model, options=options)  # a collective: every rank
    if dist.get_rank() == 0:
        torch.save(state, path)
"""

MISTAKES = {
    "wrong_optimizer_before_sharding": (
        "builds the optimizer before fully_shard, on the parameters it replaces",
        [("def setup(model, mesh, lr):\n", "def setup(model, mesh, lr):\n    optimizer = torch.optim.Adam(model.parameters(), lr=lr)\n"),
         ("    return torch.optim.Adam(model.parameters(), lr=lr)  # after sharding: the DTensor parameters\n",
          "    return optimizer\n")]),
    "wrong_root_only": (
        "calls fully_shard on the root alone, one group for the whole model",
        [(BLOCKS, "")]),
    "wrong_blocks_only": (
        "calls fully_shard on the blocks, never on the root",
        [("    fully_shard(model, mesh=mesh)\n", "")]),
    "wrong_gathers_on_rank0_only": (
        "gathers the full state dict on rank 0 only",
        [(GATHER_AND_SAVE, "    if dist.get_rank() == 0:\n        state = get_model_state_dict(model, options=options)\n"
                           "        torch.save(state, path)\n")]),
    "wrong_saves_sharded_state_dict": (
        "has rank 0 save model.state_dict(), its own shards",
        [(GATHER_AND_SAVE, "    if dist.get_rank() == 0:\n        torch.save(model.state_dict(), path)\n")]),
    "wrong_every_rank_saves": (
        "gathers the full state dict on every rank (no cpu_offload) and has every rank save it",
        [("    options = StateDictOptions(full_state_dict=True, cpu_offload=True)\n",
          "    options = StateDictOptions(full_state_dict=True)\n"),
         ("    if dist.get_rank() == 0:\n        torch.save(state, path)\n", "    torch.save(state, path)\n")]),
    "wrong_last_rank_saves": (
        "has the last rank write the full state dict, which with cpu_offload reaches rank 0 alone",
        [("    if dist.get_rank() == 0:\n        torch.save(state, path)\n",
          "    if dist.get_rank() == dist.get_world_size() - 1:\n        torch.save(state, path)\n")]),
}
MISTAKES["wrong_root_before_blocks"] = (
    "shards the root first, then the blocks, whose parameters the root's fully_shard has sharded already",
    [("    for layer in model.net:\n        if isinstance(layer, nn.Linear):\n            fully_shard(layer, mesh=mesh)\n"
      "    fully_shard(model, mesh=mesh)\n",
      "    fully_shard(model, mesh=mesh)\n    for layer in model.net:\n        if isinstance(layer, nn.Linear):\n"
      "            fully_shard(layer, mesh=mesh)\n")])
