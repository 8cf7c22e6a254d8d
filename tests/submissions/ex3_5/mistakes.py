"""Exercise 3.5's negative controls that are one edit of correct_get_state_dict.py (see ../edits.py)."""

BASE = "correct_get_state_dict.py"

MISTAKES = {
    "wrong_full_state_dict_on_every_rank": (
        "saves the full state dict, gathered on every rank, through DCP (which spreads the copies over the files)",
        [("from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict\n",
          "from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict\n"),
         ('    model_state, optimizer_state = get_state_dict(model, optimizer)\n'
          '    dcp.save(',
          '    full = StateDictOptions(full_state_dict=True)\n'
          '    model_state, optimizer_state = get_state_dict(model, optimizer, options=full)\n'
          '    dcp.save(')]),
    "correct_deprecated_save_state_dict": (
        "writes and reads with the deprecated dcp.save_state_dict and dcp.load_state_dict, as older tutorials do",
        [('    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)\n',
          '    dcp.save_state_dict({"model": model_state, "optimizer": optimizer_state},\n'
          '                        storage_writer=dcp.FileSystemWriter(directory))\n'),
         ('    dcp.load(state, checkpoint_id=directory)  # fills `state` in place, resharded to this job\'s ranks\n',
          '    dcp.load_state_dict(state, storage_reader=dcp.FileSystemReader(directory))\n')]),
    "wrong_model_only": (
        "saves and loads the model's state, not the optimizer's",
        [('    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)\n',
          '    dcp.save({"model": model_state}, checkpoint_id=directory)\n'),
         ('    state = {"model": model_state, "optimizer": optimizer_state}\n', '    state = {"model": model_state}\n'),
         ('    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])\n',
          '    model.load_state_dict(state["model"])\n')]),
    "wrong_saves_on_rank0_only": (
        "saves on rank 0 only, as with torch.save",
        [("import torch.distributed.checkpoint as dcp\n", "import torch.distributed as dist\nimport torch.distributed.checkpoint as dcp\n"),
         ('    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)\n',
          '    if dist.get_rank() == 0:\n'
          '        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)\n')]),
    "wrong_full_state_dict": (
        "saves the full state dict, gathered on rank 0, through DCP",
        [("from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict\n",
          "from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict\n"),
         ('    model_state, optimizer_state = get_state_dict(model, optimizer)\n'
          '    dcp.save(',
          '    full = StateDictOptions(full_state_dict=True, cpu_offload=True)\n'
          '    model_state, optimizer_state = get_state_dict(model, optimizer, options=full)\n'
          '    dcp.save(')]),
}
