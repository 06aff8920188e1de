"""A node's memory cgroup (v1 or v2): made per node before it starts, its limit set and restored, its OOM counter.

The runtimes make and clean up the cgroups; the memory fault kinds (chaos.faults.membase) set the limit and
watch the kills. Kept out of chaos/faults so that the runtimes never import a fault kind.

**Why a cgroup per node from the start.** A process's pages stay charged to the cgroup they were faulted in: cgroup
v2 never moves charges, and v1's ``memory.move_charge_at_immigrate`` is a no-op on current kernels (measured here:
6.18 reads it back as 0). A cgroup made at injection time would hold none of the node's memory, and an OOM there
would kill one process after another without freeing a byte of it. So a run with a memory fault starts each local
node *inside* a cgroup of its own (``torch-chaos/<run id suffix>/<node>``, made by the local runtime before the
node starts), exactly as a container is: the limit then covers everything the node holds. A docker node's cgroup
is its container's. The limit is written to the cgroup files directly, for containers too: ``docker update``
cannot lift a limit back to none (the API refuses -1 and ignores 0), so it could not heal exactly.

Leftovers: every cgroup torch-chaos makes has an owner file in ``/run/torch-chaos/memory`` naming the engine, and
every limit it changes on a container's cgroup records the previous values there until healed, so ``chaos
cleanup`` moves orphaned processes back, removes the cgroups and restores the limits after an engine SIGKILL.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.machine import Check
from chaos.marks import leftover_owner_files

if TYPE_CHECKING:
    from chaos.runtimes.capability import ResourceControl

CGROUP_ROOT = Path("/sys/fs/cgroup")
OWNERS_DIR = Path("/run/torch-chaos/memory")
PARENT = "torch-chaos"
MiB = 1 << 20


# ------------------------------------------------------------------------------------------ cgroup files

@dataclass(frozen=True)
class Layout:
    """The file names of one cgroup version's memory controller."""

    version: int
    limit: str
    usage: str
    swap: str  # the swap limit (absent where swap accounting is off)
    events: str  # the file with the ``oom_kill`` counter
    unlimited: str  # what the limit file says with no limit

    def mount(self) -> Path:
        return CGROUP_ROOT / "memory" if self.version == 1 else CGROUP_ROOT


V1 = Layout(1, "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.memsw.limit_in_bytes", "memory.oom_control",
            "9223372036854771712")
V2 = Layout(2, "memory.max", "memory.current", "memory.swap.max", "memory.events", "max")


def layout() -> Layout | None:
    """The machine's memory controller: v2 if the unified hierarchy has it, else v1's, else None."""
    try:
        if "memory" in (CGROUP_ROOT / "cgroup.controllers").read_text().split():
            return V2
    except OSError:
        pass
    return V1 if (CGROUP_ROOT / "memory" / V1.limit).exists() else None


def proc_cgroup(pid: int, lay: Layout) -> Path:
    """The memory cgroup directory ``pid`` is in."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        if (lay.version == 2 and controllers == "") or (lay.version == 1 and "memory" in controllers.split(",")):
            return lay.mount() / rel.lstrip("/")
    raise RuntimeError(f"process {pid} is in no memory cgroup")


def read_counter(path: Path, key: str) -> int:
    """``key``'s value in a flat-keyed cgroup file (``oom_kill 3``); 0 when the kernel does not count it."""
    for line in path.read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def parse_limit(text: str, lay: Layout) -> int | None:
    text = text.strip()
    return None if text in ("max", lay.unlimited) or int(text) >= int(V1.unlimited) else int(text)


# ------------------------------------------------------------------------------------------ per-node cgroups (local)

def _owner(name: str) -> Path:
    return OWNERS_DIR / f"{name}.json"


def make_node_cgroups(run_id: str, nodes: list[str]) -> dict[str, Path]:
    """One memory cgroup per node for a local run, no limit yet: ``<base>/torch-chaos/<run>/<node>``.

    v1 nests them under the engine's own memory cgroup (accounting stays where the machine's owner put it); v2 puts
    them under the root (a v2 cgroup holding processes cannot have a child with the memory controller).
    """
    lay = layout()
    if lay is None:
        raise RuntimeError("no memory cgroup controller on this machine (neither cgroup v2 nor v1 memory)")
    base = proc_cgroup(os.getpid(), lay) if lay.version == 1 else CGROUP_ROOT
    run_dir = base / PARENT / run_id[-6:]
    OWNERS_DIR.mkdir(parents=True, exist_ok=True)
    _owner(f"run-{run_id[-6:]}").write_text(json.dumps(
        {"run_id": run_id, "engine_pid": os.getpid(), "path": str(run_dir), "home": str(base), "created": True,
         "version": lay.version}))
    made = {}
    for d in (base / PARENT, run_dir):
        d.mkdir(exist_ok=True)
        if lay.version == 2:
            with contextlib.suppress(OSError):
                (d / "cgroup.subtree_control").write_text("+memory")
    for node in nodes:
        (run_dir / node).mkdir(exist_ok=True)
        made[node] = run_dir / node
    return made


def remove_run_cgroup(run_dir: Path, home: Path) -> list[str]:
    """Move whatever still runs in a run's cgroups back to ``home`` and remove them; returns what it removed."""
    removed = []
    if not run_dir.is_dir():
        return removed
    for node in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        for _ in range(5):
            pids = (node / "cgroup.procs").read_text().split()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    (home / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            node.rmdir()
            removed.append(f"memory cgroup {node}")
    with contextlib.suppress(OSError):
        run_dir.rmdir()
    with contextlib.suppress(OSError):
        run_dir.parent.rmdir()  # the shared torch-chaos parent, once no run uses it
    return removed


# ------------------------------------------------------------------------------------------ one node's limit

@dataclass
class NodeMemory:
    """One node's memory cgroup while a memory fault acts on it: the limit it set and what was there before."""

    node: str
    lay: Layout
    path: Path
    owner: Path
    before: dict[str, str] = field(default_factory=dict)  # limit files as they were, to write back at heal

    @classmethod
    def of(cls, runtime: ResourceControl, node: str, fault_id: int) -> NodeMemory:
        lay = layout()
        if lay is None:
            raise RuntimeError("no memory cgroup controller on this machine (neither cgroup v2 nor v1 memory)")
        path = runtime.memory_cgroup(node)
        short = runtime.run_id[-6:]
        return cls(node, lay, Path(path), OWNERS_DIR / f"limit-{short}-{node}-f{fault_id}.json")

    def usage(self) -> int:
        return int((self.path / self.lay.usage).read_text())

    def anon(self) -> int:
        """Anonymous memory charged to the cgroup: what the kernel cannot reclaim without swap (page cache it can)."""
        key = "total_rss" if self.lay.version == 1 else "anon"
        return read_counter(self.path / "memory.stat", key)

    def limit(self) -> int | None:
        return parse_limit((self.path / self.lay.limit).read_text(), self.lay)

    def oom_kills(self) -> int:
        return read_counter(self.path / self.lay.events, "oom_kill")

    def _files(self) -> list[str]:
        """The limit files in the order a lower limit is written (v1's memsw must stay >= the memory limit)."""
        swap = [self.lay.swap] if (self.path / self.lay.swap).exists() else []
        return [self.lay.limit, *swap] if self.lay.version == 1 else [*swap, self.lay.limit]

    def set_limit(self, limit: int, run_id: str) -> None:
        """Limit the node's memory (and its swap: the OOM killer, not swapping, must answer) to ``limit`` bytes."""
        self.before = {name: (self.path / name).read_text().strip() for name in self._files()}
        OWNERS_DIR.mkdir(parents=True, exist_ok=True)
        self.owner.write_text(json.dumps({"run_id": run_id, "engine_pid": os.getpid(), "path": str(self.path),
                                          "before": self.before, "created": False}))
        for name in self._files():
            value = "0" if (self.lay.version == 2 and name == self.lay.swap) else str(limit)
            try:
                (self.path / name).write_text(value)
            except OSError as exc:
                restore_limits(self.path, self.before)
                self.owner.unlink(missing_ok=True)
                if exc.errno == errno.EBUSY:
                    raise RuntimeError(f"the kernel refused a limit of {limit} bytes on {self.path}: below what the "
                                       "node holds and cannot reclaim (cgroup v1 refuses such a limit instead of "
                                       "OOM-killing); give a larger limit, or none") from None
                raise

    def restore(self) -> dict[str, Any]:
        """Write the previous limits back (in the raising order) and check they read back exactly.

        A cgroup that is gone took the limit with it (a docker node whose launcher the OOM killer took: its
        container ended, and its replacement is a new container with a new cgroup): nothing this fault changed is
        left, so that is restored too, with the fact said."""
        self.owner.unlink(missing_ok=True)
        try:
            self.path.stat()
        except FileNotFoundError:  # only a cgroup that is not there any more is gone (EACCES is not "gone")
            return {"restored": True, "limit_gone_with_cgroup": f"{self.path} is gone (its node ended): the limit "
                    "went with it"}
        except OSError as exc:
            return {"restored": None, "problems": [f"{self.path}: not checked ({exc})"]}
        problems = restore_limits(self.path, self.before)
        return {"restored": not problems, **({"problems": problems} if problems else {})}


def restore_limits(path: Path, before: dict[str, str]) -> list[str]:
    problems = []
    if not path.is_dir():
        return [f"{path} is gone (the node was replaced or removed)"]
    for name in reversed(list(before)):
        try:
            (path / name).write_text(before[name])
        except OSError as exc:
            problems.append(f"{name}: {exc}")
    for name, value in before.items():
        now = (path / name).read_text().strip()
        if now != value:
            problems.append(f"{name} is {now}, was {value}")
    return problems


# ------------------------------------------------------------------------------------------ chaos cleanup

def cleanup(run_id: str | None, only_orphans: bool) -> list[str]:
    """Restore limits and remove cgroups an interrupted run left (owner files name them and their engine)."""
    removed: list[str] = []
    for owner, info in leftover_owner_files(OWNERS_DIR, run_id, only_orphans):
        path = Path(info.get("path", ""))
        if info.get("created"):
            removed += remove_run_cgroup(path, Path(info.get("home", "")))
            if path.is_dir():
                continue  # something still runs there that could not be moved: keep the owner file
        elif path.is_dir():
            problems = restore_limits(path, info.get("before", {}))
            removed.append(f"memory limit on {path} " + ("restored" if not problems else
                                                         f"NOT restored: {'; '.join(problems)}"))
        owner.unlink(missing_ok=True)
    return removed


def machine_checks() -> list[Any]:
    """``chaos doctor`` for the memory faults: a memory controller this process can make cgroups in."""

    lay = layout()
    if lay is None:
        return [Check("memory cgroup", False, "no memory cgroup controller (neither cgroup v2 nor v1 memory)",
                      "boot with the memory controller enabled (cgroup_enable=memory), or mount it")]
    base = proc_cgroup(os.getpid(), lay) if lay.version == 1 else CGROUP_ROOT
    writable = os.access(base, os.W_OK)
    return [Check("memory cgroup", writable, f"cgroup v{lay.version} memory controller, "
                  + (f"{base} writable" if writable else f"{base} not writable"),
                  "" if writable else "run as root, with the cgroup filesystem mounted read-write")]
