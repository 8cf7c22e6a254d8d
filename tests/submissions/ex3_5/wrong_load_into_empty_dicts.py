"""dcp.load into empty dicts (as if it read everything): DCP only fills keys already present, so nothing loads."""
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def save(model, optimizer, directory):
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)


def load(model, optimizer, directory):
    state = {"model": {}, "optimizer": {}}
    dcp.load(state, checkpoint_id=directory)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
