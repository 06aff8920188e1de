"""Epoch-based DDP training with a snapshot, in the style of the PyTorch DDP tutorial ("multinode_torchrun.py").

Run it with:  torchrun --nnodes 1 --nproc-per-node 2 epoch_snapshot_ddp.py 40 5 --snapshot_path snapshot.pt

A ``Trainer`` runs epochs over a DistributedSampler; every ``save_every`` epochs global rank 0 writes one snapshot
(model state and the number of epochs run) with a plain ``torch.save`` to one path, and ``_load_snapshot`` resumes
from it at start. The only output is one ``[GPU{rank}] Epoch {e} | Batchsize: {b} | Steps: {n}`` line per rank and
epoch (no loss is printed), and a line when a snapshot is saved.

Differences from the tutorial, so that the correct variant is correct: only global rank 0 saves (the tutorial's
``local_rank == 0`` makes every node write the same file), and the snapshot records ``epoch + 1`` epochs run (the
tutorial records ``epoch``, so a resumed job trains the saved epoch again; ``--bug epoch-off-by-one`` restores that).
The hidden layer is wide (a ~4 MB snapshot) so that writing it takes measurable time.

``--bug NAME`` (off by default):
  epoch-off-by-one       EPOCHS_RUN = epoch (as in the tutorial): the saved epoch is trained again after a resume
  save-before-last-step  the snapshot is taken before the epoch's last optimizer step but says the epoch is done:
                         a resumed job never trains that batch
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

BUGS = ("epoch-off-by-one", "save-before-last-step")


class MyTrainDataset(Dataset):
    def __init__(self, size: int) -> None:
        g = torch.Generator().manual_seed(1234)
        self.size = size
        self.data = [(torch.rand(20, generator=g), torch.rand(1, generator=g)) for _ in range(size)]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[index]


def ddp_setup() -> None:
    dist.init_process_group(backend="gloo", timeout=timedelta(seconds=30))


class Trainer:
    def __init__(self, model: torch.nn.Module, train_data: DataLoader, optimizer: torch.optim.Optimizer,
                 save_every: int, snapshot_path: str, bug: str | None) -> None:
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        self.bug = bug
        if os.path.exists(snapshot_path):
            print("Loading snapshot")
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model)

    def _load_snapshot(self, snapshot_path: str) -> None:
        snapshot = torch.load(snapshot_path, map_location="cpu", weights_only=True)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch: int) -> None:
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[GPU{self.global_rank}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}")
        self.train_data.sampler.set_epoch(epoch)
        last = len(self.train_data) - 1
        for i, (source, targets) in enumerate(self.train_data):
            if self.bug == "save-before-last-step" and i == last and self._saves_after(epoch):
                self._save_snapshot(epoch)
            self._run_batch(source, targets)

    def _saves_after(self, epoch: int) -> bool:
        return self.global_rank == 0 and (epoch + 1) % self.save_every == 0

    def _save_snapshot(self, epoch: int) -> None:
        snapshot = {
            "MODEL_STATE": self.model.module.state_dict(),
            "EPOCHS_RUN": epoch if self.bug == "epoch-off-by-one" else epoch + 1,
        }
        torch.save(snapshot, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs: int) -> None:
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.bug != "save-before-last-step" and self._saves_after(epoch):
                self._save_snapshot(epoch)


def load_train_objs(hidden: int) -> tuple[Dataset, torch.nn.Module, torch.optim.Optimizer]:
    train_set = MyTrainDataset(512)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, pin_memory=False, shuffle=False,
                      sampler=DistributedSampler(dataset))


def main(total_epochs: int, save_every: int, batch_size: int, snapshot_path: str, hidden: int,
         bug: str | None) -> None:
    ddp_setup()
    os.makedirs(os.path.dirname(snapshot_path) or ".", exist_ok=True)
    dataset, model, optimizer = load_train_objs(hidden)
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path, bug)
    trainer.train(total_epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    import sys

    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument("--batch_size", default=32, type=int, help="Input batch size on each device (default: 32)")
    parser.add_argument("--snapshot_path", default="snapshot.pt", help="Where the snapshot is written")
    parser.add_argument("--hidden", default=50000, type=int, help="Width of the hidden layer")
    parser.add_argument("--bug", choices=BUGS, default=None, help="plant one resume bug (default: none)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]  # progress lines as they happen
    main(args.total_epochs, args.save_every, args.batch_size, args.snapshot_path, args.hidden, args.bug)
