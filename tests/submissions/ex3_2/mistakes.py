"""Exercise 3.2's negative controls that are one edit of correct_convert.py (see ../edits.py)."""

BASE = "correct_convert.py"
CONVERT = "    model = convert_sync_batchnorm(model)  # before DDP: PyTorch's SyncBatchNorm on GPUs, the stand-in on CPUs\n"
WRAP = "    model = DDP(model, device_ids=[local_rank] if on_gpus else None)\n"

MISTAKES = {
    "wrong_never_destroys_the_group": (
        "ends without destroy_process_group(): its statistics and checkpoint are right, and judged so",
        [("    dist.destroy_process_group()\n", "")]),
    "correct_destroys_group_world": (
        "ends with destroy_process_group(dist.group.WORLD), which destroys every group, the default one too",
        [("    dist.destroy_process_group()\n", "    dist.destroy_process_group(dist.group.WORLD)\n")]),
    "correct_frees_the_model_first": (
        "frees and collects the DDP model before leaving the group (lesson 2, section 8): its state is judged as it was",
        [("    dist.destroy_process_group()\n",
          "    del model\n    import gc\n    gc.collect()\n    dist.destroy_process_group()\n")]),
    "wrong_converts_after_wrapping": (
        "converts the batch norm layers after wrapping the model in DDP",
        [(CONVERT + WRAP, WRAP + "    model = convert_sync_batchnorm(model)\n")]),
    "wrong_first_layer_only": (
        "synchronizes the first batch norm layer only",
        [(CONVERT, "    model.net[1] = convert_sync_batchnorm(model.net[1])\n")]),
    "wrong_pytorch_class_on_cpu": (
        "uses PyTorch's nn.SyncBatchNorm on CPUs, where it does not train",
        [(CONVERT, "    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)\n")]),
    "wrong_every_rank_saves": (
        "saves the checkpoint on every rank",
        [("    if dist.get_rank() == 0:\n        torch.save(", "    if True:\n        torch.save(")]),
    "wrong_saves_before_training": (
        "saves the checkpoint before training",
        [("    if dist.get_rank() == 0:\n        torch.save(model.module.state_dict(), CHECKPOINT)\n", ""),
         ("    for epoch in range(EPOCHS):\n",
          "    if dist.get_rank() == 0:\n        torch.save(model.module.state_dict(), CHECKPOINT)\n"
          "    for epoch in range(EPOCHS):\n")]),
}
