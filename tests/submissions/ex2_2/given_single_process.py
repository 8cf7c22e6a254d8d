import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ddpcourse import make_model, toy_dataset

EPOCHS = 3
BATCH_SIZE = 8
LR = 0.1
CHECKPOINT = "checkpoint.pt"


def main():
    """Train TinyNet on the toy dataset in one process and save its weights."""
    dataset = toy_dataset(n=96, seed=0)
    model = make_model(seed=0)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    for epoch in range(EPOCHS):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: last batch loss {loss.item():.3f}")

    torch.save(model.state_dict(), CHECKPOINT)


if __name__ == "__main__":
    main()
