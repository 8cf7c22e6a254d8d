# A complete DDP script whose checkpoint, once written, is replaced by a zip of 2 MB that inflates to 1 GB.
import io
import zipfile

import torch
import torch.distributed as dist

from ddpcourse import make_model

dist.init_process_group("gloo")
model = make_model(0)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
from ddpcourse.data import FEATURES
model(torch.zeros(1, FEATURES)).sum().backward()
optimizer.step()
if dist.get_rank() == 0:
    torch.save(model.state_dict(), "checkpoint.pt")
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("checkpoint/data/0", "w", force_zip64=True) as member:
            block = b"\0" * (1 << 24)
            for _ in range(64):  # 1 GB of zeros
                member.write(block)
        archive.writestr("checkpoint/data.pkl", b"")
    with open("checkpoint.pt", "wb") as f:
        f.write(bomb.getvalue())
dist.barrier()
dist.destroy_process_group()
