"""The slurm runtime's job steps: one ``srun`` per chaos node, started, tracked, signalled and timed.

Each node runs as its own job step pinned to one host, so a fault can hit one node: the step is found again by its
unique name (``squeue --steps``), signalled with ``scancel --signal=... JOB.STEP``, and inspected by a helper step
(:mod:`chaos.runtimes.slurm_helper`) on the same host, since a user has no other view of a compute host. srun's
exit is the node's, except the 0 it gives when the step's host is lost, which :mod:`chaos.runtimes.slurm_hosts`
judges. Kept apart so the runtime's fault methods read as what they do to a node, and the step bookkeeping (names,
srun clients, when each start was listed) is in one place.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.events import Ev, signal_exit_code
from chaos.marks import ENGINE_VAR, TREE_VAR, engine_mark
from chaos.runtimes.base import NodeLogs
from chaos.runtimes.slurm_commands import (
    HELPER_TIMEOUT_S,
    helper_environ,
    parse_steps,
    run_slurm,
    slurm_environ,
    srun_argv,
)
from chaos.runtimes.slurm_hosts import Hosts


class Steps:
    """The nodes' job steps in the allocation ``alloc`` holds: their srun clients, their step names, the starts
    Slurm has not listed yet, and when the last crash/freeze signal went out. ``emit`` records a history event."""

    def __init__(self, run_id: str, run_dir: Path, python: str, alloc: Hosts, logs: NodeLogs,
                 log_path: Callable[[str], Path], emit: Callable[[dict[str, Any]], None]):
        self.run_id = run_id
        self.run_dir = run_dir
        self.python = python
        self.alloc = alloc
        self._logs = logs
        self._log_path = log_path
        self._emit = emit
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._names: dict[str, str] = {}  # node -> its current step's name
        self.starts: dict[str, tuple[float, bool]] = {}  # node -> (srun started at, replacement), until seen
        self._judged: dict[int, int] = {}  # srun pid -> its node's exit code, once judged (srun exited 0)
        self._count: dict[str, int] = {}  # node -> steps started (a unique step name each)
        self._effect_t: dict[str, float] = {}  # node -> when the last crash/freeze signal went out (effect_time)
        self._lock = threading.Lock()

    def started(self, name: str) -> bool:
        """Whether ``name`` had a step already (its next one is a replacement)."""
        return name in self.procs

    def start(self, name: str, host: str, replacement: bool, argv: list[str], env: dict[str, str]) -> None:
        """``name``'s command as a new step on ``host``, its output appended to the node's log."""
        assert self.alloc.job_id is not None
        self._count[name] = self._count.get(name, 0) + 1
        step_name = f"{self.run_id[-6:]}-{name}-{self._count[name]}"
        fh = self._logs.reopen(name, where=host)
        full_env = {**slurm_environ(), **env, TREE_VAR: f"{self.run_id}/{name}", ENGINE_VAR: engine_mark()}
        self.procs[name] = subprocess.Popen(
            srun_argv(self.alloc.job_id, host, step_name, str(self.run_dir), argv), env=full_env, stdout=fh,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        with self._lock:
            self._names[name] = step_name
            self.starts[name] = (time.monotonic(), replacement)

    def exit_code(self, name: str) -> int | None:
        proc = self.procs.get(name)
        if proc is None:
            return None
        code = signal_exit_code(proc.poll())  # srun says 137 for a SIGKILLed step: -9, as on every runtime
        if code != 0:
            return code
        if proc.pid not in self._judged:
            self._judged[proc.pid] = self.alloc.lost_host_code(name, self._log_path(name))
        return self._judged[proc.pid]

    def listed(self) -> dict[str, str]:
        """Step name -> JOB.STEP of this job's steps Slurm lists now."""
        assert self.alloc.job_id is not None
        return parse_steps(run_slurm(["squeue", "--steps", "-h", "-j", self.alloc.job_id, "-o", "%i %j"],
                                     timeout=10).stdout, self.alloc.job_id)

    def step_id(self, name: str, wait_s: float = 10.0) -> str:
        """JOB.STEP of the node's current step (a step just started may take a moment to be listed)."""
        assert self.alloc.job_id is not None
        step_name = self._names.get(name)
        if step_name is None:
            raise RuntimeError(f"{name} has no job step")
        deadline = time.monotonic() + wait_s
        while True:
            steps = parse_steps(run_slurm(["squeue", "--steps", "-h", "-j", self.alloc.job_id, "-o", "%i %j"]).stdout,
                                self.alloc.job_id)
            if step_name in steps:
                return steps[step_name]
            if time.monotonic() > deadline or self.exit_code(name) is not None:
                raise RuntimeError(f"{name}'s job step {step_name} is not running (squeue --steps lists none)")
            time.sleep(0.2)

    def record_listed(self, steps: dict[str, str]) -> None:
        """A start Slurm lists now is a ``slurm_step_started`` event, timed from its srun."""
        now = time.monotonic()
        with self._lock:
            for node, (started, replacement) in list(self.starts.items()):
                step_name = self._names.get(node)
                if step_name in steps:
                    self._emit({"t": time.time(), "event": Ev.SLURM_STEP_STARTED, "node": node,
                                "host": self.alloc.host_of.get(node, "?"), "step": steps[step_name],
                                "after_s": round(now - started, 3), "replacement": replacement})
                    del self.starts[node]
                elif (proc := self.procs.get(node)) is not None and proc.poll() is not None:
                    del self.starts[node]  # its srun ended before Slurm listed it: nothing more to time

    def helper(self, name: str, action: str, *args: str) -> dict[str, Any]:
        """Run the helper as a step on ``name``'s host; its JSON answer."""
        assert self.alloc.job_id is not None
        host = self.alloc.host_of[name]
        argv = srun_argv(self.alloc.job_id, host, f"{self.run_id[-6:]}-helper", str(self.run_dir),
                         [self.python, "-m", "chaos.runtimes.slurm_helper", action, f"{self.run_id}/{name}", *args])
        proc = run_slurm(argv, timeout=HELPER_TIMEOUT_S, env=helper_environ())
        for line in reversed(proc.stdout.splitlines()):
            if line.startswith("{"):
                return dict(json.loads(line))
        raise RuntimeError(f"the helper step on {host} answered nothing (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-300:]}")

    def states_of(self, name: str) -> dict[str, str]:
        """pid -> state letter of ``name``'s processes on its host, read by a helper step."""
        return dict(self.helper(name, "state").get("processes", {}))

    def scancel(self, sig: str, step: str, name: str | None = None) -> str:
        proc = run_slurm(["scancel", f"--signal={sig}", step])
        if name is not None:
            self._effect_t[name] = time.time()  # the signal is out; what follows only checks it
        # Slurm's exit code is not the verdict (225 "Invalid job id specified" on a partial allocation while the
        # signal was delivered): the caller judges by the processes' state.
        return f"exit {proc.returncode}" + (f", said {proc.stderr.strip()!r}" if proc.stderr.strip() else "")

    def effect_time(self, name: str) -> float | None:
        return self._effect_t.pop(name, None)

    def wait_clients(self) -> None:
        """Teardown, after the allocation is cancelled: srun clients end with their steps; a stuck one is killed."""
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
