"""Reference Ray Train job for torch-chaos: the model and data of ``workloads/train.py``, run by Ray Train.

The driver (this script, run against a Ray cluster: ``RAY_ADDRESS`` set, as ``chaos.launchers.ray_node`` does on
the head node) starts a ``TorchTrainer`` of ``--workers`` CPU workers (gloo), one per Ray worker node by default
(each worker asks for ``--cpus-per-worker`` CPUs and each worker node offers that many), with
``FailureConfig(max_failures=--max-failures)``: Ray, not torchrun or the engine, restarts the worker group after a
failure, from the checkpoint ``ray.train.get_checkpoint()`` hands the new group.

What makes the numbers checkable is the same as in ``workloads/train.py`` (whose functions this job imports): the
model comes from ``--seed``, the batch of global step ``s`` from ``--data-seed`` and ``s`` alone, the loss is
normalised by the global batch, gradients are all-reduced as one flat buffer in parameter order. So a run whose
worker group Ray restarted from a checkpoint ends with the same weights as a fault-free run.

Telemetry through ``chaos.probe``, so the engine's checkers work as for torchrun jobs: every rank reports each step
(global step, loss, samples, sample ids); rank 0 reports the save of each checkpoint and every rank its load. Ray
Train sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` in the worker's ``os.environ`` before the training function
runs (``ray.train.torch.config._set_torch_distributed_env_vars``), which is where the probe reads them;
``CHAOS_NODE`` and the engine's channel come from the node's environment, which the raylet passes to every worker
process it starts (measured: docs/launchers.md, "Ray"). Each worker group is one incarnation (rank 0 names it and
broadcasts the name).

A checkpoint counts as saved when Ray has *committed* it, not when ``ray.train.report`` returns: the report puts the
result on a queue that Ray Train's controller collects at its next poll (``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S``,
2 s), and a group that fails before then is restarted from the previous checkpoint although the newer folder is on
disk (measured). Rank 0 therefore reports ``checkpoint_save_finished`` once the checkpoint's folder is named in the
controller's ``checkpoint_manager_snapshot.json`` (a watcher thread, so training does not wait), and waits for that
only after the last step. The recorded path is ``<experiment dir>/step_<N>-<incarnation>/state.pt``, the file
restores read.

``--bug NAME`` plants one resume mistake, so the checkers can be shown to catch it:
  ignore-checkpoint   a restarted worker group ignores ``ray.train.get_checkpoint()`` and starts from step 0
  older-checkpoint    a restarted worker group resumes from the checkpoint before the one Ray handed it
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
try:
    from chaos import probe
    from chaos.workload_args import RAY_MLP, add_arguments
except ImportError:  # the script also runs where torch-chaos is not installed: telemetry is then off
    sys.path.insert(0, str(HERE.parent))
    from chaos import probe
    from chaos.workload_args import RAY_MLP, add_arguments

STATE_FILE = "state.pt"
SNAPSHOT = "checkpoint_manager_snapshot.json"  # ray.train.v2._internal.constants.CHECKPOINT_MANAGER_SNAPSHOT_FILENAME
COMMIT_POLL_S = 0.05  # how often rank 0 looks for Ray's commit of a checkpoint it reported
FINAL_COMMIT_WAIT_S = 30.0  # after the last step: Ray's controller polls every 2 s by default


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p, RAY_MLP)
    return p.parse_args(argv)


# --------------------------------------------------------------------------- checkpoints

def _checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint folder ``step_<step>-<incarnation>``."""
    head, _, tail = name.partition("_")
    number = tail.split("-")[0]
    return int(number) if head == "step" and number.isdigit() else None


def committed(experiment_dir: Path, dir_name: str) -> bool:
    """Whether Ray Train's controller has registered the checkpoint folder ``dir_name``: its snapshot names it.
    The snapshot is rewritten in place (not atomically), so a torn read is simply not yet a commit."""
    try:
        text = (experiment_dir / SNAPSHOT).read_text()
    except OSError:
        return False
    return f'/{dir_name}"' in text or f'"{dir_name}"' in text


class CommitWatcher:
    """Rank 0's thread that reports each reported checkpoint as saved once Ray has committed it."""

    def __init__(self, experiment_dir: Path) -> None:
        self.experiment_dir = experiment_dir
        self.pending: list[tuple[int, str, str, int]] = []  # (step, folder name, sha256, bytes), oldest first
        self.kept: list[tuple[int, str]] = []  # committed and still in Ray's snapshot (CheckpointConfig.num_to_keep)
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="chaos-commit-watcher", daemon=True)
        self.thread.start()

    def add(self, step: int, dir_name: str, digest: str, size: int) -> None:
        with self.lock:
            self.pending.append((step, dir_name, digest, size))

    def _check(self) -> None:
        with self.lock:
            pending = list(self.pending)
        for item in pending:
            step, dir_name, digest, size = item
            if committed(self.experiment_dir, dir_name):
                probe.checkpoint_save_finished(step, str(self.experiment_dir / dir_name / STATE_FILE), digest,
                                               bytes=size, committed_by="ray-train-controller")
                with self.lock:
                    self.pending.remove(item)
                    self.kept.append((step, dir_name))
        for step, dir_name in list(self.kept):
            if not committed(self.experiment_dir, dir_name) and (self.experiment_dir / SNAPSHOT).exists() and \
                    not (self.experiment_dir / dir_name).exists():  # Ray dropped it (num_to_keep) and deleted it
                probe.checkpoint_deleted(step, str(self.experiment_dir / dir_name / STATE_FILE))
                self.kept.remove((step, dir_name))

    def _run(self) -> None:
        while True:
            self._check()
            time.sleep(COMMIT_POLL_S)

    def drain(self, timeout_s: float) -> bool:
        """Wait until every reported checkpoint is committed (the last one before the job returns)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if not self.pending:
                    return True
            time.sleep(COMMIT_POLL_S)
        return False


def older_sibling(path: Path) -> Path | None:
    """The planted ``older-checkpoint`` bug: the checkpoint folder saved before ``path`` (None if none)."""
    mine = _checkpoint_step(path.name)
    older = sorted((s, p) for p in path.parent.iterdir() if (s := _checkpoint_step(p.name)) is not None
                   and mine is not None and s < mine and (p / STATE_FILE).exists())
    return older[-1][1] if older else None


# --------------------------------------------------------------------------- the training function (per worker)

def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: the loop of ``workloads/train.py`` with Ray's process group and checkpoints."""
    import ray.train
    import torch
    import torch.distributed as dist
    from torch import nn

    sys.path.insert(0, config["workloads_dir"])
    import train as ref  # workloads/train.py: data, model, optimizer, all-reduce (same numbers as torchrun runs)

    args = argparse.Namespace(**config["args"])
    ctx = ray.train.get_context()
    rank, world_size = ctx.get_world_rank(), ctx.get_world_size()
    probe.process_started(distributed=True, launcher="ray", ray_node_id=ray.get_runtime_context().get_node_id())
    torch._C._set_deterministic_algorithms(True)
    experiment_dir = Path(ctx.get_storage().experiment_fs_path)

    x, y = ref.make_dataset(args)
    model = ref.make_model(args)
    parameters = list(model.parameters())
    optimizer = ref.MomentumSGD(parameters, lr=args.lr, momentum=0.9)

    handed = ray.train.get_checkpoint()
    incarnation = [uuid.uuid4().hex[:12] if rank == 0 else None]
    dist.broadcast_object_list(incarnation, src=0)
    probe.set_context(incarnation=incarnation[0])
    start_step = 0
    if handed is not None and args.bug != "ignore-checkpoint":
        folder = Path(handed.path)
        if args.bug == "older-checkpoint":
            folder = older_sibling(folder) or folder
        path = folder / STATE_FILE
        step = _checkpoint_step(folder.name) or 0
        probe.checkpoint_load_started(step, str(path), handed_by_ray=handed.path)
        data = path.read_bytes()
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step = int(state["step"])
        probe.checkpoint_loaded(start_step, str(path), hashlib.sha256(data).hexdigest())
    ref.broadcast_parameters(parameters)

    watcher = CommitWatcher(experiment_dir) if rank == 0 else None
    loss_fn = nn.MSELoss(reduction="sum")
    for step in range(start_step + 1, args.steps + 1):
        t0 = time.perf_counter()
        ids = ref.shard(ref.global_batch_indices(args, step), rank, world_size)
        optimizer.zero_grad()
        out = model(x[ids])
        local_loss = loss_fn(out, y[ids]) / args.global_batch
        (local_loss * world_size).backward()
        comm_s = ref.allreduce_gradients(parameters)
        optimizer.step()
        loss = local_loss.detach().clone()
        t_loss = time.perf_counter()
        dist.all_reduce(loss)
        comm_s += time.perf_counter() - t_loss
        if args.step_time_ms > 0:
            time.sleep(args.step_time_ms / 1000.0)
        probe.step_completed(step, loss=float(loss), samples=len(ids), duration_s=time.perf_counter() - t0,
                             comm_s=comm_s, sample_ids=ids.tolist(),
                             epoch=(step - 1) * args.global_batch // args.dataset_size,
                             dataset_size=args.dataset_size)
        if step % args.checkpoint_every == 0 or step == args.steps:
            # one folder name per worker group: a group that re-does a step (it resumed from an older checkpoint,
            # or from none) must not report into a folder Ray already registered, or deleted (num_to_keep):
            # measured, Ray's controller then fails the run on "Path not found" instead of training on.
            dir_name = f"step_{step:08d}-{incarnation[0]}"
            metrics = {"step": step, "loss": float(loss)}
            if rank == 0:
                # staged in the run directory (the driver's working directory), not /tmp: a worker killed while
                # it saves leaves its half-written folder where the run's teardown finds it, outside the checkpoints
                with tempfile.TemporaryDirectory(prefix=".ray-mlp-staging-", dir=config["staging_dir"]) as tmp:
                    buf = io.BytesIO()
                    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
                               buf)
                    data = buf.getvalue()
                    (Path(tmp) / STATE_FILE).write_bytes(data)
                    probe.checkpoint_save_started(step, str(experiment_dir / dir_name / STATE_FILE))
                    ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp),
                                     checkpoint_dir_name=dir_name)
                assert watcher is not None
                watcher.add(step, dir_name, hashlib.sha256(data).hexdigest(), len(data))
            else:
                ray.train.report(metrics, checkpoint=None, checkpoint_dir_name=dir_name)
    if watcher is not None:
        if not watcher.drain(FINAL_COMMIT_WAIT_S):
            print(f"ray_train: Ray did not commit the last checkpoint within {FINAL_COMMIT_WAIT_S:.0f} s",
                  file=sys.stderr, flush=True)
        probe.run_finished(args.steps, state_sha256=ref.state_digest(model, optimizer))


# --------------------------------------------------------------------------- the driver

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dataset_size % args.global_batch:
        raise SystemExit("--dataset-size must be a multiple of --global-batch (epochs are whole steps)")
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    storage = Path(args.checkpoint_dir).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=True)
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"args": vars(args), "workloads_dir": str(HERE), "staging_dir": str(Path.cwd())},
        torch_config=TorchConfig(backend="gloo", timeout_s=max(1, int(args.pg_timeout_s))),
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False,
                                     resources_per_worker={"CPU": args.cpus_per_worker}),
        run_config=RunConfig(name=args.name, storage_path=str(storage),
                             failure_config=FailureConfig(max_failures=args.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=args.keep)),
    )
    try:
        result = trainer.fit()
    except Exception as exc:  # Ray's TrainingFailedError after max_failures: the job failed, say why in one line
        print(f"ray_train: training failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"ray_train: finished, last checkpoint {result.checkpoint.path if result.checkpoint else None}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
