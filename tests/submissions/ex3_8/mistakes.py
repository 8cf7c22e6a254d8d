"""Exercise 3.8's negative controls that are one edit of correct_set_model_state_dict.py (see ../edits.py)."""

BASE = "correct_set_model_state_dict.py"
ON_META = """    with torch.device("meta"):
        model = Tower()  # shapes only: no memory
"""
BLOCKS = """    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
"""
TO_EMPTY = "    model.to_empty(device=mesh.device_type)  # this rank's shards, not yet initialized\n"
LOAD = """    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
"""

MISTAKES = {
    "wrong_built_on_cpu": (
        "builds the whole Tower on every rank, then shards it",
        [(ON_META, "    model = Tower()\n")]),
    "wrong_to_empty_before_sharding": (
        "allocates the model (to_empty) before sharding it",
        [(TO_EMPTY, ""), (BLOCKS, TO_EMPTY + BLOCKS)]),
    "wrong_initialised_not_loaded": (
        "gives the shards fresh initial weights instead of the checkpoint's",
        [(LOAD, """    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
""")]),
    "wrong_no_broadcast_from_rank0": (
        "loads the full state dict without broadcast_from_rank0, though only rank 0 has it",
        [(", broadcast_from_rank0=True)", ")")]),
    "wrong_bfloat16_compute": (
        "computes in bfloat16 (the lesson's mixed-precision policy), though the Tower trains in float32",
        [(BLOCKS, """    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
"""), ("    fully_shard(model, mesh=mesh)\n", "    fully_shard(model, mesh=mesh, mp_policy=policy)\n")]),
    "wrong_reshard_ignored": (
        "never passes reshard_after_forward to the blocks",
        [(", reshard_after_forward=reshard_after_forward)", ")")]),
    "wrong_root_only": (
        "calls fully_shard on the root alone",
        [(BLOCKS, "")]),
    "wrong_reshard_on_root_only": (
        "passes reshard_after_forward to the root, not to the blocks",
        [(", reshard_after_forward=reshard_after_forward)", ")"),
         ("    fully_shard(model, mesh=mesh)\n", "    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)\n")]),
    "wrong_prediction_forgets_the_root": (
        "predicts the blocks' all-gathers and forgets the root's",
        [("return 17, True", "return 16, True"), ("return 9, False", "return 8, False")]),
    "wrong_prediction_fits_without_resharding": (
        "predicts that keeping every block gathered still fits",
        [("return 9, False", "return 9, True")]),
}
MISTAKES["wrong_reshard_on_the_root_too"] = (
    "passes reshard_after_forward to the root's fully_shard as well, which keeps its default",
    [("    fully_shard(model, mesh=mesh)\n", "    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)\n")])
