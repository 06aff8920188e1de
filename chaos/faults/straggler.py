"""Straggler: one node runs ``slowdown``× slower for a while (a throttled CPU, a noisy neighbour, a degraded host).

A synchronous job runs at the pace of its slowest rank: every all-reduce waits for it. So a node that computes N×
slower slows the whole job, though every other node is healthy, and nothing fails: no timeout, no restart. What a
user needs to see is how much the job slowed (``slowdown``, ``goodput``) and which node did it, which the per-rank
step timing in the history tells (``chaos.analysis.step_timing``: time outside the collectives per rank).

How: the kernel's CFS bandwidth control caps the node's CPU time at ``share / slowdown`` CPUs, where ``share`` is
what the node may use before the fault: its own quota if it has one (a container's), else the CPUs this engine may
use divided among the nodes of the plan (they share this host). The period is 20 ms (longer only where the quota
would fall under the kernel's 1 ms minimum), short enough that a step of a few tens of milliseconds is slowed
evenly rather than stopped for most of a 100 ms period.

- A runtime with a CPU quota of its own per node (docker: the container's; ``Runtime.cpu_quota``) gets it set with
  its own call (``docker update --cpu-quota --cpu-period``) and set back at heal. Docker ignores a quota of 0
  ("unchanged"), so a container that had none gets the kernel's "none" (-1) back, with the kernel's period: the
  cgroup reads back exactly as before, docker's record says -1/100000 where it said unset (same effect).
- Otherwise the node's processes (``Runtime.node_pids``: local, netns) are moved into a cpu cgroup of their own,
  ``torch-chaos/<run id suffix>/<node>-cpu`` (cgroup v1: under the engine's own cpu cgroup; v2: under the root,
  where the node stays in the per-node cgroup a memory fault made for it, if it has one, and the quota is written
  there). Unlike memory, CPU time is not charged at the time a page was touched, so a cgroup made at injection
  covers the node at once; processes the node starts while capped (a restarted worker) are born inside. Heal moves
  every process back to the cgroup it came from (those born inside go where the node's first process came from)
  and removes the cgroup; ``restored`` says whether every live process of the node is back where it was.

The kernel's own record of the cap acting (``cpu.stat``: periods throttled and time throttled) goes into the
``fault_healed`` event. Leftovers: every cgroup or quota the fault changes has an owner file in
``/run/torch-chaos/cpu`` naming the engine and what was there before, written before the change, so ``chaos
cleanup`` moves orphaned processes back, removes the cgroups and restores quotas after an engine SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from chaos.capabilities import CPU_QUOTA
from chaos.events import Ev
from chaos.faults.base import FaultContext, FaultKind, draw_duration, tenths
from chaos.machine import Check
from chaos.marks import leftover_owner_files
from chaos.runtimes.base import Unsupported
from chaos.spec import FaultSpec, Strict

if TYPE_CHECKING:
    from chaos.machine import Check

CGROUP_ROOT = Path("/sys/fs/cgroup")
OWNERS_DIR = Path("/run/torch-chaos/cpu")
PARENT = "torch-chaos"
PERIOD_US = 20_000
MIN_QUOTA_US = 1_000  # the kernel refuses a CFS quota under 1 ms
MAX_PERIOD_US = 1_000_000  # ... and a period over 1 s


# ------------------------------------------------------------------------------------------ cgroup files

@dataclass(frozen=True)
class CpuLayout:
    """The machine's cpu controller: cgroup v1 (``cpu.cfs_quota_us`` + ``cpu.cfs_period_us``) or v2 (``cpu.max``)."""

    version: int
    mount: Path

    def read(self, path: Path) -> tuple[int, int]:
        """(quota µs, -1 = none; period µs) of the cgroup at ``path``."""
        if self.version == 1:
            return (int((path / "cpu.cfs_quota_us").read_text()), int((path / "cpu.cfs_period_us").read_text()))
        quota, period = (path / "cpu.max").read_text().split()
        return (-1 if quota == "max" else int(quota)), int(period)

    def write(self, path: Path, quota: int, period: int) -> None:
        if self.version == 1:  # the period first: a quota is judged against the period in place
            (path / "cpu.cfs_period_us").write_text(str(period))
            (path / "cpu.cfs_quota_us").write_text(str(quota if quota > 0 else -1))
        else:
            (path / "cpu.max").write_text(f"{quota if quota > 0 else 'max'} {period}")

    def throttled(self, path: Path) -> tuple[int, int, float]:
        """The kernel's count of the cap acting: (periods, periods throttled, seconds throttled)."""
        stat: dict[str, int] = {}
        with contextlib.suppress(OSError, ValueError):
            for line in (path / "cpu.stat").read_text().splitlines():
                name, _, value = line.partition(" ")
                stat[name] = int(value)
        seconds = stat.get("throttled_time", 0) / 1e9 if self.version == 1 else stat.get("throttled_usec", 0) / 1e6
        return stat.get("nr_periods", 0), stat.get("nr_throttled", 0), seconds

    def cgroup_of(self, pid: int) -> Path:
        """The cpu cgroup directory ``pid`` is in."""
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, rel = line.split(":", 2)
            if (self.version == 2 and controllers == "") or (self.version == 1 and "cpu" in controllers.split(",")):
                return self.mount / rel.lstrip("/")
        raise RuntimeError(f"process {pid} is in no cpu cgroup")


def cpu_layout(mounts_text: str | None = None) -> CpuLayout | None:
    """v2 if a unified hierarchy has the cpu controller, else v1's cpu hierarchy (wherever each is mounted).

    The unified hierarchy is ``/sys/fs/cgroup`` on a v2 host but ``/sys/fs/cgroup/unified`` on a hybrid one, where a
    controller no v1 hierarchy holds shows up there; so both are looked for by mount, not by path.
    ``mounts_text``: /proc/self/mounts' text (tests give their own)."""
    mounts: list[tuple[str, Path, list[str]]] = []
    with contextlib.suppress(OSError):
        text = Path("/proc/self/mounts").read_text() if mounts_text is None else mounts_text
        for line in text.splitlines():
            parts = line.split()
            if len(parts) > 3 and parts[2] in ("cgroup", "cgroup2"):
                mounts.append((parts[2], Path(parts[1]), parts[3].split(",")))
    for unified in [CGROUP_ROOT, *(point for kind, point, _ in mounts if kind == "cgroup2")]:
        with contextlib.suppress(OSError):
            if "cpu" in (unified / "cgroup.controllers").read_text().split():
                return CpuLayout(2, unified)
    for kind, point, options in mounts:
        if kind == "cgroup" and "cpu" in options:
            return CpuLayout(1, point)
    return None


def quota_for(share_cpus: float, slowdown: float) -> tuple[int, int]:
    """(quota µs, period µs) giving ``share_cpus / slowdown`` CPUs, within the kernel's bounds."""
    cpus = share_cpus / slowdown
    period = PERIOD_US
    if cpus * period < MIN_QUOTA_US:
        period = min(MAX_PERIOD_US, math.ceil(MIN_QUOTA_US / cpus))
    return max(MIN_QUOTA_US, round(cpus * period)), period


def _move(pid: int, cgroup: Path) -> bool:
    try:
        (cgroup / "cgroup.procs").write_text(str(pid))
        return True
    except OSError:  # gone meanwhile
        return False


def _procs(cgroup: Path) -> list[int]:
    try:
        return [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _empty_and_remove(path: Path, home: Path, homes: dict[str, str]) -> list[str]:
    """Move whatever runs in ``path`` back where it came from and remove it (and its parents once unused)."""
    problems = []
    for _ in range(10):
        pids = _procs(path)
        if not pids:
            break
        for pid in pids:
            target = Path(homes.get(str(pid), str(home)))
            if not _move(pid, target if target.is_dir() else home):
                _move(pid, home)
        time.sleep(0.01)
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        problems.append(f"{path} not removed ({exc}): still holds {_procs(path)}")
    for parent in (path.parent, path.parent.parent):  # the run's directory, then the shared torch-chaos one
        with contextlib.suppress(OSError):
            parent.rmdir()
    return problems


# ------------------------------------------------------------------------------------------ one node's cap

@dataclass
class NodeCpu:
    """One node's CPU cap while a straggler acts: where it was written, and what to give back."""

    node: str
    owner: Path
    lay: CpuLayout | None
    path: Path | None = None  # the cgroup whose quota was written (ours, the node's own, or the container's)
    created: bool = False  # the fault made ``path`` and moved the node's processes in
    home: Path | None = None  # where a process born inside goes back to
    homes: dict[str, str] = field(default_factory=dict)  # pid → the cgroup it was in (created)
    before: tuple[int, int] | None = None  # the cgroup's quota and period before (in place, container)
    runtime_before: tuple[int, int] | None = None  # the runtime's own record of the quota before (container)
    stat_before: tuple[int, int, float] = (0, 0, 0.0)
    cap: tuple[int, int] = (0, 0)  # the quota and period the fault set
    earlier: tuple[int, int, float] = (0, 0, 0.0)  # throttling counted in a replaced node's cgroup (container)
    next_look: float = 0.0  # observe's rate limit (monotonic)
    reported: set[int] = field(default_factory=set)  # pids already reported as not capped (in place)

    def save(self, run_id: str) -> None:
        OWNERS_DIR.mkdir(parents=True, exist_ok=True)
        self.owner.write_text(json.dumps({
            "run_id": run_id, "engine_pid": os.getpid(), "node": self.node, "path": str(self.path),
            "created": self.created, "home": str(self.home), "homes": self.homes, "before": self.before,
            "version": self.lay.version if self.lay else None, "mount": str(self.lay.mount) if self.lay else None}))

    def stats(self) -> dict[str, Any]:
        if self.lay is None or self.path is None or not self.path.is_dir():
            return {}
        periods, throttled, seconds = self.lay.throttled(self.path)
        p0, t0, s0 = self.stat_before
        e0, e1, e2 = self.earlier
        return {"periods": periods - p0 + e0, "throttled_periods": throttled - t0 + e1,
                "throttled_s": round(seconds - s0 + e2, 3)}


def _node_home(lay: CpuLayout, run_id: str, node: str, homes: dict[str, str]) -> tuple[Path, bool]:
    """The cgroup to cap: on v2 the node's own (a memory fault's per-node cgroup) when every process is in it
    (in place), else a new one of the fault's."""
    if lay.version == 2:
        own = {Path(h) for h in homes.values()}
        mine = lay.mount / PARENT / run_id[-6:] / node
        if own == {mine}:
            return mine, False
        return lay.mount / PARENT / run_id[-6:] / f"{node}-cpu", True
    base = lay.cgroup_of(os.getpid())
    return base / PARENT / run_id[-6:] / f"{node}-cpu", True


def _enable_cpu(lay: CpuLayout, path: Path) -> None:
    """v2: the cpu controller enabled from the root down to ``path``'s parent (so ``path`` has ``cpu.max``)."""
    if lay.version != 2:
        return
    d = lay.mount
    for part in path.relative_to(lay.mount).parts:
        with contextlib.suppress(OSError):
            (d / "cgroup.subtree_control").write_text("+cpu")
        d = d / part


def _share(lay: CpuLayout | None, nodes: int) -> tuple[float, str]:
    """The CPUs a node of this host may use when nothing caps it: this engine's CPUs (its affinity, and its cgroup's
    quota if any) divided among the plan's nodes."""
    cpus = float(len(os.sched_getaffinity(0)))
    text = f"{cpus:g} CPUs"
    if lay is not None:
        with contextlib.suppress(Exception):
            quota, period = lay.read(lay.cgroup_of(os.getpid()))
            if 0 < quota < cpus * period:
                cpus, text = quota / period, f"the engine's cgroup quota {quota / period:g} CPUs"
    return cpus / nodes, f"{text} / {nodes} node(s)"


LOOK_S = 0.2  # how often observe looks for a replaced node (each look lists the node's processes)


def _started(pids: list[int]) -> float | None:
    """When the earliest of these processes started (host clock), None when none can be read."""
    import psutil

    times = []
    for pid in pids:
        with contextlib.suppress(Exception):
            times.append(psutil.Process(pid).create_time())
    return min(times) if times else None


def _since(t: float | None) -> float | None:
    return None if t is None else round(max(0.0, time.time() - t), 3)


def _in(lay: CpuLayout, pid: int) -> Path | None:
    try:
        return lay.cgroup_of(pid)
    except Exception:
        return None


class StragglerOptions(FaultSpec):
    DURATION: ClassVar = "optional"
    EXAMPLES: ClassVar = {"slowdown": "slowdown: 4"}
    kind: Literal["straggler"]
    slowdown: float = Field(gt=1, le=1000, description="how many times slower the node runs: its CPU quota is "
                            "its share of the CPUs divided by this (e.g. 4)")


class StragglerExplore(Strict):
    """``explore.straggler``: the stragglers ``chaos explore`` may generate (durations from explore.durations)."""

    slowdowns: tuple[float, float] = Field((2.0, 8.0), description="slowdown factors are drawn from this range "
                                           "(in tenths)")

    @model_validator(mode="after")
    def _check(self) -> StragglerExplore:
        low, high = self.slowdowns
        if not 1 < low <= high <= 1000 or tenths(low, high) is None:
            raise ValueError("slowdowns: expected [low, high] with 1 < low <= high <= 1000 and a multiple of 0.1 "
                             f"between them, got [{low}, {high}]")
        return self


class Straggler(FaultKind):
    kind = "straggler"
    options = StragglerOptions
    summary = "the node runs `slowdown`× slower (CPU quota: cpu cgroup or container quota) while the others wait"
    needs = frozenset({CPU_QUOTA})
    lasts_until_healed = True
    colour = "#bcbd22"
    explore_options = StragglerExplore

    def inject(self, ctx: FaultContext) -> str:
        assert ctx.node is not None and ctx.plan is not None
        spec: StragglerOptions = ctx.spec
        rt = ctx.runtime
        lay = cpu_layout()
        cpu = NodeCpu(ctx.node, OWNERS_DIR / f"{rt.run_id[-6:]}-{ctx.node}-f{ctx.fault_id}.json", lay)
        try:
            own: tuple[int, int] | None = rt.cpu_quota(ctx.node)
        except Unsupported:
            own = None
        share, basis = _share(lay, len(ctx.plan.nodes))
        if own is not None and own[0] > 0 and own[1] > 0:
            share, basis = own[0] / own[1], "the node's own CPU quota"
        quota, period = quota_for(share, spec.slowdown)
        cpu.cap = (quota, period)
        ctx.handles.append(cpu)
        if own is not None:  # the runtime's own quota (a container's)
            cpu.runtime_before = own
            with contextlib.suppress(Exception):
                if lay is not None:
                    cpu.path = lay.cgroup_of(rt.node_pids(ctx.node)[0])
                    cpu.before = lay.read(cpu.path)
                    cpu.stat_before = lay.throttled(cpu.path)
            cpu.save(rt.run_id)
            try:
                how = rt.set_cpu_quota(ctx.node, quota, period)
            except BaseException:
                self._restore(ctx, cpu)
                raise
        else:
            if lay is None:
                raise RuntimeError("no cpu cgroup controller on this machine (neither cgroup v2 cpu nor v1 cpu)")
            homes: dict[str, str] = {}
            for pid in sorted(rt.node_pids(ctx.node)):
                with contextlib.suppress(OSError, RuntimeError):  # gone meanwhile
                    homes[str(pid)] = str(lay.cgroup_of(pid))
            if not homes:
                raise RuntimeError(f"no process of {ctx.node} is alive: the straggler acted on nothing")
            cpu.path, cpu.created = _node_home(lay, rt.run_id, ctx.node, homes)
            cpu.home = Path(next(iter(homes.values())))  # the node's first (lowest) pid's: its launcher's
            try:
                if cpu.created:
                    cpu.homes = homes
                    cpu.save(rt.run_id)  # before anything changes: cleanup can undo a half-done injection
                    _enable_cpu(lay, cpu.path)
                    cpu.path.mkdir(parents=True, exist_ok=True)
                    lay.write(cpu.path, quota, period)
                    moved: set[int] = set()
                    for _ in range(5):  # again until no new process appears (a launcher may be mid-spawn)
                        new = sorted(set(rt.node_pids(ctx.node)) - moved)
                        if not new:
                            break
                        for pid in new:
                            with contextlib.suppress(Exception):
                                cpu.homes.setdefault(str(pid), str(lay.cgroup_of(pid)))
                            _move(pid, cpu.path)
                        moved.update(new)
                    if not _procs(cpu.path):
                        raise RuntimeError(f"no process of {ctx.node} could be moved into {cpu.path}: the straggler "
                                           "acted on nothing")
                    cpu.save(rt.run_id)
                    how = (f"{len(moved)} processes moved into cpu cgroup v{lay.version} "
                           f"{cpu.path.relative_to(lay.mount)}")
                else:
                    _enable_cpu(lay, cpu.path)
                    cpu.before = lay.read(cpu.path)
                    cpu.save(rt.run_id)
                    lay.write(cpu.path, quota, period)
                    how = f"the node's own cgroup v{lay.version} {cpu.path.relative_to(lay.mount)}"
            except BaseException:
                self._restore(ctx, cpu)
                raise
            cpu.stat_before = lay.throttled(cpu.path)
        ctx.details.update({"slowdown": spec.slowdown, "share_cpus": round(share, 4), "share_basis": basis,
                            "quota_us": quota, "period_us": period, "quota_cpus": round(quota / period, 4),
                            "cgroup": str(cpu.path) if cpu.path else None,
                            "cgroup_version": lay.version if lay else None})
        return (f"CPU quota {quota}/{period} µs ({quota / period:.3g} CPUs = {share:.3g} / {spec.slowdown:g}; share: "
                f"{basis}) on {ctx.node}: {how}")

    def observe(self, ctx: FaultContext) -> list[dict[str, Any]]:
        """The cap belongs to the node for the fault's duration: a replacement (node_restart after a crash) is
        capped as the node was, within one look (every LOOK_S) of its first process; the ``fault_node_replaced``
        event says so with the uncapped time measured, or says why the cap ended early."""
        cpu = next((h for h in ctx.handles if isinstance(h, NodeCpu)), None)
        if cpu is None or ctx.node is None or time.monotonic() < cpu.next_look:
            return []
        cpu.next_look = time.monotonic() + LOOK_S
        rt = ctx.runtime
        base = {"event": Ev.FAULT_NODE_REPLACED, "fault_id": ctx.fault_id, "kind": self.kind, "node": ctx.node}
        if cpu.runtime_before is not None:  # the runtime's own quota: a replaced container starts without it
            try:
                now = rt.cpu_quota(ctx.node)
                pids = rt.node_pids(ctx.node)
            except Exception:  # the node is between containers: look again next time
                return []
            if now == cpu.cap or not pids:
                return []
            started = _started(pids)
            if cpu.lay is not None and cpu.path is not None and cpu.path.is_dir():
                with contextlib.suppress(Exception):  # keep what the replaced container was throttled
                    (p, t, s), (p0, t0, s0), (e0, e1, e2) = cpu.lay.throttled(cpu.path), cpu.stat_before, cpu.earlier
                    cpu.earlier = (e0 + p - p0, e1 + t - t0, e2 + s - s0)
            with contextlib.suppress(Exception):
                if cpu.lay is not None:
                    cpu.path = cpu.lay.cgroup_of(pids[0])
                    cpu.before = cpu.lay.read(cpu.path)
                    cpu.stat_before = cpu.lay.throttled(cpu.path)
            cpu.save(rt.run_id)
            try:
                how = rt.set_cpu_quota(ctx.node, *cpu.cap)
            except Exception as exc:
                return [{**base, "reapplied": False, "pids": pids, "why": f"the runtime could not cap the "
                         f"replacement ({exc}): the cap ended early"}]
            return [{**base, "reapplied": True, "pids": pids, "mechanism": how, "after_s": _since(started)}]
        if cpu.lay is None or cpu.path is None:
            return []
        outside = []
        for pid in sorted(rt.node_pids(ctx.node)):
            with contextlib.suppress(Exception):
                if cpu.lay.cgroup_of(pid) != cpu.path:
                    outside.append(pid)
        if not cpu.created:  # in place (the node's own v2 cgroup): a replacement lands where its runtime puts it
            new = [p for p in outside if p not in cpu.reported]
            cpu.reported.update(new)
            return [{**base, "reapplied": False, "pids": new, "why": f"the cap was written in place on "
                     f"{cpu.path}, and the replacement runs outside it: the cap ended early for it"}] if new else []
        if not outside:
            return []
        started = _started(outside)
        moved: list[int] = []
        for _ in range(5):  # again until no new process appears (the replacement's launcher may be mid-spawn)
            for pid in outside:
                with contextlib.suppress(Exception):
                    cpu.homes.setdefault(str(pid), str(cpu.lay.cgroup_of(pid)))
                    if _move(pid, cpu.path):
                        moved.append(pid)
            cpu.save(rt.run_id)  # cleanup after an engine SIGKILL moves them back too
            outside = [p for p in rt.node_pids(ctx.node) if p not in moved and _in(cpu.lay, p) != cpu.path]
            if not outside:
                break
        if not moved:
            return []
        return [{**base, "reapplied": True, "pids": moved, "after_s": _since(started),
                 "mechanism": f"{len(moved)} processes of the replacement moved into cpu cgroup v{cpu.lay.version} "
                              f"{cpu.path.relative_to(cpu.lay.mount)}"}]

    def heal(self, ctx: FaultContext) -> dict[str, Any] | None:
        cpu = next(h for h in ctx.handles if isinstance(h, NodeCpu))
        stats = cpu.stats()
        return {**self._restore(ctx, cpu), **({"throttled": stats} if stats else {})}

    def _restore(self, ctx: FaultContext, cpu: NodeCpu) -> dict[str, Any]:
        """Everything back as it was before the injection; ``restored`` says whether it reads back exactly."""
        problems: list[str] = []
        facts: dict[str, Any] = {}
        rt = ctx.runtime
        if cpu.runtime_before is not None:
            try:
                rt.set_cpu_quota(cpu.node, *cpu.runtime_before)
            except Exception as exc:  # the container is gone (replaced, removed): nothing left to restore
                problems.append(f"the runtime could not set the quota back ({exc})")
            if cpu.lay is not None and cpu.path is not None and cpu.before is not None and cpu.path.is_dir():
                now = cpu.lay.read(cpu.path)
                if now != cpu.before:
                    problems.append(f"{cpu.path}: quota/period {now}, was {cpu.before}")
            with contextlib.suppress(Exception):
                after = rt.cpu_quota(cpu.node)
                if after != cpu.runtime_before:
                    facts["runtime_record"] = (f"{after[0]}/{after[1]} (was {cpu.runtime_before[0]}/"
                                               f"{cpu.runtime_before[1]}: no quota either way)")
        elif cpu.created and cpu.lay is not None and cpu.path is not None and cpu.home is not None:
            problems += _empty_and_remove(cpu.path, cpu.home, cpu.homes)
            with contextlib.suppress(Exception):
                for pid in rt.node_pids(cpu.node):
                    with contextlib.suppress(Exception):
                        now = cpu.lay.cgroup_of(pid)
                        want = Path(cpu.homes.get(str(pid), str(cpu.home)))
                        if now != want:
                            problems.append(f"pid {pid} is in {now}, was in {want}")
        elif cpu.lay is not None and cpu.path is not None and cpu.before is not None:
            if not cpu.path.is_dir():
                problems.append(f"{cpu.path} is gone (the node was replaced or removed)")
            else:
                try:
                    cpu.lay.write(cpu.path, *cpu.before)
                except OSError as exc:
                    problems.append(f"{cpu.path}: {exc}")
                now = cpu.lay.read(cpu.path)
                if now != cpu.before:
                    problems.append(f"{cpu.path}: quota/period {now}, was {cpu.before}")
        cpu.owner.unlink(missing_ok=True)
        return {"restored": not problems, **({"problems": problems} if problems else {}), **facts}

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        """After an engine SIGKILL: the node processes back where they were, our cgroups gone, quotas restored."""
        removed: list[str] = []
        for owner, info in leftover_owner_files(OWNERS_DIR, run_id, only_orphans):
            path = Path(info.get("path") or "/nonexistent")
            if info.get("created"):
                problems = _empty_and_remove(path, Path(info.get("home", "")), info.get("homes") or {})
                removed.append(f"cpu cgroup {path}" + (f" NOT removed: {'; '.join(problems)}" if problems else ""))
                if path.is_dir():
                    continue  # something still runs there that could not be moved: keep the owner file
            elif info.get("before") and path.is_dir() and info.get("version"):
                lay = CpuLayout(int(info["version"]), Path(info.get("mount") or CGROUP_ROOT))
                quota, period = info["before"]
                try:
                    lay.write(path, quota, period)
                    ok = lay.read(path) == (quota, period)
                except OSError:
                    ok = False
                removed.append(f"cpu quota on {path} " + ("restored" if ok else "NOT restored"))
            owner.unlink(missing_ok=True)
        return removed

    @classmethod
    def machine_checks(cls) -> list[Check]:
        lay = cpu_layout()
        if lay is None:
            return [Check("cpu cgroup", False, "no cpu cgroup controller (neither cgroup v2 cpu nor v1 cpu)",
                          "boot with the cpu controller enabled, or mount it")]
        base = lay.cgroup_of(os.getpid()) if lay.version == 1 else lay.mount
        writable = os.access(base, os.W_OK)
        return [Check("cpu cgroup", writable, f"cgroup v{lay.version} cpu controller, "
                      + (f"{base} writable" if writable else f"{base} not writable"),
                      "" if writable else "run as root, with the cgroup filesystem mounted read-write")]

    @classmethod
    def describe(cls, spec: Any) -> str:
        return f"{spec.slowdown:g}× slower (CPU quota = its share / {spec.slowdown:g})" + (
            f" for {spec.duration:g}s" if spec.duration is not None else " until teardown")

    @classmethod
    def generate(cls, draw: Any, bounds: Any) -> dict[str, Any]:
        from hypothesis import strategies as st

        low, high = tenths(*cls.explore_bounds(bounds).slowdowns) or (20, 20)  # validation refuses no tenth
        return {"slowdown": draw(st.integers(low, high)) / 10, "duration": draw_duration(draw, bounds)}
