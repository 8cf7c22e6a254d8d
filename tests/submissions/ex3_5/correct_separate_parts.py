import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)


def _state(model, optimizer):
    return {"weights": get_model_state_dict(model), "adam": get_optimizer_state_dict(model, optimizer)}


def save(model, optimizer, directory):
    dcp.save(_state(model, optimizer), storage_writer=FileSystemWriter(directory))


def load(model, optimizer, directory):
    state = _state(model, optimizer)
    dcp.load(state, storage_reader=FileSystemReader(directory))
    set_model_state_dict(model, state["weights"])
    set_optimizer_state_dict(model, optimizer, state["adam"])
