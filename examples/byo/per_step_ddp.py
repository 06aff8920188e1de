"""Per-step DDP training with checkpoint/resume, written the way a team would write it for torchrun.

Run it with:  torchrun --nnodes 1 --nproc-per-node 2 per_step_ddp.py --steps 400 --save-every 50

Plain PyTorch only (gloo, CPU): a small MLP with dropout trained with Adam on a synthetic regression task. Rank 0
prints ``step=N loss=X`` after every optimizer step (X = the loss averaged over all ranks) and saves
``ckpt_<step>.pt`` every ``--save-every`` steps: model, optimizer, every rank's RNG state and the step, written to a
temporary file, fsynced and renamed (so a crash never leaves a half-written ``ckpt_*.pt``). The last ``--keep``
checkpoints are kept. At start the job resumes from the newest checkpoint it finds.

The wide hidden layer makes a checkpoint ~7 MB (weights plus Adam's two moments), so writing one takes measurable
time, while a step stays a few milliseconds.

``--bug NAME`` switches on one realistic resume mistake (all off by default):
  stale-by-name       the "newest" checkpoint is the last file name in sorted order: ckpt_50.pt sorts after
                      ckpt_150.pt, so the job resumes from an old checkpoint
  no-optimizer-state  the optimizer state is not restored (Adam's moments restart from zero)
  off-by-one          resumes at the saved step instead of the one after it: that step is trained twice
  no-rng-state        the dropout RNG is not restored, so masks after the resume differ from an uninterrupted run
  non-atomic          torch.save straight to the final path, no fsync: a crash mid-write leaves a torn checkpoint
                      that the next start tries to load
  save-before-step    the checkpoint is written between backward() and optimizer.step(), labelled with the new step
                      (it holds the weights of the step before)
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

BUGS = ("stale-by-name", "no-optimizer-state", "off-by-one", "no-rng-state", "non-atomic", "save-before-step",
        "every-rank-saves")
CKPT = re.compile(r"^ckpt_(\d+)\.pt$")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400, help="total optimizer steps")
    p.add_argument("--save-every", type=int, default=50, help="checkpoint every N steps")
    p.add_argument("--keep", type=int, default=3, help="checkpoints kept on disk")
    p.add_argument("--ckpt-dir", default="ckpt", help="checkpoint directory")
    p.add_argument("--batch", type=int, default=32, help="global batch size (split across ranks)")
    p.add_argument("--hidden", type=int, default=1024, help="width of the wide hidden layer")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bug", choices=BUGS, default=None, help="plant one resume bug (default: none)")
    return p.parse_args()


class MLP(nn.Module):
    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(0.1),
                                 nn.Linear(hidden, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_data(seed: int, n: int = 4096, features: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed synthetic regression set: the same on every rank and every restart."""
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def batch_indices(step: int, batch: int, n: int, seed: int) -> torch.Tensor:
    """The global batch of a 1-based step: a fresh permutation per epoch, so a resumed job sees the same data."""
    per_epoch = n // batch
    epoch, i = divmod(step - 1, per_epoch)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    return perm[i * batch:(i + 1) * batch]


def list_checkpoints(ckpt_dir: Path, by_name: bool) -> list[Path]:
    """Complete checkpoints, oldest first (temporary files are ignored)."""
    files = [p for p in ckpt_dir.iterdir() if CKPT.match(p.name)] if ckpt_dir.is_dir() else []
    if by_name:
        return sorted(files)  # the bug: "ckpt_50.pt" > "ckpt_150.pt" as strings
    return sorted(files, key=lambda p: int(CKPT.match(p.name).group(1)))  # type: ignore[union-attr]


def save_checkpoint(path: Path, state: dict[str, Any], atomic: bool, own_tmp: bool = False) -> None:
    if not atomic:
        torch.save(state, path)
        return
    # several processes saving one path each need a temporary file of their own (else they write into each other's)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp" if own_tmp else path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def gather_rng(world: int) -> list[torch.Tensor]:
    """Every rank's CPU RNG state (dropout masks differ per rank), collected on all ranks."""
    mine = torch.get_rng_state()
    states = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(states, mine)
    return states


def checkpoint(model: nn.Module, opt: torch.optim.Optimizer, step: int, args: argparse.Namespace, rank: int,
               world: int, ckpt_dir: Path) -> None:
    rng = gather_rng(world)  # a collective: every rank takes part
    if args.bug == "every-rank-saves":  # the bug: each rank saves its own RNG state to the one file (the last wins)
        rng = [torch.get_rng_state()]
    elif rank != 0:
        return
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "rng": rng}
    save_checkpoint(ckpt_dir / f"ckpt_{step}.pt", state, atomic=args.bug != "non-atomic",
                    own_tmp=args.bug == "every-rank-saves")
    for old in list_checkpoints(ckpt_dir, by_name=False)[:-args.keep]:
        old.unlink(missing_ok=True)


def resume(model: nn.Module, opt: torch.optim.Optimizer, args: argparse.Namespace, rank: int,
           ckpt_dir: Path) -> int:
    """Load the newest checkpoint (rank 0 chooses, every rank loads it); returns the next step to run."""
    chosen = torch.tensor([-1])
    if rank == 0:
        found = list_checkpoints(ckpt_dir, by_name=args.bug == "stale-by-name")
        if found:
            chosen[0] = int(CKPT.match(found[-1].name).group(1))  # type: ignore[union-attr]
    dist.broadcast(chosen, src=0)
    if chosen.item() < 0:
        return 1
    path = ckpt_dir / f"ckpt_{chosen.item()}.pt"
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    if args.bug != "no-optimizer-state":
        opt.load_state_dict(state["optimizer"])
    if args.bug != "no-rng-state":
        rng = state["rng"]
        torch.set_rng_state(rng[rank % len(rng)])
    if rank == 0:
        print(f"resumed from {path.name} (step {state['step']})", flush=True)
    return state["step"] if args.bug == "off-by-one" else state["step"] + 1


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        sys.exit(f"--batch {args.batch} is not divisible by the world size {world}")
    ckpt_dir = Path(args.ckpt_dir)
    if rank == 0:
        ckpt_dir.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(args.seed)  # the same initial weights on every rank
    x, y = make_data(args.seed)
    model = MLP(x.shape[1], args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    torch.manual_seed(args.seed + 1 + rank)  # dropout stream of this rank
    start = resume(model, opt, args, rank, ckpt_dir)
    ddp = DDP(model)

    for step in range(start, args.steps + 1):
        idx = batch_indices(step, args.batch, len(x), args.seed).chunk(world)[rank]
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(ddp(x[idx]), y[idx])
        loss.backward()
        if args.bug == "save-before-step" and step % args.save_every == 0:
            checkpoint(model, opt, step, args, rank, world, ckpt_dir)
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step={step} loss={total.item() / world:.10g}", flush=True)
        if args.bug != "save-before-step" and step % args.save_every == 0:
            checkpoint(model, opt, step, args, rank, world, ckpt_dir)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
