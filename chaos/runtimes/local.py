"""The local runtime: each node is a process tree on this machine (the embedded default, no daemon needed).

torchrun starts its workers in their own session, so the agent's process group does not cover them, and a
SIGKILLed agent orphans its workers. Every process of a node therefore carries ``CHAOS_TREE=<run>/<node>`` in
its environment (children inherit it, torchrun passes it on); the runtime finds a node's processes by that
mark, so it reaches orphans too, and teardown kills everything marked with the run id.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from chaos import cgroup
from chaos.capabilities import (
    CHECKPOINT_STORAGE,
    CPU_QUOTA,
    FREEZE,
    KILL,
    KILL_WORKERS,
    LAYER_OUTLIVES_NODE,
    MEMORY_CGROUP,
    RENDEZVOUS_SERVERS,
    STORAGE_LAYER,
)
from chaos.cgroup import make_node_cgroups
from chaos.marks import ENGINE_VAR, TREE_VAR, engine_mark, kill_marked, marked_processes, signal_all, with_local_rank
from chaos.plan import NodePlan, Plan
from chaos.runtimes.base import NodeLogs, Runtime, plan_needs

# Without taskset (util-linux), the same in Python: set the affinity, then exec the node (same pid).
_SET_AFFINITY = ("import os, sys; os.sched_setaffinity(0, [int(c) for c in sys.argv[1].split(',')]); "
                 "os.execvp(sys.argv[2], sys.argv[2:])")


def pinned_argv(argv: list[str], cpus: list[int] | None) -> list[str]:
    """``argv`` run with its CPU affinity set to ``cpus`` (None: as it is). The affinity is set before the node's
    first instruction and inherited by every process it starts (torchrun's workers, their threads), so the whole
    tree stays on those cores; the wrapper execs, so the node keeps the pid the runtime tracks."""
    if cpus is None:
        return argv
    cores = ",".join(map(str, cpus))
    if shutil.which("taskset"):
        return ["taskset", "--cpu-list", cores, *argv]
    return [sys.executable, "-c", _SET_AFFINITY, cores, *argv]


# Signals whose default action leaves the process running (stopped, continued or untouched): after these the reap
# does not wait; after any other (SIGKILL, SIGTERM, SIGSEGV, SIGUSR1 ...) it waits up to 2 s so the exit code is
# there for the fault's next look.
_LEAVES_IT_RUNNING = frozenset({signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCONT,
                                signal.SIGWINCH, signal.SIGURG, signal.SIGCHLD})

class LocalRuntime(Runtime):
    name = "local"
    summary = "process trees on this machine, sharing its loopback (no daemon, no root)"
    capabilities = frozenset({KILL, KILL_WORKERS, FREEZE, CHECKPOINT_STORAGE, STORAGE_LAYER, LAYER_OUTLIVES_NODE,
                              MEMORY_CGROUP, CPU_QUOTA, RENDEZVOUS_SERVERS})
    cleanup_order = 60  # after containers, whose processes carry marks too

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        killed = [f"process {p.pid}" for p in kill_marked(run_id, only_orphans=only_orphans)]
        return killed + cgroup.cleanup(run_id, only_orphans)

    def __init__(self, run_id: str, run_dir: str | Path):
        super().__init__(run_id, run_dir)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs = NodeLogs(self.log_path)
        # Per-node memory cgroups, made only for a run with a memory fault (chaos/cgroup.py says why).
        self._cgroups: dict[str, Path] = {}

    def prepare(self, plan: Plan) -> None:
        if plan_needs(plan, MEMORY_CGROUP):
            names = [n.name for n in plan.nodes] + ([plan.store.name] if plan.store is not None else [])
            self._cgroups = make_node_cgroups(self.run_id, names)

    def memory_cgroup(self, name: str) -> Path:
        if name not in self._cgroups:
            raise RuntimeError(f"{name} runs in no memory cgroup of its own (made only for runs with a memory fault)")
        return self._cgroups[name]

    def _tree_mark(self, name: str) -> str:
        return f"{self.run_id}/{name}"

    def start_node(self, node: NodePlan) -> None:
        fh = self._logs.reopen(node.name)
        env = {**os.environ, **node.env, TREE_VAR: self._tree_mark(node.name), ENGINE_VAR: engine_mark()}
        argv = node.argv
        cgroup = self._cgroups.get(node.name)
        if cgroup is not None:
            # The shell joins the node's memory cgroup and execs the node (same pid): every page the node ever
            # touches is charged there. (A preexec_fn would do the same but is unsafe in a threaded engine.)
            argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup / "cgroup.procs"), *argv]
        argv = pinned_argv(argv, node.cpus)  # cluster.resources.cpus: the tree runs on its own cores only
        self._procs[node.name] = subprocess.Popen(
            argv, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=str(self.run_dir))

    def exit_code(self, name: str) -> int | None:
        proc = self._procs.get(name)
        return None if proc is None else proc.poll()

    def pid(self, name: str) -> int | None:
        proc = self._procs.get(name)
        return proc.pid if proc is not None else None

    def node_pids(self, name: str) -> list[int]:
        return [p.pid for p in self._tree(name)]

    def _tree(self, name: str) -> list[psutil.Process]:
        return marked_processes(self._tree_mark(name))

    def _stop_tree(self, name: str) -> list[psutil.Process]:
        """SIGSTOP the whole tree, scanning again until no new process appears (a launcher may be mid-spawn)."""
        stopped: dict[int, psutil.Process] = {}
        for _ in range(5):
            new = [p for p in self._tree(name) if p.pid not in stopped]
            if not new:
                break
            signal_all(new, signal.SIGSTOP)
            stopped.update((p.pid, p) for p in new)
        return list(stopped.values())

    def kill(self, name: str) -> str:
        procs = self._stop_tree(name)
        if not procs:  # a crash that acts on nothing must not be credited with what follows
            raise RuntimeError(f"no process of {name} was alive: the crash acted on nothing")
        signal_all(procs, signal.SIGKILL)
        self._reap(name)
        return f"SIGKILL to the node's whole process tree ({len(procs)} processes)"

    def kill_workers(self, name: str, sig: int = signal.SIGKILL, local_rank: int | None = None) -> str:
        agent = self.pid(name)
        if agent is None:
            raise RuntimeError(f"{name} is not running")
        what = signal.Signals(sig).name
        workers = self.select_workers(self._tree(name), agent)
        if not workers:
            # A centralized node is its own worker: killing the worker is killing the process.
            signal_all([p for p in self._tree(name)], sig)
            if sig not in _LEAVES_IT_RUNNING:  # a stop or a continue leaves it running: no wait
                self._reap(name)
            return f"{what} to the training process (no launcher on this node)"
        chosen = with_local_rank(workers, local_rank)
        if not chosen:
            raise RuntimeError(f"{name} has no worker with LOCAL_RANK={local_rank}")
        signal_all(chosen, sig)
        return f"{what} to {len(chosen)} worker process(es) (pid {', '.join(str(p.pid) for p in chosen)}); " \
               f"{self.agent_words()}"

    def freeze(self, name: str) -> str:
        procs = self._stop_tree(name)
        return f"SIGSTOP to the node's whole process tree ({len(procs)} processes)"

    def thaw(self, name: str) -> None:
        signal_all(self._tree(name), signal.SIGCONT)

    def _reap(self, name: str, timeout: float = 2.0) -> None:
        proc = self._procs.get(name)
        if proc is not None:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass

    def teardown(self) -> list[str]:
        cleaned = [f"pid {p.pid}" for p in kill_marked(self.run_id)]
        for name in list(self._procs):
            self._reap(name, timeout=1)
        self._logs.close()
        if self._cgroups:
            cleaned += cgroup.cleanup(self.run_id, only_orphans=False)
            self._cgroups.clear()
        return cleaned

    def describe(self) -> dict[str, Any]:
        return {"runtime": self.name, "process_tracking": f"environment mark {TREE_VAR}",
                "freeze_mechanism": "SIGSTOP/SIGCONT", "crash_mechanism": "SIGKILL"}
