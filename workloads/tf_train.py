"""Reference TensorFlow job for torch-chaos: a small Keras model under MultiWorkerMirroredStrategy.

One process per node (``launcher: tf-multiworker`` writes each node's ``TF_CONFIG``), ``tf-keras`` with
``TF_USE_LEGACY_KERAS=1`` (Keras 3 fails under MultiWorkerMirroredStrategy with TF 2.21: keras-team/keras#20585).
MWMS is not elastic: when a worker is lost, the others fail in their next collective (``UnavailableError``) and exit
1; the engine's ``cluster.node_restart`` relaunches every failed node, and the new group resumes from the
``BackupAndRestore`` backup at the start of the interrupted epoch.

What makes the numbers checkable: the model comes from ``--seed``, the data from ``--data-seed`` (the data set is
exactly one epoch, not shuffled, so the batch of global step ``s`` depends on ``s`` alone), op determinism is on.

Telemetry through ``chaos.probe`` from Keras callbacks: every worker reports each global step (``epoch *
steps_per_epoch + batch + 1``) with the running loss Keras logs and the sample ids it trained on (its slice of the
global batch, for the exactly-once check); the chief reports each backup's save (the
``ckpt-N`` files BackupAndRestore's CheckpointManager writes under ``<backup_dir>/chief``, which keeps one) and its
deletion, and every worker its load of the backup at start. The recorded digest is the sha256 of the checkpoint's
``.index`` and ``.data-*`` files, read at save time and again before the restore.

``--bug NAME`` plants one resume mistake, so the checkers can be shown to catch it:
  ignore-backup     a relaunched worker does not restore the backup: it starts from epoch 0 with fresh weights
  non-atomic-save   no BackupAndRestore: the chief saves the weights in place each epoch
                    (``model.save_weights(<dir>/weights.h5)``, then the epoch in ``<dir>/epoch.json``), and a
                    relaunched worker loads whatever that one fixed file holds: a crash mid-save leaves it torn
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before tensorflow is imported: tf.keras is tf-keras
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = Path(__file__).resolve().parent
try:
    from chaos import probe
    from chaos.workload_args import TF_MLP, add_arguments
except ImportError:  # the script also runs where torch-chaos is not installed: telemetry is then off
    sys.path.insert(0, str(HERE.parent))
    from chaos import probe
    from chaos.workload_args import TF_MLP, add_arguments

SAVED_EPOCH_KEY = "ckpt_saved_epoch"  # the variable BackupAndRestore's checkpoint tracks (WorkerTrainingState)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p, TF_MLP)
    return p.parse_args(argv)


# --------------------------------------------------------------------------- the backup's files

def latest_backup(chief_dir: Path) -> str | None:
    """The prefix (``.../chief/ckpt-N``) of the newest backup, from the CheckpointManager's ``checkpoint`` file."""
    try:
        text = (chief_dir / "checkpoint").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("model_checkpoint_path:"):
            name = line.split(":", 1)[1].strip().strip('"')
            return str(chief_dir / name) if not os.path.isabs(name) else name
    return None


def backup_digest(prefix: str) -> tuple[str, int] | None:
    """sha256 and size of a backup's files (``prefix.index`` then ``prefix.data-*``, by name); None if absent."""
    base = Path(prefix)
    files = sorted(p for p in base.parent.glob(base.name + ".*") if p.name.startswith(base.name + "."))
    if not any(p.name.endswith(".index") for p in files):
        return None
    h, size = hashlib.sha256(), 0
    for p in files:
        data = p.read_bytes()
        h.update(data)
        size += len(data)
    return h.hexdigest(), size


def saved_epoch(prefix: str) -> int | None:
    """The last completed epoch (0-based) BackupAndRestore recorded in the backup, read from the checkpoint."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
        for name, _ in tf.train.list_variables(prefix):
            if name.startswith(SAVED_EPOCH_KEY):
                return int(reader.get_tensor(name))
    except Exception:  # a torn or missing backup: TF's restore will say so itself
        return None
    return None


# --------------------------------------------------------------------------- the job

def worker_sample_ids(batch: int, global_batch: int, workers: int, task: int) -> list[int]:
    """The data set indices worker ``task`` trains on in batch ``batch`` of an epoch: DATA auto-sharding after the
    strategy's rebatch gives worker ``i`` the ``i``-th slice of every global batch (measured with TF 2.21: two
    workers over ``range(16).batch(4)`` got [0, 1], [4, 5] ... and [2, 3], [6, 7] ...). The data set is exactly one
    epoch and not shuffled, so batch ``b`` of every epoch holds the same samples."""
    per_worker = global_batch // workers
    first = batch * global_batch + task * per_worker
    return list(range(first, first + per_worker))


def make_data(args: argparse.Namespace) -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(args.data_seed)
    n = args.steps_per_epoch * args.global_batch
    x = rng.standard_normal((n, args.features)).astype("float32")
    w = rng.standard_normal((args.features, 1)).astype("float32")
    y = (np.tanh(x @ w) + 0.1 * rng.standard_normal((n, 1))).astype("float32")
    return x, y


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    task = int(os.environ.get("RANK", "0"))
    # before TensorFlow's import (seconds) and the strategy's cluster connect: the recovery breakdown then counts
    # both as the worker's init, not as the relaunch
    probe.set_context(incarnation=f"{os.environ.get('CHAOS_NODE', 'local')}-{os.getpid()}-{time.time_ns()}")
    probe.process_started(distributed=True, launcher="tf-multiworker", task_index=task,
                          workers=int(os.environ.get("WORLD_SIZE", "1")))
    import tensorflow as tf

    tf.keras.utils.set_random_seed(args.seed)
    tf.config.experimental.enable_op_determinism()
    options = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=args.pg_timeout_s if args.pg_timeout_s > 0 else None)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    task_id = strategy.cluster_resolver.task_id or 0  # TF_CONFIG's index (None when run alone)
    is_chief = task_id == 0
    # One incarnation per group, not per process: the checks follow the final model back through the group that
    # trained it, and a group's steps are every worker's (its sample ids split across them).
    probe.set_context(incarnation=_group_incarnation(tf, strategy, is_chief))

    x, y = make_data(args)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.global_batch).repeat()
    data = data.with_options(_autoshard_data(tf))
    with strategy.scope():
        init = tf.keras.initializers.GlorotUniform(seed=args.seed)
        model = tf.keras.Sequential([
            tf.keras.layers.Input((args.features,)),
            tf.keras.layers.Dense(args.hidden, activation="tanh", kernel_initializer=init),
            tf.keras.layers.Dense(1, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=args.seed + 1)),
        ])
        model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9), loss="mse")

    workers = strategy.num_replicas_in_sync  # one replica per worker on a CPU worker
    if args.global_batch % workers:
        print(f"tf_train: --global-batch {args.global_batch} is not a multiple of the {workers} workers",
              file=sys.stderr, flush=True)
        return 2

    def ids_of(batch: int) -> list[int]:
        return worker_sample_ids(batch, args.global_batch, workers, task_id)

    backup_dir = Path(args.checkpoint_dir).resolve() / "backup"
    chief_dir = backup_dir / "chief"
    spe = args.steps_per_epoch
    state: dict[str, Any] = {"pending": None, "kept": None, "epoch0": None}

    class Before(tf.keras.callbacks.Callback):
        """Runs before BackupAndRestore's own hooks: the backup as it is before a restore or a save."""

        def on_train_begin(self, logs: Any = None) -> None:
            prefix = latest_backup(chief_dir)
            if prefix is None or args.bug == "ignore-backup":
                return
            epoch = saved_epoch(prefix)
            step = (epoch + 1) * spe if epoch is not None and epoch >= 0 else 0
            probe.checkpoint_load_started(step, prefix)
            digest = backup_digest(prefix)
            state["load"] = (step, prefix, digest[0] if digest else None)
            if is_chief:
                state["kept"] = (step, prefix)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            if state["epoch0"] is None:
                state["epoch0"] = epoch

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if not is_chief:
                return
            current = latest_backup(chief_dir)
            number = int(current.rsplit("-", 1)[1]) + 1 if current else 1
            prefix = str(chief_dir / f"ckpt-{number}")
            state["pending"] = ((epoch + 1) * spe, prefix)
            probe.checkpoint_save_started((epoch + 1) * spe, prefix)

    class After(tf.keras.callbacks.Callback):
        """Runs after BackupAndRestore's hooks: what it restored, saved and deleted; every step's progress."""

        def on_train_begin(self, logs: Any = None) -> None:
            load = state.pop("load", None)
            if load is not None:
                step, prefix, digest = load
                probe.checkpoint_loaded(step, prefix, digest or "")

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            t0 = state.get("t_batch")
            if args.step_time_ms > 0:
                time.sleep(args.step_time_ms / 1000.0)
            epoch = state["epoch"]
            loss = float(logs["loss"]) if logs and "loss" in logs else None
            now = time.perf_counter()
            probe.step_completed(epoch * spe + batch + 1, loss=loss, samples=len(ids_of(batch)),
                                 duration_s=(now - t0) if t0 is not None else None, epoch=epoch,
                                 sample_ids=ids_of(batch), dataset_size=spe * args.global_batch)
            state["t_batch"] = time.perf_counter()

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            state["epoch"] = epoch
            state["t_batch"] = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            pending, state["pending"] = state["pending"], None
            if pending is None:
                return
            step, predicted = pending
            prefix = latest_backup(chief_dir) or predicted
            digest = backup_digest(prefix)
            if digest is None:
                print(f"tf_train: no backup files at {prefix} after epoch {epoch}", file=sys.stderr, flush=True)
                return
            if prefix != predicted:  # never seen: CheckpointManager names them ckpt-<save counter>
                probe.checkpoint_save_started(step, prefix)
            probe.checkpoint_save_finished(step, prefix, digest[0], bytes=digest[1])
            kept = state["kept"]
            if kept is not None and kept[1] != prefix and backup_digest(kept[1]) is None:
                probe.checkpoint_deleted(kept[0], kept[1])  # CheckpointManager(max_to_keep=1) removed it
            state["kept"] = (step, prefix)

        def on_train_end(self, logs: Any = None) -> None:
            kept = state["kept"]
            if is_chief and kept is not None and backup_digest(kept[1]) is None:
                probe.checkpoint_deleted(kept[0], kept[1])  # BackupAndRestore deletes its backup after training

    initial_epoch = 0
    backup: tf.keras.callbacks.Callback
    if args.bug == "non-atomic-save":
        initial_epoch = _load_in_place(model, Path(args.checkpoint_dir).resolve(), spe)
        callbacks: list[Any] = [_in_place_save(tf, Path(args.checkpoint_dir).resolve(), spe, is_chief), After()]
    elif args.bug == "ignore-backup":
        backup = _ignoring_backup_class()(str(backup_dir))
    else:
        backup = tf.keras.callbacks.BackupAndRestore(str(backup_dir))
    if args.bug != "non-atomic-save":
        callbacks = [Before(), backup, After()]
    try:
        model.fit(data, epochs=args.epochs, steps_per_epoch=spe, verbose=0, callbacks=callbacks,
                  initial_epoch=initial_epoch)
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.CancelledError,
            tf.errors.InternalError, tf.errors.AbortedError) as exc:
        # a lost peer: MWMS cannot go on without it (not elastic); the orchestrator relaunches the group
        print(f"tf_train: worker {task} lost its group: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
              file=sys.stderr, flush=True)
        return 1
    # Every worker reads the weights, then all meet in one last collective before any exits: a worker that left
    # early made the chief's coordination service report it unhealthy and kept the chief ~28 s in its teardown
    # (measured on the local runtime).
    weights = b"".join(w.tobytes() for w in model.get_weights())
    _final_barrier(tf, strategy)
    if is_chief:
        probe.run_finished(args.epochs * spe, state_sha256=hashlib.sha256(weights).hexdigest(),
                           first_epoch=state["epoch0"])
    print(f"tf_train: worker {task} finished {args.epochs} epochs", flush=True)
    return 0


def _final_barrier(tf: Any, strategy: Any) -> None:
    """One all-reduce across every worker: no worker returns before all reached it."""

    @tf.function
    def meet() -> Any:
        return strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)

    meet()


def _group_incarnation(tf: Any, strategy: Any, is_chief: bool) -> str:
    """A name every worker of this group agrees on: the chief's random number, summed with the others' zeros in
    one all-reduce (a float64 holds integers below 2**53 exactly)."""
    mine = float(int.from_bytes(os.urandom(6), "big")) if is_chief else 0.0

    @tf.function
    def agree() -> Any:
        return strategy.reduce("SUM", strategy.run(lambda: tf.constant(mine, dtype=tf.float64)), axis=None)

    return f"tf-group-{int(agree().numpy()):012x}"


def _autoshard_data(tf: Any) -> Any:
    """Split every global batch across the workers (DATA): each worker gets its part of the same batches."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return options




IN_PLACE_WEIGHTS = "weights.h5"  # the non-atomic-save bug's one fixed file
IN_PLACE_EPOCH = "epoch.json"


def _load_in_place(model: Any, directory: Path, spe: int) -> int:
    """The planted ``non-atomic-save`` bug's resume: the epoch after the one ``epoch.json`` names, with the weights
    of the one fixed file, whatever it holds (0, untouched weights, when nothing was saved). A torn file makes
    ``load_weights`` raise, and the worker dies: every relaunch dies the same way."""
    import json

    path = directory / IN_PLACE_WEIGHTS
    try:
        epoch = int(json.loads((directory / IN_PLACE_EPOCH).read_text())["epoch"])
    except (OSError, ValueError, KeyError):
        return 0
    step = (epoch + 1) * spe
    probe.checkpoint_load_started(step, str(path))
    data = path.read_bytes()
    model.load_weights(str(path))  # the planted bug: no check that the file is whole
    probe.checkpoint_loaded(step, str(path), hashlib.sha256(data).hexdigest())
    return epoch + 1


def _in_place_save(tf: Any, directory: Path, spe: int, is_chief: bool) -> Any:
    """The ``non-atomic-save`` bug's save: the chief overwrites ``weights.h5`` in place at each epoch's end (h5py
    truncates it and writes it again), then records the epoch; a crash in between leaves a torn file under the
    name the resume trusts."""
    import json

    class InPlaceSave(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if not is_chief:
                return
            path = directory / IN_PLACE_WEIGHTS
            step = (epoch + 1) * spe
            probe.checkpoint_save_started(step, str(path))
            self.model.save_weights(str(path))  # the planted bug: straight to the final name
            (directory / IN_PLACE_EPOCH).write_text(json.dumps({"epoch": epoch}))
            data = path.read_bytes()
            probe.checkpoint_save_finished(step, str(path), hashlib.sha256(data).hexdigest(), bytes=len(data))

    return InPlaceSave()


def _ignoring_backup_class() -> type:
    """The planted ``ignore-backup`` bug: BackupAndRestore that backs up but never restores."""
    import tensorflow as tf
    from tf_keras.src.distribute import worker_training_state

    class IgnoringBackup(tf.keras.callbacks.BackupAndRestore):  # type: ignore[misc]
        def on_train_begin(self, logs: Any = None) -> None:
            self.model._training_state = worker_training_state.WorkerTrainingState(
                self.model, self.backup_dir, self.save_freq, self.save_before_preemption)
            self._training_state = self.model._training_state
            # planted bug: self._training_state.restore() is never called, so a relaunch starts at epoch 0

    return IgnoringBackup


if __name__ == "__main__":
    sys.exit(main())
