import torch
from torch import nn

from ddpcourse.data import CLASSES, FEATURES


class _Layers(nn.Module):
    """A model that is its `net`, a sequence of layers (state dict keys "net.0.weight", ...)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TinyNet(_Layers):
    """A two-layer perceptron: small enough to train in milliseconds on a CPU."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, CLASSES))


class BNNet(_Layers):
    """TinyNet with a batch norm after each hidden layer: its training depends on the batch it sees."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                 nn.Linear(hidden, CLASSES))


class MLP(_Layers):
    """Three linear layers of unequal sizes: enough tensors to shard, unevenly."""

    def __init__(self, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, CLASSES))


def _seeded(build, seed: int):
    """build(), its initial weights depending only on `seed`, not on the caller's RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def make_model(seed: int = 0) -> TinyNet:
    """A TinyNet whose initial weights depend only on `seed`, not on the caller's RNG state."""
    return _seeded(TinyNet, seed)


def make_bn_model(seed: int = 0) -> BNNet:
    """A BNNet whose initial weights depend only on `seed`."""
    return _seeded(BNNet, seed)


def make_mlp(seed: int = 0) -> MLP:
    """An MLP whose initial weights depend only on `seed`."""
    return _seeded(MLP, seed)
