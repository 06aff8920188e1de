"""What the memory faults share beside the node's memory cgroup (chaos.cgroup): the OOM killer's own record, and a
co-located allocator process.

Why every node gets its memory cgroup before it starts, and why limits are written to the cgroup files directly
(for containers too): :mod:`chaos.cgroup`.

**The record.** ``oom_kill`` in ``memory.oom_control`` (v1) or ``memory.events`` (v2) counts the kernel's kills in
that cgroup; ``/dev/kmsg`` names each victim ("Memory cgroup out of memory: Killed process N"). Both are read: the
counter is the proof that the OOM killer acted, the kernel log says whom it killed.

Leftovers: every cgroup torch-chaos makes has an owner file in ``/run/torch-chaos/memory`` naming the engine, and
every limit it changes on a container's cgroup records the previous values there until healed, so ``chaos
cleanup`` moves orphaned processes back, removes the cgroups and restores the limits after an engine SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from chaos.cgroup import NodeMemory
from chaos.events import Ev
from chaos.marks import DELAYERS, ENGINE_VAR, TREE_VAR, engine_mark

if TYPE_CHECKING:
    from chaos.runtimes.capability import ResourceControl

# ------------------------------------------------------------------------------------------ the kernel's record

_KILLED = re.compile(r"(?:Memory cgroup out of memory|Out of memory): Killed process (\d+) \(([^)]*)\)")
# The line before it names the cgroups: "oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/a/b,task_memcg=/a/b,..."
_MEMCG = re.compile(r"oom-kill:.*?oom_memcg=([^,]*),.*?pid=(\d+)")


@dataclass
class Kill:
    pid: int
    comm: str
    t: float  # host wall clock of the kernel's record
    line: str
    memcg: str | None = None  # the cgroup whose limit was hit, relative to the hierarchy's root


class KernelLog:
    """New ``/dev/kmsg`` records from the moment it was opened: the OOM killer's "Killed process N" lines."""

    def __init__(self) -> None:
        self._memcg: dict[int, str] = {}
        self.fd: int | None
        try:
            self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError:
            self.fd = None  # not root, or a container without it: the counter still proves the kill

    def kills(self) -> list[Kill]:
        out: list[Kill] = []
        if self.fd is None:
            return out
        while True:
            try:
                record = os.read(self.fd, 8192).decode(errors="replace")
            except BlockingIOError:
                return out
            except BrokenPipeError:  # records overwritten before we read them: go on with the next
                continue
            except OSError:
                return out
            head, _, message = record.partition(";")
            if (c := _MEMCG.search(message)) is not None:
                self._memcg[int(c.group(2))] = c.group(1)
            m = _KILLED.search(message)
            if m is None:
                continue
            fields = head.split(",")
            t = time.time()
            with contextlib.suppress(IndexError, ValueError):
                t -= time.clock_gettime(time.CLOCK_MONOTONIC) - int(fields[2]) / 1e6
            pid = int(m.group(1))
            out.append(Kill(pid, m.group(2), t, message.splitlines()[0].strip(), self._memcg.pop(pid, None)))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def identify(pids: list[int]) -> dict[int, dict[str, Any]]:
    """What each process is (worker: its rank and local rank), read while it lives: a dead one cannot be asked."""
    out: dict[int, dict[str, Any]] = {}
    for pid in pids:
        try:
            env = psutil.Process(pid).environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        who: dict[str, Any] = {"role": "worker" if "LOCAL_RANK" in env else "launcher"}
        for key in ("RANK", "LOCAL_RANK"):
            if env.get(key, "").isdigit():
                who[key.lower()] = int(env[key])
        out[pid] = who
    return out


def _set_oom_adj(pids: list[int], adj: int, *, lower: bool) -> dict[int, str]:
    """Write ``oom_score_adj`` = ``adj`` on each process whose value it moves the asked way (down with ``lower``,
    else up); a process that is gone or refuses (lowering needs CAP_SYS_RESOURCE) keeps its own. Returns what each
    changed process had, for :func:`unbias`."""
    before: dict[int, str] = {}
    for pid in pids:
        path = Path(f"/proc/{pid}/oom_score_adj")
        try:
            old = path.read_text().strip()
            if (int(old) > adj) if lower else (int(old) < adj):
                path.write_text(str(adj))
                before[pid] = old
        except (OSError, ValueError):
            continue
    return before


def bias_victims(pids: list[int], adj: int) -> dict[int, str]:
    """Make these processes likelier OOM victims (``oom_score_adj`` raised to ``adj``; raising needs no privilege);
    returns what each had, for :func:`unbias`."""
    return _set_oom_adj(pids, adj, lower=False)


def shield(pids: list[int]) -> dict[int, str]:
    """Keep the OOM killer off these processes while the allocator pushes (``oom_score_adj -1000``; lowering it
    needs CAP_SYS_RESOURCE: where the engine lacks it they keep theirs); returns what each had, for
    :func:`unbias`. The node's launcher: a second kill before the first victim's memory is freed (measured on
    docker, 6.5 ms after the first) would otherwise take the largest process left, the launcher, and the node."""
    return _set_oom_adj(pids, -1000, lower=True)


def unbias(before: dict[int, str]) -> list[str]:
    """Give the survivors their ``oom_score_adj`` back; returns the processes where it did not read back."""
    problems = []
    for pid, old in before.items():
        path = Path(f"/proc/{pid}/oom_score_adj")
        try:
            path.write_text(old)
            if path.read_text().strip() != old:
                problems.append(f"pid {pid}: oom_score_adj {path.read_text().strip()}, was {old}")
        except FileNotFoundError:
            continue  # the victim: gone with its setting
        except OSError as exc:
            if Path(f"/proc/{pid}").exists():
                problems.append(f"pid {pid}: oom_score_adj not restored ({exc})")
    return problems


# ------------------------------------------------------------------------------------------ the allocator

def start_allocator(path: Path, nbytes: int, hold_s: float, protected: bool, run_id: str, fault_id: int,
                    log: Path, counter: Path | None = None, fallback_adj: int | None = None) -> subprocess.Popen[bytes]:
    """Start ``chaos.faults.allocator`` on the host, move it into the node's memory cgroup, then let it allocate.

    ``protected``: try oom_score_adj -1000, so the OOM killer picks one of the node's own processes, not it (a
    lower score needs CAP_SYS_RESOURCE, which a sandboxed root may lack: then it stays 0, and what makes the
    kernel pass it over is its size, small beside a worker's; ``proc.protected`` says which; ``fallback_adj``:
    what it gets instead, which raising needs no privilege for). It waits
    on its stdin for the go, so it allocates nothing outside the cgroup. Marked like the network delayers
    (``<run>/delayers/...``): teardown and ``chaos cleanup`` kill it with them.
    """
    env = {**os.environ, TREE_VAR: f"{run_id}/{DELAYERS}/memory{fault_id}", ENGINE_VAR: engine_mark()}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        argv = [sys.executable, "-m", "chaos.faults.allocator", str(nbytes), str(hold_s), str(os.getpid()),
                *([str(counter)] if counter is not None else [])]
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=fh, stderr=fh, start_new_session=True)
    proc.protected = False  # type: ignore[attr-defined]
    try:
        if protected:
            try:
                Path(f"/proc/{proc.pid}/oom_score_adj").write_text("-1000")
                proc.protected = True  # type: ignore[attr-defined]
            except PermissionError:
                if fallback_adj is not None:
                    Path(f"/proc/{proc.pid}/oom_score_adj").write_text(str(fallback_adj))
        (path / "cgroup.procs").write_text(str(proc.pid))
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    except BaseException:
        stop_allocator(proc)
        raise
    return proc


def stop_allocator(proc: subprocess.Popen[bytes] | None) -> int | None:
    """Kill the allocator (its memory goes with it); its exit code (-9 if the OOM killer took it first)."""
    if proc is None:
        return None
    code = proc.poll()
    if code is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=10)
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    return code


# ------------------------------------------------------------------------------------------ watching for kills

# How long a kill the cgroup's counter shows waits for its kernel log line before it is reported without one, and
# how long the last look before a heal waits for the lines still missing (OomWatch.poll).
LINE_WAIT_S = 3.0
FINAL_SETTLE_S = 1.0


@dataclass
class OomWatch:
    """Turns the kernel's record of one node's OOM kills into ``oom_killed`` events, each kill once."""

    mem: NodeMemory
    runtime: ResourceControl
    klog: KernelLog = field(default_factory=KernelLog)
    counted: int = 0  # the cgroup's oom_kill counter as last reported
    who: dict[int, dict[str, Any]] = field(default_factory=dict)
    allocator: int | None = None
    limit: int | None = None
    queued: list[dict[str, Any]] = field(default_factory=list)  # events seen during inject, written after it
    problems: list[str] = field(default_factory=list)  # what did not come back exactly, for the heal
    _pending: list[Kill] = field(default_factory=list)
    _next_look: float = 0.0
    _unmatched_since: float | None = None  # when the counter first showed a kill whose kernel line was not read
    _unmatched_wall: float | None = None  # the same moment on the wall clock (a blind kill's killed_at)
    _last_count: int = 0  # the counter as last read (the cgroup can go with its node before the kill is written)
    _blind: int = 0  # kills written without their line: that many late lines are theirs, not the next kill's
    _blind_until: float = 0.0  # wall time: a late line of a kill no later than this belongs to a blind one

    def __post_init__(self) -> None:
        self.counted = self._last_count = self.mem.oom_kills()
        self.refresh()

    def refresh(self) -> None:
        """Learn the node's processes while they live (a restarted worker is new); at most twice a second."""
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + 0.5
        with contextlib.suppress(Exception):
            self.who.update(identify(self.runtime.node_pids(self.mem.node)))

    def poll(self, fault_id: int, kind: str, settle_s: float = 0.0, final: bool = False) -> list[dict[str, Any]]:
        """New kills since the last poll; ``settle_s``: wait that long for the kernel's line of a counted kill.

        The cgroup's counter can move before the kernel's line of that kill is readable (a moment later; longer on a
        busy machine, measured in CI: a second kill counted with no line yet was recorded as ``role: unknown``). So
        a counted kill without its line is held back for up to LINE_WAIT_S and reported at a later poll with its
        victim; ``final`` (the last look before the heal) waits FINAL_SETTLE_S more and reports whatever is left."""
        now = time.monotonic()
        if self.mem.path.is_dir():
            self._last_count = max(self._last_count, self.mem.oom_kills())
        count = max(self.counted, self._last_count)  # a cgroup gone with its node keeps the kills it counted
        self._read_lines()
        new = count - self.counted
        deadline = now + max(settle_s, FINAL_SETTLE_S if final else 0.0)
        while new > len(self._pending) and time.monotonic() < deadline and self.klog.fd is not None:
            time.sleep(0.02)
            self._read_lines()
        if new > len(self._pending) and self._unmatched_since is None:
            self._unmatched_since, self._unmatched_wall = now, time.time()
        if new > len(self._pending) and self.klog.fd is not None and not final:
            if now - self._unmatched_since < LINE_WAIT_S:  # type: ignore[operator]  (set just above)
                new = len(self._pending)  # the rest at a later poll, with their lines
        waited = time.monotonic() - (self._unmatched_since or now)
        events = []
        before = self.counted
        for i in range(new):
            kill = self._pending.pop(0) if self._pending else None
            fields: dict[str, Any] = {"event": Ev.OOM_KILLED, "fault_id": fault_id, "kind": kind,
                                      "node": self.mem.node, "pid": kill.pid if kill else None,
                                      "killed_at": kill.t if kill else (self._unmatched_wall or time.time()),
                                      "limit_bytes": self.limit}
            if kill is not None:
                fields["comm"] = kill.comm
                role = ({"role": "allocator"} if kill.pid == self.allocator
                        else self.who.get(kill.pid, {"role": "unknown"}))
                fields.update(role)
            else:
                fields["role"] = "unknown"
                self._blind += 1
                self._blind_until = time.time()
            missing = ("no /dev/kmsg" if self.klog.fd is None else
                       f"none read within {waited:.1f} s of the count")
            fields["evidence"] = (f"{self.mem.path / self.mem.lay.events}: oom_kill {before + i} -> {before + i + 1}"
                                  + (f"; kernel: {kill.line}" if kill else f"; no kernel log line ({missing})"))
            events.append(fields)
        self.counted = before + new
        if self.counted >= count:
            self._unmatched_since = self._unmatched_wall = None
        # lines left over were read before the counter showed their kills: they are matched at the next poll
        self.refresh()
        return events

    def _read_lines(self) -> None:
        """This cgroup's new kernel lines, less the late lines of kills already written without one."""
        for kill in self.klog.kills():
            if not self._ours(kill):
                continue
            if self._blind and kill.t <= self._blind_until:
                self._blind -= 1  # its kill was written blind: matching it to the next kill would name a wrong victim
                continue
            self._pending.append(kill)

    def _ours(self, kill: Kill) -> bool:
        """A kill in this node's cgroup (other cgroups' OOMs on the machine are none of this fault's doing)."""
        if kill.memcg is not None:
            rel = "/" + str(self.mem.path.relative_to(self.mem.lay.mount()))
            return kill.memcg == rel or kill.memcg.endswith(rel)
        return kill.pid in self.who or kill.pid == self.allocator


