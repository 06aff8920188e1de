"""The slurm runtime's hosts: which node runs where, the spares, and the hosts that are lost.

A host can go in two ways: Slurm marks it down or drained (it stopped responding), or the run's ``host_loss`` fault
had the container cluster's agent kill it. Either way srun only says "Node failure" and exits 0, so a lost host
must be told apart from a node that finished, must never take a replacement again, and, when the run took it, must
be returned at teardown or by ``chaos cleanup`` after an engine that died first (an owner file names it). That
bookkeeping is this module's one job; the steps (:mod:`chaos.runtimes.slurm_steps`) ask it where a step goes and
whether a step's end was its host's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.cluster.agent import AgentError, ask, read_config
from chaos.events import Ev
from chaos.marks import leftover_owner_files
from chaos.runtimes.slurm_commands import (
    AGENT_TIMEOUT_S,
    agent_file,
    host_lost,
    lost_hosts_dir,
    parse_node_states,
    run_slurm,
)
from chaos.runtimes.slurm_network import agent_config


class Hosts:
    """The allocation (its job id and hosts), each node's current host, the free spares, Slurm's last word on each
    host, and the hosts ``lose_host`` took. ``emit`` records a history event (the runtime's observe() hands them
    on)."""

    def __init__(self, run_id: str, emit: Callable[[dict[str, Any]], None]):
        self.run_id = run_id
        self._emit = emit
        self.job_id: str | None = None
        self.hosts: list[str] = []
        self.host_of: dict[str, str] = {}  # node -> host its current step runs on
        self.spares: list[str] = []
        self.states: dict[str, str] = {}  # host -> its state as sinfo last said
        self.lost: dict[str, bool] = {}  # host lost by lose_host -> returned since
        self.asked_lost: set[str] = set()  # hosts lose_host asked the agent for, answered or not
        self._lock = threading.Lock()

    def record_states(self, states: dict[str, str]) -> None:
        """sinfo's answer: a host whose state changed is a ``slurm_node_state`` event."""
        with self._lock:
            for host, state in states.items():
                before = self.states.get(host)
                if before is not None and before != state:
                    self._emit({"t": time.time(), "event": Ev.SLURM_NODE_STATE, "host": host, "state": state,
                                "previous": before})
                self.states[host] = state

    def place(self, name: str, started: bool) -> tuple[str, bool]:
        """The host for ``name``'s next step, and whether it is a replacement: its own the first time; for a
        replacement a free spare (the old host becomes a spare unless Slurm says it is down), else its own again."""
        if not started:
            return self.host_of[name], False
        old = self.host_of[name]
        if self.spares:
            new = self.spares.pop(0)
            if not host_lost(self.states.get(old, "")) and old not in self.lost:  # a lost host never comes back
                self.spares.append(old)
            self.host_of[name] = new
            return new, True
        if old in self.lost:
            raise RuntimeError(f"{name}'s host {old} is lost and no spare host is left")  # can_replace said so
        return old, True

    def can_replace(self, name: str) -> str | None:
        host = self.host_of.get(name)
        if host is not None and (host in self.lost or host_lost(self.states.get(host, ""))) and not self.spares:
            return f"its host {host} is lost and the allocation has no spare host left"
        return None

    def lost_host_code(self, name: str, log_path: Path) -> int:
        """srun exits 0 when its step's host is lost ("srun: error: Node failure on c2", measured): a lost host
        must not read as a node that finished. It is lost when srun said so in the node's log, or when Slurm,
        asked now, says the host does not respond (``*``) or is down; then the node died as if SIGKILLed."""
        host = self.host_of.get(name, "")
        try:
            with open(log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 4096))
                # "c2" must not match "Node failure on c20"
                said = bool(host) and re.search(rb"Node failure on " + re.escape(host.encode()) + rb"(?![\w.-])",
                                                fh.read()) is not None
        except OSError:
            said = False
        state = ""
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            state = parse_node_states(run_slurm(["sinfo", "-h", "-N", "-n", host, "-o", "%N %t"], timeout=10).stdout
                                      ).get(host, "")
        if said or host_lost(state) or host in self.lost:
            with self._lock:
                self._emit({"t": time.time(), "event": Ev.SLURM_NODE_STATE, "host": host, "state": state or "?",
                            "previous": self.states.get(host, "?"), "node_failure": name})
                if state:
                    self.states[host] = state  # the replacement must not go back to it
            return -int(signal.SIGKILL)
        return 0

    # --- host loss, through the cluster agent ------------------------------------------------------------------

    def lose(self, name: str) -> tuple[str, dict[str, Any]]:
        """The agent docker-kills the container of ``name``'s host. srun learns it only from Slurm (it exits 0
        after "Node failure", once slurmctld marks the host down), and :meth:`lost_host_code` reads that as
        killed; the host is never a spare again."""
        host = self.host_of[name]
        config = agent_config()
        # before asking: a request that times out or is interrupted may still have killed the container; teardown
        # returns every host asked for (starting a running container changes nothing), and `chaos cleanup` does
        # after an engine that died first (the owner file)
        self.asked_lost.add(host)
        record = self._write_owner()
        answer = ask(config, "lose", host, timeout=AGENT_TIMEOUT_S)
        with self._lock:
            self.lost[host] = False
        where = f"{config['address']}:{config['port']}"
        return (f"docker kill of {answer['container']} (host {host}) by the cluster agent at {where}",
                {"host": host, "container": answer["container"], "agent": where, "t_agent": answer["t"],
                 "cleanup_record": record})

    def _owner(self) -> Path:
        return lost_hosts_dir() / f"{self.run_id}.json"

    def _write_owner(self) -> str:
        """The owner file's path, or why it could not be written (then only this engine's teardown returns the
        host: the fault still goes on, its details say so)."""
        owner = self._owner()
        try:
            owner.parent.mkdir(parents=True, exist_ok=True)
            owner.write_text(json.dumps({"run_id": self.run_id, "engine_pid": os.getpid(),
                                         "agent_file": agent_file(), "hosts": sorted(self.asked_lost)}))
        except OSError as exc:
            return f"not written ({exc}): after an engine crash, `chaos cluster down` and up restore the host"
        return str(owner)

    def give_back(self, host: str) -> dict[str, Any]:
        """The agent docker-starts the host's container: slurmd comes back (ReturnToService=2 makes it usable),
        but not into this run's allocation, and not as its spare."""
        answer = ask(agent_config(), "return", host, timeout=AGENT_TIMEOUT_S)
        with self._lock:
            self.lost[host] = True
        return {"returned": host, "mechanism": f"docker start of {answer['container']} by the cluster agent",
                "t_agent": answer["t"]}

    def give_all_back(self) -> list[str]:
        """Teardown: every host the run had lost and not returned yet goes back (the cluster as the run found it);
        the owner file goes once all are back, else ``chaos cleanup`` tries again."""
        cleaned = []
        back = True
        for host in sorted(self.asked_lost):
            if not self.lost.get(host, False):
                try:
                    self.give_back(host)
                    cleaned.append(f"host {host} returned (docker start by the cluster agent)")
                except (RuntimeError, OSError) as exc:
                    back = False
                    cleaned.append(f"host {host} NOT returned: {exc}")
        if back:
            self._owner().unlink(missing_ok=True)
        return cleaned


def return_leftover_hosts(run_id: str | None, only_orphans: bool) -> list[str]:
    """``chaos cleanup``: hosts an engine that is gone had the agent lose and never returned: the cluster as the
    run found it."""
    out = []
    for owner, info in leftover_owner_files(lost_hosts_dir(), run_id, only_orphans):
        left = []
        for host in info.get("hosts", []):
            try:
                ask(read_config(str(info.get("agent_file", ""))), "return", str(host), timeout=AGENT_TIMEOUT_S)
                out.append(f"host {host} returned (docker start by the cluster agent; run {info.get('run_id')})")
            except (AgentError, OSError, ValueError) as exc:
                left.append(host)
                out.append(f"host {host} NOT returned: {exc}")
        if left:
            continue  # kept for the next cleanup
        owner.unlink(missing_ok=True)
    return out
