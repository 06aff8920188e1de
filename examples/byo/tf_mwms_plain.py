"""A plain TensorFlow multi-worker script, written the way TF's tutorial writes one, without torch-chaos in mind.

Run one copy per worker with ``TF_CONFIG`` set (the tutorial's "Multi-worker training with Keras"), e.g. two
workers on this machine:
    TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker",
    "index": 0}}' TF_USE_LEGACY_KERAS=1 python tf_mwms_plain.py --epochs 10 --ckpt-dir ckpt
and the same with ``"index": 1`` in a second shell.

``MultiWorkerMirroredStrategy`` trains a small Keras MLP (tf-keras: Keras 3 fails under MWMS with TF 2.21) on a
synthetic regression task; ``BackupAndRestore`` backs the model and the optimizer up under ``<ckpt-dir>/backup`` at
each epoch's end, and a relaunched group resumes at the interrupted epoch from it. The chief prints
``step=N loss=X`` after every batch (N the global step, ``epoch * steps_per_epoch + batch + 1``, so a resumed run
prints the same N for the same work; X the epoch's running loss, printed whole). Nothing here relaunches a worker:
MWMS needs a supervisor for that (a TFJob's restart policy, a shell loop, torch-chaos's ``node_restart``).

``--bug NAME`` switches on one realistic resume mistake (off by default):
  timestamped-backup  the backup goes to a directory named after the launch time (``backup-<HHMMSS>``, as many
                      users name their output folders), so a relaunched worker looks in a new, empty directory,
                      never finds the backup of the interrupted run, and trains from epoch 0 again
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

BUGS = ("timestamped-backup",)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--batch", type=int, default=64, help="global batch size (split across the workers)")
    p.add_argument("--ckpt-dir", default="ckpt")
    p.add_argument("--step-time-ms", type=float, default=0.0, help="sleep after each batch (to pace the job)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--bug", choices=BUGS, default=None, help="plant one resume bug (default: none)")
    return p.parse_args()


def make_data(samples: int, seed: int) -> tf.data.Dataset:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, 20)).astype("float32")
    y = np.sin(x.sum(axis=1, keepdims=True)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y))


class PrintProgress(tf.keras.callbacks.Callback):
    """The chief prints every global step with its running loss."""

    def __init__(self, steps_per_epoch: int, is_chief: bool, step_time_ms: float):
        super().__init__()
        self.spe, self.is_chief, self.pause = steps_per_epoch, is_chief, step_time_ms / 1000.0
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.pause:
            time.sleep(self.pause)
        if self.is_chief:
            print(f"step={self.epoch * self.spe + batch + 1} loss={float(logs['loss'])!r}", flush=True)


def main() -> None:
    args = parse_args()
    tf.keras.utils.set_random_seed(args.seed)
    tf.config.experimental.enable_op_determinism()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    is_chief = (strategy.cluster_resolver.task_id or 0) == 0

    data = make_data(args.steps_per_epoch * args.batch, args.seed).batch(args.batch).repeat()
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Input((20,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(1),
        ])
        model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="mse")

    backup_dir = os.path.join(args.ckpt_dir, "backup")
    if args.bug == "timestamped-backup":
        backup_dir = os.path.join(args.ckpt_dir, time.strftime("backup-%H%M%S"))  # the bug: a new folder per launch
    callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir),
                 PrintProgress(args.steps_per_epoch, is_chief, args.step_time_ms)]
    model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=0, callbacks=callbacks)
    if is_chief:
        print(f"done: {args.epochs} epochs", flush=True)


if __name__ == "__main__":
    main()
