"""The shipped workloads' command-line arguments, declared once (standard library only).

``workloads/train.py`` builds its argparse parser from :data:`DDP_MLP`, and the scenario model checks
``workload.args`` against the same declaration (``chaos.scenario.ShippedWorkload``), so ``steps: not-a-number``
is refused by ``chaos validate`` with its file and line instead of failing inside torchrun at run time, and
``chaos schema`` lists every argument with its type. Imported inside training processes: no third-party imports.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from chaos.events import Ev  # standard library only, like this module

_JSON_TYPE = {int: "integer", float: "number", str: "string"}


@dataclass(frozen=True)
class Arg:
    """One ``--name`` argument: its type, default, help, and the values it accepts."""

    type: type
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] | None = None
    min: float | None = None  # smallest accepted value (numbers)
    required: bool = False  # for the command line; the plan always supplies required ones (checkpoint_dir)
    set_by_plan: bool = False  # torch-chaos passes it; a scenario may override it (checked like any path)

    def json_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": _JSON_TYPE[self.type], "description": self.help}
        if self.choices:
            schema["enum"] = list(self.choices)
        if self.min is not None:
            schema["minimum"] = self.min
        if self.default is not None:
            schema["default"] = self.default
        return schema


BUGS = ("non-atomic-save", "no-optimizer-state", "off-by-one-resume", "stale-checkpoint", "no-digest-check",
        "reshuffle-on-resume", "no-fsync")

DDP_MLP: dict[str, Arg] = {
    "steps": Arg(int, 400, "global steps to train", min=1),
    "global_batch": Arg(int, 48, "samples per global step, sharded by rank", min=1),
    "dataset_size": Arg(int, 4800, "samples per epoch", min=1),
    "features": Arg(int, 32, min=1),
    "hidden": Arg(int, 256, min=1),
    "lr": Arg(float, 0.01, min=0),
    "seed": Arg(int, 1234, "model initialisation seed"),
    "data_seed": Arg(int, 4321, "data and shuffling seed"),
    "checkpoint_dir": Arg(str, None, "where checkpoints are written (relative paths: inside the run directory)",
                          required=True, set_by_plan=True),
    "checkpoint_every": Arg(int, 25, "save every K steps", min=1),
    "keep": Arg(int, 3, "checkpoints to keep", min=1),
    "step_time_ms": Arg(float, 0.0, "extra simulated compute per step (sleep), to model a heavier job on a small "
                        "machine", min=0),
    "pg_timeout_s": Arg(float, 10.0, "process-group timeout (elastic only)", min=0, set_by_plan=True),
    "backend": Arg(str, "gloo", "gloo (CPU) or nccl (GPU)", choices=("gloo", "nccl")),
    "bug": Arg(str, None, "plant a known checkpointing bug", choices=BUGS),
}

RAY_BUGS = ("ignore-checkpoint", "older-checkpoint")

# workloads/ray_train.py (launcher: ray): the model and data of ddp-mlp, run by Ray Train's TorchTrainer.
RAY_MLP: dict[str, Arg] = {
    **{name: DDP_MLP[name] for name in ("steps", "global_batch", "dataset_size", "features", "hidden", "lr", "seed",
                                        "data_seed")},
    "checkpoint_dir": Arg(str, None, "Ray Train's storage_path: checkpoints land in <dir>/<name>/step_<N>-<group>",
                          required=True, set_by_plan=True),
    "checkpoint_every": Arg(int, 25, "ray.train.report a checkpoint every K steps", min=1),
    "keep": Arg(int, 3, "CheckpointConfig(num_to_keep)", min=1),
    "step_time_ms": DDP_MLP["step_time_ms"],
    "pg_timeout_s": Arg(float, 10.0, "TorchConfig(timeout_s): the gloo process group's timeout", min=0,
                        set_by_plan=True),
    "workers": Arg(int, 2, "ScalingConfig(num_workers): Ray Train workers (ranks)", min=1),
    "cpus_per_worker": Arg(float, 1.0, "CPUs each worker asks for (a worker node offers procs_per_node)", min=0),
    "max_failures": Arg(int, 3, "FailureConfig(max_failures): worker-group restarts Ray allows", min=-1),
    "name": Arg(str, "ray-mlp", "RunConfig(name): the experiment folder under checkpoint_dir"),
    "bug": Arg(str, None, "plant a known resume bug", choices=RAY_BUGS),
}


TF_BUGS = ("ignore-backup", "non-atomic-save")

# workloads/tf_train.py (launcher: tf-multiworker): a small Keras model under MultiWorkerMirroredStrategy.
TF_MLP: dict[str, Arg] = {
    "epochs": Arg(int, 12, "epochs to train (BackupAndRestore backs up at the end of each)", min=1),
    "steps_per_epoch": Arg(int, 20, "global steps per epoch (the data set is exactly one epoch)", min=1),
    "global_batch": Arg(int, 64, "samples per global step, split across the workers", min=1),
    "features": Arg(int, 16, min=1),
    "hidden": Arg(int, 64, min=1),
    "lr": Arg(float, 0.05, min=0),
    "seed": Arg(int, 1234, "model initialisation seed"),
    "data_seed": Arg(int, 4321, "data seed"),
    "checkpoint_dir": Arg(str, None, "BackupAndRestore's backup_dir is <dir>/backup", required=True,
                          set_by_plan=True),
    "step_time_ms": DDP_MLP["step_time_ms"],
    "pg_timeout_s": Arg(float, 10.0, "CommunicationOptions(timeout_seconds): how long a collective waits for a "
                        "lost peer before it fails", min=0, set_by_plan=True),
    "bug": Arg(str, None, "plant a known resume bug", choices=TF_BUGS),
}

FLOWER_BUGS = ("ignore-saved-model",)

# workloads/flower_train.py (launcher: flower): FedAvg over a tiny PyTorch classifier, node0 the server.
FLOWER_MLP: dict[str, Arg] = {
    "rounds": Arg(int, 10, "federated rounds to run (ServerConfig.num_rounds)", min=1),
    "clients_per_round": Arg(int, 2, "clients sampled per round (FedAvg's min_fit_clients; the server waits for "
                             "this many to be connected)", min=1),
    "local_steps": Arg(int, 20, "SGD steps each sampled client trains per round", min=1),
    "batch": Arg(int, 32, "samples per local step", min=1),
    "samples_per_client": Arg(int, 512, "synthetic samples in each client's shard (and the server's test set)",
                              min=1),
    "features": Arg(int, 16, min=1),
    "hidden": Arg(int, 32, min=1),
    "lr": Arg(float, 0.1, min=0),
    "seed": Arg(int, 1234, "model initialisation seed (and the server's client sampling)"),
    "data_seed": Arg(int, 4321, "data seed"),
    "checkpoint_dir": Arg(str, None, "where the server saves the global model after each round", required=True,
                          set_by_plan=True),
    "keep": Arg(int, 3, "saved global models to keep", min=1),
    "step_time_ms": Arg(float, 0.0, "extra simulated compute per local step (sleep)", min=0),
    "pg_timeout_s": Arg(float, 10.0, "ServerConfig(round_timeout): how long a round waits for a silent client "
                        "before it counts as a failure (0: forever)", min=0, set_by_plan=True),
    "connect_timeout_s": Arg(float, 30.0, "how long a client keeps trying to reach the server (start_client's "
                             "max_wait_time)", min=0),
    "bug": Arg(str, None, "plant a known resume bug", choices=FLOWER_BUGS),
}

SHIPPED: dict[str, dict[str, Arg]] = {"ddp-mlp": DDP_MLP, "ray-mlp": RAY_MLP, "tf-mlp": TF_MLP,
                                      "flower-mlp": FLOWER_MLP}

_SAVE_AND_LOAD = frozenset({Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_SAVE_FINISHED, Ev.CHECKPOINT_LOAD_STARTED,
                            Ev.CHECKPOINT_LOADED})
# The checkpoint events each shipped workload's own probe reports. The storage layer stays off for a shipped
# workload (its probe already says when it saves and loads: the layer would report each save twice) unless a fault
# is triggered on a checkpoint event the probe never reports: only train.py writes its checkpoint in chunks and says
# so (checkpoint_write_progress); BackupAndRestore, Ray Train and Flower write theirs in one call the probe cannot
# see inside, so that event comes from the layer alone (chaos.storage.layer.layer_only_triggers).
PROBE_CHECKPOINT_EVENTS: dict[str, frozenset[str]] = {
    "ddp-mlp": _SAVE_AND_LOAD | {Ev.CHECKPOINT_WRITE_PROGRESS},
    "ray-mlp": _SAVE_AND_LOAD,
    "tf-mlp": _SAVE_AND_LOAD,
    "flower-mlp": _SAVE_AND_LOAD,
}
# The checkpoint triggers the FUSE storage layer emits and holds until the fault lands (the inotify watcher cannot
# hold them, and sees no load): chaos.storage.layer.HELD_TRIGGERS.
LAYER_HELD_EVENTS = frozenset({Ev.CHECKPOINT_SAVE_STARTED, Ev.CHECKPOINT_WRITE_PROGRESS, Ev.CHECKPOINT_LOADED})


def layer_only_event(workload: str, event: str) -> bool:
    """Whether only the FUSE layer emits this trigger for shipped workload ``workload`` (its probe never does)."""
    return event in LAYER_HELD_EVENTS and event not in PROBE_CHECKPOINT_EVENTS.get(workload, frozenset())


def add_arguments(parser: argparse.ArgumentParser, declared: dict[str, Arg]) -> None:
    """The workload's parser: one ``--kebab-name`` per declared argument."""
    for name, arg in declared.items():
        kwargs: dict[str, Any] = {"type": arg.type, "help": arg.help or None}
        if arg.choices:
            kwargs["choices"] = arg.choices
        if arg.required:
            kwargs["required"] = True
        else:
            kwargs["default"] = arg.default
        parser.add_argument(f"--{name.replace('_', '-')}", **kwargs)


def as_text(value: Any) -> str:
    """How a scenario value is written on the command line (``50.0`` → ``50``); the plan uses the same."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def problems(declared: dict[str, Arg], args: dict[str, Any]) -> dict[str, str]:
    """What the workload's parser would refuse in ``args`` (name → what was expected), judged on the exact text
    the plan will pass, so validation and the run agree."""
    found: dict[str, str] = {}
    for name, value in args.items():
        arg = declared.get(name)
        if arg is None:
            found[name] = f"unknown argument; the workload takes {', '.join(declared)}"
            continue
        if isinstance(value, str) and "\0" in value:
            found[name] = "a NUL character cannot be passed on a command line"
            continue
        if isinstance(value, bool):
            found[name] = f"expected {_JSON_TYPE[arg.type]}, got {value!r}"
            continue
        try:
            parsed = arg.type(as_text(value))
        except (TypeError, ValueError, OverflowError):
            found[name] = f"expected {'an ' if arg.type is int else 'a '}{_JSON_TYPE[arg.type]}, got {value!r}"
            continue
        if isinstance(parsed, float) and not math.isfinite(parsed):
            found[name] = f"expected a finite number, got {value!r}"  # inf sleeps forever, NaN poisons the model
        elif isinstance(parsed, int) and not -(2**63) <= parsed < 2**63:
            found[name] = f"expected a whole number within 64 bits, got {value!r}"  # torch.manual_seed takes no more
        elif arg.choices and parsed not in arg.choices:
            found[name] = f"expected one of {', '.join(arg.choices)}, got {value!r}"
        elif arg.min is not None and isinstance(parsed, (int, float)) and not parsed >= arg.min:
            found[name] = f"expected at least {as_text(arg.min)}, got {value!r}"
    return found
