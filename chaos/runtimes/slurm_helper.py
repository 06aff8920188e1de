"""A tiny helper the Slurm runtime runs as a job step on one host, as the user: find and signal a node's processes.

A user on a Slurm cluster has no host-side view of a compute node (no ``/proc`` of it, no ``docker``). What the user
does have is a job step on that host, with the user's own rights: enough to read ``/proc`` of the user's own
processes and signal them. So the engine runs ``srun --overlap --jobid J -N1 -n1 -w HOST python -m
chaos.runtimes.slurm_helper ACTION MARK ...`` and reads one JSON line back.

The node's processes are found by their ``CHAOS_TREE`` mark (:mod:`chaos.marks`), which the step inherits; the
node's *root* processes (torchrun's agent) are the marked ones whose parent is not marked (slurmstepd is not), the
workers are the rest. Standard library only: it runs in whatever interpreter the compute nodes have.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

TREE_VAR = "CHAOS_TREE"  # chaos.marks.TREE_VAR, spelled here so the helper imports nothing from chaos


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) from ``/proc/<pid>/stat`` (the command name may hold spaces and parentheses)."""
    raw = _read(f"/proc/{pid}/stat").decode(errors="replace")
    if not raw:
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    return (rest[0], int(rest[1])) if len(rest) > 1 else None


def _environ(pid: int) -> dict[str, str]:
    out = {}
    for item in _read(f"/proc/{pid}/environ").split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def marked(mark: str) -> dict[int, dict[str, object]]:
    """Every process of this user on this host whose mark is ``mark`` (or under it): pid -> facts."""
    found: dict[int, dict[str, object]] = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        env = _environ(pid)
        value = env.get(TREE_VAR)
        if value is None or not (value == mark or value.startswith(mark + "/")):
            continue
        st = _stat(pid)
        if st is None:
            continue
        found[pid] = {"state": st[0], "ppid": st[1], "local_rank": env.get("LOCAL_RANK")}
    return found


def roots(procs: dict[int, dict[str, object]]) -> list[int]:
    """The marked processes whose parent is not marked: the step's own task (torchrun's agent)."""
    return sorted(p for p, facts in procs.items() if facts["ppid"] not in procs)


def _signal(pids: list[int], sig: int) -> list[int]:
    done = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            done.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    return done


def act(action: str, mark: str, sig: int, local_rank: int | None) -> dict[str, object]:
    procs = marked(mark)
    if action == "state":
        return {"processes": {str(p): f["state"] for p, f in procs.items()}}
    if action == "signal-all":
        # A tree may be mid-spawn: signal, look again, until no new process appears (as the local runtime does).
        signalled: set[int] = set()
        for _ in range(5):
            new = [p for p in marked(mark) if p not in signalled]
            if not new:
                break
            signalled.update(_signal(new, sig))
            time.sleep(0.05)
        return {"signalled": sorted(signalled)}
    if action == "kill-workers":
        agents = roots(procs)
        workers = [p for p in procs if p not in agents]
        if local_rank is not None:
            workers = [p for p in workers if procs[p]["local_rank"] == str(local_rank)]
        if not workers and local_rank is None:
            return {"signalled": _signal(agents, sig), "agents": agents, "no_launcher": True}
        return {"signalled": _signal(workers, sig), "agents": agents}
    raise SystemExit(f"unknown action {action!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.runtimes.slurm_helper")
    parser.add_argument("action", choices=["state", "signal-all", "kill-workers"])
    parser.add_argument("mark", help="the node's CHAOS_TREE mark, <run id>/<node>")
    parser.add_argument("--signal", type=int, default=int(signal.SIGKILL))
    parser.add_argument("--local-rank", type=int, default=None)
    args = parser.parse_args(argv)
    print(json.dumps({"host": os.uname().nodename, **act(args.action, args.mark, args.signal, args.local_rank)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
