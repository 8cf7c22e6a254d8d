import torch
import torch.distributed as dist
from torch import nn


class BucketedDataParallel(nn.Module):
    def __init__(self, module, bucket_numel):
        super().__init__()
        self.module = module
        raise NotImplementedError

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        raise NotImplementedError
