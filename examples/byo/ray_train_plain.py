"""A plain Ray Train script, written the way Ray's user guide writes one, without torch-chaos in mind.

Run it against a Ray cluster (``RAY_ADDRESS`` set, or ``ray start --head`` on this machine):
    python ray_train_plain.py --epochs 30 --storage-path /tmp/ray-results --workers 2

A ``TorchTrainer`` of ``--workers`` CPU workers (gloo) trains a small MLP with Adam on a synthetic regression task
(``prepare_model`` wraps it in DDP, ``prepare_data_loader`` gives each worker its shard through a
DistributedSampler). After each epoch every worker reports its metrics with ``ray.train.report`` and rank 0 adds a
checkpoint folder (``model.pt``: model, optimizer and the epoch). ``FailureConfig(max_failures=...)`` lets Ray
restart the worker group after a failure; the restarted workers resume from ``ray.train.get_checkpoint()``.
Rank 0 prints ``epoch=N loss=X`` after each epoch's report (N = the epochs done, X = the loss averaged over the epoch's
batches and the workers).

``--bug NAME`` switches on one realistic resume mistake (off by default):
  ignore-checkpoint   the training function never asks ray.train.get_checkpoint(): a restarted worker group trains
                      from scratch, with the checkpoints Ray kept on disk unused
  epoch-not-restored  the weights and optimizer come back from the checkpoint, but the loop starts at epoch 0 again
                      (the epoch was never read back): every restart trains the first epochs a second time
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import ray
import ray.train
import torch
import torch.distributed as dist
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_data_loader, prepare_model
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BUGS = ("ignore-checkpoint", "epoch-not-restored")


def make_data(samples: int, features: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True)) + 0.05 * torch.randn(samples, 1, generator=g)
    return TensorDataset(x, y)


def train_func(config: dict[str, Any]) -> None:
    torch.manual_seed(config["seed"])
    model = nn.Sequential(nn.Linear(config["features"], 128), nn.ReLU(), nn.Linear(128, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    start_epoch = 0
    checkpoint = ray.train.get_checkpoint() if config["bug"] != "ignore-checkpoint" else None
    if checkpoint:
        with checkpoint.as_directory() as ckpt_dir:
            state = torch.load(os.path.join(ckpt_dir, "model.pt"), weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if config["bug"] != "epoch-not-restored":
            start_epoch = state["epoch"] + 1
    model = prepare_model(model)
    loader = DataLoader(make_data(config["samples"], config["features"], config["seed"]),
                        batch_size=config["batch_size"], shuffle=True)
    loader = prepare_data_loader(loader)
    loss_fn = nn.MSELoss()
    rank = ray.train.get_context().get_world_rank()
    for epoch in range(start_epoch, config["epochs"]):
        if ray.train.get_context().get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        total, batches = 0.0, 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        mean = torch.tensor(total / max(batches, 1))
        if dist.is_initialized():
            dist.all_reduce(mean)
            mean /= dist.get_world_size()
        metrics = {"epoch": epoch, "loss": float(mean)}
        if rank == 0:
            with tempfile.TemporaryDirectory() as tmp:
                inner = model.module if hasattr(model, "module") else model
                torch.save({"model": inner.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                           os.path.join(tmp, "model.pt"))
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
            print(f"epoch={epoch + 1} loss={float(mean):.10g}", flush=True)
        else:
            ray.train.report(metrics)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-failures", type=int, default=3)
    p.add_argument("--storage-path", required=True)
    p.add_argument("--name", default="plain-mlp")
    p.add_argument("--bug", choices=BUGS, default=None)
    args = p.parse_args()
    ray.init()
    trainer = TorchTrainer(
        train_func,
        train_loop_config={k: getattr(args, k) for k in ("epochs", "samples", "features", "batch_size", "lr", "seed",
                                                           "bug")},
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False),
        run_config=RunConfig(name=args.name, storage_path=os.path.abspath(args.storage_path),
                             failure_config=FailureConfig(max_failures=args.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=3)),
    )
    result = trainer.fit()
    print(f"done: {result.metrics}", flush=True)


if __name__ == "__main__":
    main()
