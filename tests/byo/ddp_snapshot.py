"""A print-only elastic DDP job in the style of the public PyTorch DDP tutorials (no torch-chaos probe).

It prints its progress, saves a snapshot every ``--save-every`` epochs with a plain ``torch.save`` and resumes
from it; torch-chaos has to follow it through its output and its snapshot file alone.
"""

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--steps-per-epoch", type=int, default=10)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--snapshot", default="snapshot.pt")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    os.makedirs(os.path.dirname(args.snapshot) or ".", exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(20, 1)
    epochs_run = 0
    if os.path.exists(args.snapshot):
        snapshot = torch.load(args.snapshot, map_location="cpu", weights_only=True)
        model.load_state_dict(snapshot["MODEL_STATE"])
        epochs_run = snapshot["EPOCHS_RUN"]
        print(f"[rank{rank}] Resuming training from snapshot at Epoch {epochs_run}", flush=True)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    data = torch.randn(640, 20, generator=g)
    target = data.sum(dim=1, keepdim=True)
    for epoch in range(epochs_run, args.epochs):
        for i in range(args.steps_per_epoch):
            step = epoch * args.steps_per_epoch + i + 1
            batch = torch.arange(64) + ((step * 64) % 640)
            batch = batch % 640
            mine = torch.tensor_split(batch, world)[rank]
            optimizer.zero_grad()
            loss = F.mse_loss(ddp(data[mine]), target[mine], reduction="sum") / 64 * world
            loss.backward()
            optimizer.step()
            total = loss.detach() / world
            dist.all_reduce(total)
            if rank == 0:
                print(f"[rank0] Epoch {epoch} | step {step} | loss {total.item():.6f}", flush=True)
        if rank == 0 and (epoch + 1) % args.save_every == 0:
            torch.save({"MODEL_STATE": model.state_dict(), "EPOCHS_RUN": epoch + 1}, args.snapshot)
            print(f"Epoch {epoch} | Training snapshot saved at {args.snapshot}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
