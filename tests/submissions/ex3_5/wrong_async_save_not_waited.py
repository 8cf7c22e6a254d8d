"""dcp.async_save and returns at once, never waiting on its future: the job may end before the files are written."""
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def save(model, optimizer, directory):
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.async_save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)


def load(model, optimizer, directory):
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=directory)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
