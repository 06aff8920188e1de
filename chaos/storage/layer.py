"""The engine's side of the storage layer: which layer a run gets, and starting and stopping it.

:func:`choose` decides (``storage.layer`` in the scenario: ``auto`` = FUSE where this machine has it, else the
inotify watcher; ``fuse``; ``inotify``; ``off``) for runs with a checkpoint directory torch-chaos should watch: a
``command:`` workload's ``checkpoint_dir``, or any run with a fault kind that needs the storage layer
(:data:`chaos.capabilities.STORAGE_LAYER`). :class:`StorageLayer` mounts before the first node starts and
unmounts after the last one is gone, always (the engine calls :meth:`StorageLayer.stop` in its teardown). The
bytes never move: the server serves the directory's own contents from underneath its mount, so after the unmount
(or after ``chaos cleanup`` removed the mount of a crashed engine) the files are simply there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import psutil

from chaos.capabilities import STORAGE_LAYER
from chaos.events import Source
from chaos.machine import APT, Check
from chaos.marks import ENGINE_VAR, TREE_VAR, engine_mark, kill_marked, marked_processes, orphaned
from chaos.plan import PlanError
from chaos.registry import fault_plugins
from chaos.storage import libfuse
from chaos.storage.control import ChannelStorageControl, StorageControl
from chaos.storage.hostlayer import wrap
from chaos.storage.libfuse import passthrough_problems
from chaos.storage.mounts import chaos_mounts, fuse_problem, is_mounted, unmount
from chaos.storage.watcher import InotifyWatcher
from chaos.workload import CommandWorkload, ShippedWorkload
from chaos.workload_args import LAYER_HELD_EVENTS, PROBE_CHECKPOINT_EVENTS, layer_only_event

if TYPE_CHECKING:
    from chaos.channel import ChannelServer
    from chaos.history import Event, HistoryWriter
    from chaos.plan import Plan
    from chaos.scenario import Scenario

Layer = Literal["fuse", "inotify", "off"]
MARK_PREFIX = "storage"  # servers carry CHAOS_TREE=storage/<run>: found by cleanup, untouched by node teardown
MOUNT_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
CONTROL_DIR = ".storage"  # in the run directory: rules.json and applied
PASSTHROUGH_FILE = "passthrough.json"  # the server's word on passthrough (INIT's offer; its counts at unmount)


def passthrough_library() -> str:
    """The libfuse the passthrough server loads (the machine check found one before the run started)."""
    library, why = libfuse.find()
    if library is None:
        raise RuntimeError(f"storage.passthrough: {why}")
    return library


def machine_checks() -> list[Check]:
    problem = fuse_problem()
    return [Check("storage layer (FUSE)", problem is None,
                  "fuse: checkpoint directories are served through torch-chaos's FUSE passthrough" if problem is None
                  else f"{problem}; runs fall back to the inotify watcher (no loads, holds or storage faults)",
                  "" if problem is None else f"{APT} fuse3 libfuse3-3 && pip install mfusepy (containers: "
                  "--device /dev/fuse --cap-add SYS_ADMIN)", required=False)]


def passthrough_checks() -> list[Check]:
    """``storage.passthrough``'s machine check: optional for ``chaos doctor``, required for a run that asks for it
    (chaos.doctor.unmet): a run that asked to measure the fast path never silently gets the server's."""
    problems = passthrough_problems()
    return [Check("storage passthrough (FUSE)", not problems,
                  "storage.passthrough: the kernel moves checkpoint bytes, the server sees no read/write"
                  if not problems else "; ".join(problems),
                  "" if not problems else "run as root on Linux >= 6.9 (CONFIG_FUSE_PASSTHROUGH=y) with "
                  "`python -m chaos.storage build-libfuse` done, or leave storage.passthrough out",
                  required=False)]


def wanted(scenario: Scenario) -> bool:
    """Whether the run has a checkpoint directory torch-chaos should watch through the layer: a ``command:`` job's,
    a run with a fault acting through the mount, or a shipped workload whose fault is triggered on an event only the
    layer emits for it (:func:`layer_only_triggers`; its fault-free run gets ``storage.watch``). Not otherwise for a
    shipped workload: its probe reports its saves, and the layer would report each one a second time."""

    w = scenario.workload
    if isinstance(w, CommandWorkload) and w.checkpoint_dir is not None:
        return True
    if watches_shipped(scenario):
        return True
    plugins = fault_plugins()
    return any(STORAGE_LAYER in plugins[f.kind].needs for f in scenario.faults)


# Checkpoint events that only the FUSE layer holds (or sees at all: loads) for a script without the probe.
HELD_TRIGGERS = LAYER_HELD_EVENTS


def watches_shipped(scenario: Scenario) -> bool:
    """Whether a shipped workload's checkpoints go through the layer although no fault acts through the mount: a
    fault triggered on an event only the layer emits for it, or its fault-free run (``storage.watch``), which must
    count the same occurrences."""
    return scenario.storage.watch or bool(layer_only_triggers(scenario))


def layer_only_triggers(scenario: Scenario) -> list[str]:
    """The ``on:`` events of a shipped workload's faults that its own probe never reports
    (:data:`chaos.workload_args.PROBE_CHECKPOINT_EVENTS`) and the FUSE layer does (:data:`HELD_TRIGGERS`):
    tf-mlp's checkpoint_write_progress (BackupAndRestore writes the backup in one call). Without the layer such a
    fault never fires; ddp-mlp reports its write progress itself, so its scenarios need none."""

    w = scenario.workload
    if not isinstance(w, ShippedWorkload):
        return []
    return [f.on.event for f in scenario.faults if f.on is not None and layer_only_event(w.name, f.on.event)]


def counts_as_trigger(scenario: Scenario, event: Event) -> bool:
    """Whether a job's event counts toward the ``on:`` triggers (the engine's occurrences, the fault-free run's
    trigger_counts). A shipped workload's probe reports its own saves and loads, so the layer's events of the same
    operations (when a storage fault or a layer-only trigger mounts it) would count each save twice: only the layer's
    events of a kind the probe never reports count (tf-mlp's write progress). Any other job: the probe's, the
    printed steps' and the layer's all count."""

    source = event.get("source")
    w = scenario.workload
    if not isinstance(w, ShippedWorkload):
        return source in (Source.WORKLOAD, Source.PROGRESS, Source.STORAGE)
    return source == Source.WORKLOAD or (
        source == Source.STORAGE and event.get("event") not in PROBE_CHECKPOINT_EVENTS.get(w.name, frozenset()))


def needs_fuse(scenario: Scenario) -> bool:
    """FUSE is required, not a fallback: when asked for, when a fault acts through the mount, or (``auto``) when a
    ``command:`` workload's fault is triggered on a checkpoint event the inotify watcher could not hold (it would
    fire late, after the save it was aimed at) or would never see (a load), or a shipped workload's on an event
    only the layer emits for it (:func:`layer_only_triggers`). ``storage.layer: inotify`` accepts that
    explicitly; ``off`` leaves checkpoint events to a script that calls the probe."""

    asked = scenario.storage.layer
    if asked == "off":
        return False
    if scenario.storage.passthrough:  # a mode of the FUSE server: never the inotify watcher instead
        return wanted(scenario)
    plugins = fault_plugins()
    if any(STORAGE_LAYER in plugins[f.kind].needs for f in scenario.faults):
        return True
    if asked == "fuse":
        return wanted(scenario)
    if asked == "auto" and layer_only_triggers(scenario):  # the inotify watcher emits no write progress or load
        return True
    w = scenario.workload
    return asked == "auto" and isinstance(w, CommandWorkload) and w.checkpoint_dir is not None and any(
        f.on is not None and f.on.event in HELD_TRIGGERS for f in scenario.faults)


NOT_ON_ENGINE_HOST = ("the nodes write the checkpoint directory from their own hosts (runtime {runtime}), past any "
                      "FUSE mount on the engine's host")


def choose(scenario: Scenario, fuse_on_engine_host: bool = True, fuse_on_node_hosts: bool = False) -> Layer:
    """The layer this run gets on this machine (``fuse_on_engine_host``: the runtime's word that a mount here
    serves its nodes; ``fuse_on_node_hosts``: that it runs a layer on each node's host instead, whose FUSE the
    runtime checks there; with neither, ``auto`` watches, and ``fuse`` is refused)."""
    asked = scenario.storage.layer
    if asked == "off" or not wanted(scenario):
        return "off"
    if asked == "auto" and scenario.storage.passthrough:  # FUSE or nothing (the machine check said so already)
        asked = "fuse"
    if not fuse_on_engine_host and fuse_on_node_hosts:
        return "inotify" if asked == "inotify" else "fuse"
    if asked == "fuse" and not fuse_on_engine_host:
        raise PlanError("storage.layer: fuse: " + NOT_ON_ENGINE_HOST.format(runtime=scenario.cluster.runtime)
                           + "; set storage.layer: auto (an inotify watch, where the hosts share a kernel) or off")
    if asked in ("fuse", "inotify"):
        return asked
    return "fuse" if fuse_on_engine_host and fuse_problem() is None else "inotify"


def why_layer(scenario: Scenario, kind: Layer, fuse_on_engine_host: bool = True) -> str | None:
    """Why the run got the inotify watcher (what ``loads_visible`` says; None for another layer)."""
    if kind != "inotify":
        return None
    if scenario.storage.layer == "inotify":
        return "storage.layer: inotify"
    if not fuse_on_engine_host:
        return NOT_ON_ENGINE_HOST.format(runtime=scenario.cluster.runtime)
    return fuse_problem() or "no /dev/fuse or libfuse3"


class StorageLayer:
    """One run's layer: ``start()`` before the first node, ``stop()`` after the last (idempotent).

    ``on_node_hosts``: the FUSE layer runs on each node's host, started by the runtime around the node's command
    (:meth:`node_command`, :mod:`chaos.storage.hostlayer`); here only its rules are kept, sent over the history
    channel."""

    def __init__(self, kind: Layer, plan: Plan, history: HistoryWriter, logs: dict[str, Path] | None = None,
                 on_node_hosts: bool = False):
        self.kind: Layer = kind
        self.on_node_hosts = on_node_hosts and kind == "fuse"
        self.logs = logs or {}  # each node's log (the runtime's log_path): the server reads printed steps there
        self.plan = plan
        self.history = history
        self.directory = plan.checkpoint_dir
        self.control_dir = plan.run_dir / CONTROL_DIR
        self.control: StorageControl | None = None
        self.watcher: object | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.passthrough = kind == "fuse" and plan.scenario.storage.passthrough
        if self.directory is None:
            self.kind = "off"

    def start(self, channel: ChannelServer | None = None) -> None:
        if self.kind == "off":
            return
        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.on_node_hosts:
            if channel is None:
                raise RuntimeError("the storage layers on the nodes' hosts take their rules over the history "
                                   "channel, and this run has none")
            self.control = ChannelStorageControl(channel, self.control_dir)
            return
        if self.kind == "inotify":
            self.watcher = InotifyWatcher(self.directory, self.history)
            return
        self.control_dir.mkdir(exist_ok=True)
        log = self.plan.run_dir / "logs" / "storage.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "chaos.storage", "serve", "--mount", str(self.directory),
                "--events", str(self.plan.run_dir / "events.jsonl"), "--control", str(self.control_dir),
                "--run-id", self.plan.run_id, "--engine-pid", str(os.getpid())]
        if self.plan.pause_on:
            argv += ["--pause-on", ",".join(self.plan.pause_on)]
        env = {**os.environ, TREE_VAR: f"{MARK_PREFIX}/{self.plan.run_id}", ENGINE_VAR: engine_mark()}
        env.pop("CHAOS_NODE", None)
        if self.passthrough:
            argv.append("--passthrough")
            env["FUSE_LIBRARY_PATH"] = passthrough_library()
            (self.control_dir / PASSTHROUGH_FILE).unlink(missing_ok=True)
        workload = self.plan.scenario.workload
        if isinstance(workload, CommandWorkload):  # the server reads the steps printed: a save's step
            argv += ["--progress-regex", workload.progress_regex]
            argv += [f"--log={name}={path}" for name, path in self.logs.items()]
        with open(log, "ab") as out:
            self._proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=env, start_new_session=True)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        status = self.control_dir / PASSTHROUGH_FILE
        while not is_mounted(str(self.directory)) or (self.passthrough and not status.exists()):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"the storage layer did not mount {self.directory}: "
                                   + (" / ".join(tail) or "no output"))
            time.sleep(0.02)
        if self.passthrough and not json.loads(status.read_text()).get("offered"):
            self.stop()
            raise RuntimeError("storage.passthrough: the kernel did not offer FUSE passthrough at INIT (Linux >= 6.9 "
                               "with CONFIG_FUSE_PASSTHROUGH=y); leave storage.passthrough out to run on the "
                               "server's path")
        self.control = StorageControl(self.control_dir)

    def node_command(self, python: str, command: list[str]) -> list[str]:
        """A node's command run through the layer on its host (the runtime calls this at every node start)."""

        assert self.directory is not None
        workload = self.plan.scenario.workload
        regex = workload.progress_regex if isinstance(workload, CommandWorkload) else None
        return wrap(python, str(self.directory), str(self.plan.run_dir / "events.jsonl"), self.plan.run_id, command,
                    sorted(self.plan.pause_on), regex, passthrough=self.passthrough)

    def poll(self) -> None:
        """Each engine tick: the inotify watcher turns what happened into events (FUSE needs nothing)."""
        if self.watcher is not None:
            self.watcher.poll()  # type: ignore[attr-defined]

    def stop(self) -> None:
        """Unmount and end the server (after the nodes are gone); safe to call twice, and after a failed start."""
        if self.watcher is not None:
            self.watcher.close()  # type: ignore[attr-defined]
            self.watcher = None
        if self.directory is not None and self.kind == "fuse" and not self.on_node_hosts:
            unmount(str(self.directory))
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)
            if self.directory is not None:
                unmount(str(self.directory))  # a server killed mid-unmount leaves a dead mount


def _run_of(proc: psutil.Process) -> str | None:
    try:
        return str(proc.environ().get(TREE_VAR, "")).removeprefix(f"{MARK_PREFIX}/")
    except (psutil.Error, OSError):
        return None


def cleanup(run_id: str | None, only_orphans: bool) -> list[str]:
    """``chaos cleanup``: end orphaned servers (their engine is gone) and unmount their stale mounts."""
    prefix = f"{MARK_PREFIX}/{run_id}" if run_id else MARK_PREFIX
    removed = [f"storage server {p.pid}" for p in kill_marked(prefix, only_orphans=only_orphans)]
    live = {_run_of(p) for p in marked_processes(MARK_PREFIX) if not orphaned(p)} if only_orphans else set()
    for m in chaos_mounts():
        if (run_id is None or m.run_id == run_id) and m.run_id not in live and unmount(m.path):
            removed.append(f"storage mount {m.path}")
    return removed

