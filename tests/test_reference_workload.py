"""The reference workload's hand-written data parallelism (``workloads/train.py``): its optimizer is torch.optim's
SGD with momentum to the last bit and exchanges checkpoints with it both ways, a resume ends where an uninterrupted
run ends (and the planted no-optimizer-state bug does not), the determinism flag is on, and a distributed worker's
start imports neither ``torch._dynamo`` nor ``torch._inductor`` (the second each costs every worker of every run,
which is why DDP and torch.optim are not used there).

torch is imported inside the tests, not at collection: the fast tier's workers otherwise never import it.
"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from chaos.plan import free_port
from tests.tiers import FULL

# One worker imports torch for all of them (~2 s of CPU each time a worker does): one xdist group.
pytestmark = pytest.mark.xdist_group("torch")

TRAIN = Path(__file__).resolve().parents[1] / "workloads" / "train.py"


def _train_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference_train", TRAIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _step(model: Any, optimizer: Any, x: Any) -> None:
    optimizer.zero_grad()
    model(x).pow(2).sum().backward()
    optimizer.step()


def _through_torch_save(state: dict) -> dict:
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)  # as a checkpoint is loaded


def _models(n: int) -> list[Any]:
    import torch

    torch.manual_seed(0)
    first = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1))
    models = [first]
    for _ in range(n - 1):
        other = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1))
        other.load_state_dict(first.state_dict())
        models.append(other)
    return models


def test_momentum_sgd_is_torch_sgd_bitwise_and_checkpoints_cross_both_ways() -> None:
    import torch

    train = _train_module()
    ours, theirs = _models(2)
    batches = [torch.randn(4, 5) for _ in range(9)]

    def sgd(model: Any) -> Any:
        return train.MomentumSGD(list(model.parameters()), lr=0.05, momentum=0.9)

    def torch_sgd(model: Any) -> Any:
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def same() -> None:
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(a, b)

    mine, reference = sgd(ours), torch_sgd(theirs)
    for x in batches[:3]:
        _step(ours, mine, x)
        _step(theirs, reference, x)
    same()
    # our checkpoint resumed by torch.optim.SGD, torch.optim.SGD's by ours: both go on in step
    mine_resumed, reference_resumed = sgd(ours), torch_sgd(theirs)
    reference_resumed.load_state_dict(_through_torch_save(mine.state_dict()))
    mine_resumed.load_state_dict(_through_torch_save(reference.state_dict()))
    for x in batches[3:6]:
        _step(ours, mine_resumed, x)
        _step(theirs, reference_resumed, x)
    same()
    assert mine_resumed.state_dict()["param_groups"] == reference_resumed.state_dict()["param_groups"]
    theirs_state = reference_resumed.state_dict()["state"]
    for index, state in mine_resumed.state_dict()["state"].items():
        assert torch.equal(state["momentum_buffer"], theirs_state[index]["momentum_buffer"])
    # an optimizer state that does not fit the model is refused, not half loaded
    wrong = mine_resumed.state_dict()
    wrong["param_groups"][0]["params"] = [0]
    try:
        sgd(ours).load_state_dict(wrong)
    except ValueError as e:
        assert "parameters" in str(e)
    else:
        raise AssertionError("a state for another model was loaded")


def _run_centralized(ckpt: Path, steps: int, *extra: str) -> str:
    """Run train.py in a process of its own (no torchrun: centralized) and return what it printed last: the
    determinism flag as the job left it."""
    code = ("import importlib.util, sys, torch\n"
            f"spec = importlib.util.spec_from_file_location('t', {str(TRAIN)!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "m.main(sys.argv[1:]); print(torch.are_deterministic_algorithms_enabled())\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOS_") and k not in ("WORLD_SIZE", "MASTER_ADDR")}
    done = subprocess.run([sys.executable, "-c", code, "--steps", str(steps), "--checkpoint-every", "2",
                           "--checkpoint-dir", str(ckpt), *extra],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def _final_state(ckpt: Path, steps: int) -> dict:
    import torch

    return torch.load(ckpt / f"step_{steps:08d}.pt", weights_only=True)


def _equal(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return torch.equal(a, b) if torch.is_tensor(a) else a == b


# Five processes that each import torch (~13 s of CPU, a fifth of the fast tier's on 2 cores): --full. What it
# proves is in the gate's real runs too: centralized-crash resumes this workload bitwise equal to its golden run.
@FULL
def test_a_resume_ends_where_an_uninterrupted_run_ends_and_the_planted_bug_does_not(tmp_path: Path) -> None:
    # Three independent jobs at once, then the two resumes at once (each process is mostly torch's import).
    with ThreadPoolExecutor(3) as pool:
        whole = pool.submit(_run_centralized, tmp_path / "whole", 8)
        for _ in pool.map(lambda d: _run_centralized(tmp_path / d, 4), ("resumed", "bug")):
            pass
        resumes = [pool.submit(_run_centralized, tmp_path / "resumed", 8),  # loads step 4, trains 5-8
                   pool.submit(_run_centralized, tmp_path / "bug", 8, "--bug", "no-optimizer-state")]
        assert whole.result() == "True"  # torch.use_deterministic_algorithms' flag is on
        for done in resumes:
            done.result()
    whole = _final_state(tmp_path / "whole", 8)
    assert _equal(_final_state(tmp_path / "resumed", 8), whole)
    assert not _equal(_final_state(tmp_path / "bug", 8)["optimizer"], whole["optimizer"])


def test_a_distributed_worker_imports_neither_dynamo_nor_inductor(tmp_path: Path) -> None:
    # a one-rank process group: the same code path as under torchrun (init, all-reduces, barrier at a save)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOS_")}
    env.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    done = subprocess.run([sys.executable, "-X", "importtime", str(TRAIN), "--steps", "4", "--checkpoint-every", "2",
                           "--checkpoint-dir", str(tmp_path / "ckpt")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")]
    assert "torch" in imported and "torch.distributed" in imported  # the list is really there
    assert not [m for m in imported if m.startswith(("torch._dynamo", "torch._inductor"))]
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("step_*.pt")) == ["step_00000002.pt", "step_00000004.pt"]
