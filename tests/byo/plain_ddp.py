"""A stock DDP training script, as a user writes it: no torch-chaos import, no fixed-layout gradient hook.

Adam, dropout, an atomic checkpoint (``ckpt_<step>.pt`` written to a temporary name, fsynced, renamed) with model,
optimizer and every rank's RNG state, a resume from the newest checkpoint by step number, and one line per step:
``step=N loss=X`` (rank 0; the loss printed exactly, as Python's ``repr`` of the float).

The network registers its output layer before its input layer, as real models often do, so DDP's gradient
buckets are rebuilt after the first step and a resumed run sums gradients in another order for one step: a
correct resume differs from a fault-free run in the last bits of the loss. ``--bug`` plants a real resume bug
for the tests that must see it fail: ``no-optimizer-state``, ``off-by-one`` (re-runs the saved step),
``no-rng-state``.
"""

import argparse
import os
import re
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

BUGS = ("none", "no-optimizer-state", "off-by-one", "no-rng-state")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(256, 1)  # registered first, used last
        self.body = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Dropout(0.1),
                                  nn.Linear(256, 256), nn.ReLU(), nn.Dropout(0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def newest(ckpt_dir: str) -> str | None:
    steps = [int(m.group(1)) for n in os.listdir(ckpt_dir) if (m := re.fullmatch(r"ckpt_(\d+)\.pt", n))]
    return os.path.join(ckpt_dir, f"ckpt_{max(steps)}.pt") if steps else None


def save(path: str, state: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--save-every", type=int, default=20)
    p.add_argument("--ckpt-dir", default="ckpt")
    p.add_argument("--bug", choices=BUGS, default="none")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    os.makedirs(args.ckpt_dir, exist_ok=True)
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    torch.manual_seed(1000 + rank)  # each rank's own dropout stream
    start = 1
    path = newest(args.ckpt_dir)
    if path is not None:
        state = torch.load(path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        if args.bug != "no-optimizer-state":
            opt.load_state_dict(state["optimizer"])
        if args.bug != "no-rng-state":
            torch.set_rng_state(state["rng"][rank])
        start = state["step"] + (0 if args.bug == "off-by-one" else 1)
        if rank == 0:
            print(f"resumed from {path}", flush=True)
    g = torch.Generator().manual_seed(7)
    data = torch.randn(1024, 32, generator=g)
    target = (data[:, :8].sum(dim=1, keepdim=True) > 0).float()
    for step in range(start, args.steps + 1):
        idx = (torch.arange(48) + step * 48) % 1024
        mine = torch.tensor_split(idx, world)[rank]
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(ddp(data[mine]), target[mine])
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step={step} loss={float(total) / world!r}", flush=True)
        if step % args.save_every == 0:
            rngs = [None] * world
            dist.all_gather_object(rngs, torch.get_rng_state())
            if rank == 0:
                save(os.path.join(args.ckpt_dir, f"ckpt_{step}.pt"),
                     {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(), "rng": rngs})
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
