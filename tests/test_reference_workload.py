"""The reference workload's hand-written data parallelism (``workloads/train.py``): its optimizer is torch.optim's
SGD with momentum to the last bit, and a worker's start imports neither ``torch._dynamo`` nor ``torch._inductor``
(the second each costs every worker of every run, which is why DDP and torch.optim are not used there)."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import torch

TRAIN = Path(__file__).resolve().parents[1] / "workloads" / "train.py"


def _train_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference_train", TRAIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _step(model: torch.nn.Module, optimizer, x: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    optimizer.zero_grad()
    model(x).pow(2).sum().backward()
    optimizer.step()


def test_momentum_sgd_is_torch_sgd_bitwise_and_resumes_from_its_state() -> None:
    train = _train_module()
    torch.manual_seed(0)
    ours = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1))
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1))
    theirs.load_state_dict(ours.state_dict())
    sgd = train.MomentumSGD(list(ours.parameters()), lr=0.05, momentum=0.9)
    reference = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    batches = [torch.randn(4, 5) for _ in range(6)]
    for x in batches[:3]:
        _step(ours, sgd, x)
        _step(theirs, reference, x)
    # a resume: a fresh optimizer loads the saved state (through torch.save, as a checkpoint does)
    saved = torch.load(_roundtrip(sgd.state_dict()), weights_only=True)
    resumed = train.MomentumSGD(list(ours.parameters()), lr=0.05, momentum=0.9)
    resumed.load_state_dict(saved)
    for x in batches[3:]:
        _step(ours, resumed, x)
        _step(theirs, reference, x)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)
    theirs_state = reference.state_dict()["state"]
    for index, state in resumed.state_dict()["state"].items():
        assert torch.equal(state["momentum_buffer"], theirs_state[index]["momentum_buffer"])
    # the optimizer state the checkpoint and the final digest hold changes when momentum is not restored
    fresh = train.MomentumSGD(list(ours.parameters()), lr=0.05, momentum=0.9)
    assert fresh.state_dict()["state"] == {}


def _roundtrip(state: dict):  # type: ignore[no-untyped-def]
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return buf


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_distributed_worker_imports_neither_dynamo_nor_inductor(tmp_path: Path) -> None:
    # a one-rank process group: the same code path as under torchrun (init, all-reduces, barrier at a save)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOS_")}
    env.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    done = subprocess.run([sys.executable, "-X", "importtime", str(TRAIN), "--steps", "4", "--checkpoint-every", "2",
                           "--checkpoint-dir", str(tmp_path / "ckpt")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")]
    assert "torch" in imported and "torch.distributed" in imported  # the list is really there
    assert not [m for m in imported if m.startswith(("torch._dynamo", "torch._inductor"))]
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("step_*.pt")) == ["step_00000002.pt", "step_00000004.pt"]
