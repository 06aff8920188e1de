"""A runtime from outside torch-chaos: every node is a plain subprocess on this host.

The smallest runtime that really runs a job (docs/design.md, "A runtime from outside"). It starts each node's command
with the node's environment and marks the process tree (``chaos.plugin.TREE_VAR``), because a node is more than
one process: torchrun starts its workers in sessions of their own, so a kill of the agent's process group would
leave them training, and the replacement would wait for a group that never re-forms. Kill and teardown therefore
act on every marked process, and ``chaos cleanup`` finds what a killed engine left behind by the same mark.

It says what it cannot do through its capabilities (KILL and CHECKPOINT_STORAGE): crash and corrupt_checkpoint
run on it; freeze, kill_worker and the network faults are refused when the scenario is validated, naming the
runtimes that can do them.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import IO, Any

from chaos.plugin import (
    CHECKPOINT_STORAGE,
    ENGINE_VAR,
    KILL,
    TREE_VAR,
    Check,
    NodePlan,
    Runtime,
    Unsupported,
    engine_mark,
    marked_processes,
    signal_all,
)


class SubprocessRuntime(Runtime):
    name = "subprocess"  # = the entry point's name
    summary = "every node a plain subprocess on this host (an example runtime plug-in)"
    capabilities = frozenset({KILL, CHECKPOINT_STORAGE})

    def __init__(self, run_id: str, run_dir: str | Path) -> None:
        super().__init__(run_id, run_dir)  # self.run_id, self.run_dir
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, IO[bytes]] = {}

    @classmethod
    def machine_checks(cls, options: Any = None) -> list[Check]:
        """Marks are read from /proc/<pid>/environ: without /proc a kill could not find a node's workers."""
        ok = Path("/proc/self/environ").exists()
        return [Check("subprocess runtime: /proc", ok, "process marks readable" if ok else "no /proc",
                      fix="run on Linux")]

    def _mark(self, name: str) -> str:
        return f"{self.run_id}/{name}"

    def start_node(self, node: NodePlan) -> None:
        """Start (or restart under the same name) the node's command; its output goes to logs/<name>.log."""
        old = self._logs.pop(node.name, None)
        if old is not None:
            old.close()
        log = self.log_path(node.name)
        log.parent.mkdir(parents=True, exist_ok=True)
        self._logs[node.name] = out = log.open("ab")
        env = {**os.environ, **node.env, TREE_VAR: self._mark(node.name), ENGINE_VAR: engine_mark()}
        self._procs[node.name] = subprocess.Popen(node.argv, env=env, cwd=self.run_dir, stdout=out,
                                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                  start_new_session=True)

    def exit_code(self, name: str) -> int | None:
        proc = self._procs.get(name)
        return None if proc is None else proc.poll()

    def node_pids(self, name: str) -> list[int]:
        return [p.pid for p in marked_processes(self._mark(name))]

    def kill(self, name: str) -> str:
        """SIGKILL to every process of the node. A kill that finds nothing raises: the engine then records the
        fault as failed instead of crediting it with whatever happens next."""
        procs = marked_processes(self._mark(name))
        if not procs:
            raise RuntimeError(f"no process of {name} was alive: the crash acted on nothing")
        signal_all(procs, signal.SIGKILL)
        proc = self._procs.get(name)
        if proc is not None:
            proc.wait(timeout=30)  # reaped, so exit_code says -9 at once
        return f"SIGKILL to the node's {len(procs)} marked process(es)"

    def kill_workers(self, name: str, sig: int = 9, local_rank: int | None = None) -> str:
        raise Unsupported("the subprocess runtime does not signal single workers (capability kill_workers)")

    def freeze(self, name: str) -> str:
        raise Unsupported("the subprocess runtime cannot freeze a node (capability freeze)")

    def thaw(self, name: str) -> None:
        raise Unsupported("the subprocess runtime cannot freeze a node (capability freeze)")

    def teardown(self) -> list[str]:
        """Everything this run started, gone: every marked process, then the log files closed."""
        procs = marked_processes(self.run_id)
        signal_all(procs, signal.SIGKILL)
        for proc in self._procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for out in self._logs.values():
            out.close()
        self._logs.clear()
        return [f"pid {p.pid}" for p in procs]

    def describe(self) -> dict[str, Any]:
        return {"runtime": self.name, "process_tracking": f"environment mark {TREE_VAR}", "crash_mechanism": "SIGKILL"}
