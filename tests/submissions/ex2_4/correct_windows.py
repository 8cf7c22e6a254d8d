import torch.nn.functional as F


def train_accumulate(model, optimizer, micro_batches, accum_steps):
    # window by window: all but the window's last micro-batch under no_sync; a short last window too
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start:start + accum_steps]
        with model.no_sync():
            for x, y in window[:-1]:
                (F.cross_entropy(model(x), y) / len(window)).backward()
        x, y = window[-1]
        (F.cross_entropy(model(x), y) / len(window)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
