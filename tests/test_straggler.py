"""The straggler fault kind and the per-rank step timing that names the slow node (fast tier).

Analysis on hand-built histories (a synchronous job: every rank's step lasts as long as the slowest one's); the
fault's quota arithmetic, options and cleanup; and, where this machine has a writable cpu cgroup, the cap on a real
process tree, healed exactly and cleaned up after a dead engine.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from chaos import probe
from chaos.analysis.load import load_events
from chaos.analysis.result_json import RESULT_SCHEMA_VERSION, build_result
from chaos.analysis.result_model import FaultResult, ResultModel
from chaos.analysis.step_timing import step_timings
from chaos.events import Ev, Source, required_fields
from chaos.faults import straggler
from chaos.faults.base import FaultContext
from chaos.loading import parse_scenario
from chaos.reports.text import slow_node_line, step_timing_rows
from chaos.runtimes.base import Unsupported

T0 = 1000.0


def history(during: dict[int, dict[str, float]], steps: int = 30, dt: float = 0.1, slow: float = 3.0,
            fields: tuple[str, ...] = ("comm_s", "cpu_s", "cpu_wait_s"), heal: bool = True) -> list[dict[str, Any]]:
    """Three ranks (rank r on node r) stepping every ``dt``; a fault on node1 for ``steps`` steps during which every
    step takes ``slow`` × as long, and each rank's figures are ``during[rank]`` (shares of the step); before and after,
    every rank computes 10% of a step, waits for a CPU 5% and spends 85% in the collectives."""
    events: list[dict[str, Any]] = [{"t": T0, "source": Source.ENGINE, "event": Ev.RUN_STARTED, "run_id": "r"}]
    t, step = T0, 0
    normal = {"compute": 0.1, "wait": 0.05, "cpu": 0.3}

    def run(n: int, length: float, shares: dict[int, dict[str, float]] | None) -> None:
        nonlocal t, step
        for _ in range(n):
            t += length
            step += 1
            for r in range(3):
                share = (shares or {}).get(r, normal)
                e = {"t": t, "source": Source.WORKLOAD, "event": Ev.STEP_COMPLETED, "node": f"node{r}", "pid": 10 + r,
                     "rank": r, "world_size": 3, "step": step, "loss": 1.0 / step, "duration_s": length}
                values = {"comm_s": length * (1 - share["compute"]), "cpu_s": length * share["cpu"],
                          "cpu_wait_s": length * share["wait"]}
                e.update({k: v for k, v in values.items() if k in fields})
                events.append(e)

    run(steps, dt, None)
    t += 0.001
    events.append({"t": t, "source": Source.ENGINE, "event": Ev.FAULT_INJECTED, "fault_id": 0, "kind": "straggler",
                   "target": "node1", "mechanism": "test", "disruptive": True})
    run(steps, dt * slow, during)
    t += 0.001
    if heal:
        events.append({"t": t, "source": Source.ENGINE, "event": Ev.FAULT_HEALED, "fault_id": 0, "kind": "straggler"})
    run(steps, dt, None)
    events.append({"t": t + 0.01, "source": Source.WORKLOAD, "event": Ev.RUN_FINISHED, "node": "node0", "pid": 10,
                   "rank": 0, "step": step, "state_sha256": "s"})
    events.append({"t": t + 0.5, "source": Source.ENGINE, "event": Ev.RUN_ENDED, "reason": "completed",
                   "why": "completed"})
    return events


OTHERS = {"compute": 0.04, "wait": 0.03, "cpu": 0.1}  # while waiting for the straggler: mostly in the collectives
STARVED = {0: OTHERS, 1: {"compute": 0.1, "wait": 0.7, "cpu": 0.1}, 2: OTHERS}
SLOW_COMPUTE = {0: OTHERS, 1: {"compute": 0.5, "wait": 0.05, "cpu": 0.5}, 2: OTHERS}

SCENARIO = """\
name: t
cluster: {nodes: 3, min_nodes: 2}
workload: {name: ddp-mlp, args: {steps: 90}}
faults: [{kind: straggler, target: 1, at_step: 30, slowdown: 4, duration: 9s}]
expect: {slowdown: {min: 1.5}}
checks: {golden: false}
"""


def timing(events: list[dict[str, Any]]) -> dict[str, Any]:
    result = build_result(Path("/nonexistent"), parse_scenario(SCENARIO), events, None)
    assert result["schema_version"] == RESULT_SCHEMA_VERSION >= 8  # step_timing came with 8
    return result["faults"][0]


def test_the_rank_starved_of_cpu_is_named_from_its_wait_for_a_cpu() -> None:
    fault = timing(history(STARVED))
    st = fault["step_timing"]
    assert (st["slow_node"], st["slow_rank"], st["signal"], st["slow_is_target"]) == ("node1", 1, "cpu_wait", True)
    # on CPU 30% and waiting 5% of a step before (86% of what it asked for); 10% and 70% during (12.5%)
    assert st["cpu_slowdown"] == pytest.approx((0.3 / 0.35) / (0.1 / 0.8), rel=1e-3)
    ranks = {x["rank"]: x for x in st["ranks"]}
    assert ranks[1]["during"]["starved"] == pytest.approx(0.7) and ranks[0]["during"]["starved"] == pytest.approx(0.03)
    assert ranks[1]["before"]["steps"] == ranks[1]["during"]["steps"] == 30
    assert ranks[0]["during"]["step_s"] == pytest.approx(0.3) and ranks[0]["after"]["step_s"] == pytest.approx(0.1)
    assert [n["node"] for n in st["nodes"]] == ["node0", "node1", "node2"]
    assert fault["slowdown"] == pytest.approx(3.0, rel=0.05)  # the job's: every rank's step took 3× as long
    line = slow_node_line(FaultResult.from_dict(fault))
    assert line is not None and line.startswith("node1 rank 1 (the fault's target)") and "0.70 s per second" in line
    rows = step_timing_rows(st)
    assert rows[1][0] == "1 ◀ slow" and rows[1][3] == "0.05 / 0.70 / 0.05" and rows[0][2] == "100.0 / 300.0 / 100.0"


def test_without_the_probe_s_cpu_figures_the_time_outside_the_collectives_names_it() -> None:
    st = timing(history(SLOW_COMPUTE, fields=("comm_s",)))["step_timing"]
    assert (st["slow_node"], st["signal"]) == ("node1", "compute")
    assert st["compute_slowdown"] == pytest.approx(0.5 * 3 / 0.1) and st["cpu_slowdown"] is None


def test_step_durations_alone_name_no_one_and_say_why() -> None:
    st = timing(history(STARVED, fields=()))["step_timing"]
    assert st["slow_node"] is None and st["signal"] is None and st["why"].startswith("not measured")
    assert "no slow node named" in (slow_node_line(FaultResult(0, "straggler", "node1", extra={"step_timing": st}))
                                    or "")


def test_no_rank_stands_out_when_all_wait_alike() -> None:
    alike = {r: {"compute": 0.1, "wait": 0.4, "cpu": 0.2} for r in range(3)}
    st = timing(history(alike))["step_timing"]
    assert st["slow_node"] is None and st["why"].startswith("no rank stands out")


def test_a_fault_without_an_end_gets_no_step_timing() -> None:
    assert "step_timing" not in timing(history(STARVED, heal=False))


def test_loaded_history_gives_the_same_timing(tmp_path: Path) -> None:
    events = history(STARVED)
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    faults = [{"id": 0, "injected": True, "target": "node1",
               "t_injected": next(e["t"] for e in events if e["event"] == Ev.FAULT_INJECTED),
               "t_healed": next(e["t"] for e in events if e["event"] == Ev.FAULT_HEALED)}]
    assert step_timings(load_events(path), faults) == step_timings(events, faults)


def test_the_probe_reports_cpu_time_and_wait_per_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("CHAOS_EVENTS", str(events))
    probe.process_started()
    t = time.process_time()
    while time.process_time() - t < 0.05:
        pass
    probe.step_completed(1, duration_s=0.05)
    probe.step_completed(2, duration_s=0.0, cpu_wait_s=0.5)  # given by the script: kept as given
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    if not Path("/proc/self/task").is_dir():
        pytest.skip("no /proc: the probe reports no CPU figures here")
    assert lines[1]["cpu_s"] >= 0.04 and lines[1]["cpu_wait_s"] >= 0
    assert lines[2]["cpu_wait_s"] == 0.5 and "cpu_s" not in lines[2]


# ------------------------------------------------------------------------------------------ the fault kind

def test_quota_is_the_share_over_the_slowdown_within_the_kernel_s_bounds() -> None:
    assert straggler.quota_for(1.0, 4) == (5000, 20000)
    assert straggler.quota_for(2 / 3, 4) == (3333, 20000)
    quota, period = straggler.quota_for(0.1, 100)  # 0.001 CPUs: 20 µs per 20 ms is under the 1 ms minimum
    assert quota >= 1000 and period <= 1_000_000 and quota / period == pytest.approx(0.001)


def test_options_need_a_slowdown_above_one() -> None:
    from chaos.loading import ScenarioInvalid

    for bad, words in (("slowdown: 1", "greater than 1"), ("", "slowdown")):
        text = SCENARIO.replace("slowdown: 4", bad).replace(", ,", ",")
        with pytest.raises(ScenarioInvalid, match=words):
            parse_scenario(text)
    spec = parse_scenario(SCENARIO).faults[0]
    assert straggler.Straggler.describe(spec) == "4× slower (CPU quota = its share / 4) for 9s"


class HostProcesses:
    """A stand-in runtime whose one node is a real process tree on this host (like local)."""

    name = "fake"

    def __init__(self, pids: list[int]):
        # a run id of its own: tests on the other xdist worker look for what their run left behind
        self.run_id = f"20261201-000000-t-{secrets.token_hex(3)}"
        self.pids = pids

    def node_pids(self, name: str) -> list[int]:
        return [p for p in self.pids if Path(f"/proc/{p}").exists()]

    def cpu_quota(self, name: str) -> tuple[int, int]:
        raise Unsupported("host processes")


def _cpu_cgroup_or_skip() -> straggler.CpuLayout:
    lay = straggler.cpu_layout()
    checks = straggler.Straggler.machine_checks()
    if lay is None or not all(c.ok for c in checks):
        pytest.skip(checks[0].detail if checks else "no cpu cgroup")
    return lay


def _context(rt: Any, spec_text: str = SCENARIO) -> FaultContext:
    from chaos.plan import build_plan

    scenario = parse_scenario(spec_text)
    plan = build_plan(scenario, rt.run_id, Path("/tmp"))
    return FaultContext(runtime=rt, spec=scenario.faults[0], node="node1", checkpoint_dir=None, plan=plan,
                        fault_id=0)


def test_the_cap_lands_on_the_node_s_processes_and_heals_exactly() -> None:
    lay = _cpu_cgroup_or_skip()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        home = lay.cgroup_of(proc.pid)
        rt = HostProcesses([proc.pid])
        ctx = _context(rt)
        kind = straggler.Straggler()
        mechanism = kind.inject(ctx)
        cpu = ctx.handles[0]
        assert "moved into cpu cgroup" in mechanism and lay.cgroup_of(proc.pid) == cpu.path != home
        quota, period = lay.read(cpu.path)
        assert quota / period == pytest.approx(ctx.details["share_cpus"] / 4, rel=0.01)
        assert cpu.owner.exists()
        healed = kind.heal(ctx)
        assert healed is not None and healed["restored"] is True, healed
        assert lay.cgroup_of(proc.pid) == home and not cpu.path.exists() and not cpu.owner.exists()
    finally:
        proc.kill()
        proc.wait()


def test_cleanup_after_a_dead_engine_moves_the_processes_back_and_removes_the_cgroup() -> None:
    lay = _cpu_cgroup_or_skip()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        home = lay.cgroup_of(proc.pid)
        ctx = _context(HostProcesses([proc.pid]))
        straggler.Straggler().inject(ctx)
        cpu = ctx.handles[0]
        info = json.loads(cpu.owner.read_text())
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        cpu.owner.write_text(json.dumps({**info, "engine_pid": dead.pid}))  # the engine that made it is gone
        assert straggler.Straggler.cleanup(None, only_orphans=True)
        assert lay.cgroup_of(proc.pid) == home and not cpu.path.exists() and not cpu.owner.exists()
        assert straggler.Straggler.cleanup(None, only_orphans=True) == []  # idempotent
    finally:
        proc.kill()
        proc.wait()


class OwnQuota(HostProcesses):
    """docker's shape: the node's quota is the runtime's own (the container's), recorded as it set it; a
    replacement of the node is a new container without it."""

    def __init__(self) -> None:
        super().__init__([os.getpid()])
        self.quota = (0, 0)
        self.calls: list[tuple[int, int]] = []

    def cpu_quota(self, name: str) -> tuple[int, int]:
        return self.quota

    def set_cpu_quota(self, name: str, quota_us: int, period_us: int) -> str:
        self.calls.append((quota_us, period_us))
        self.quota = (quota_us, period_us)
        return "own quota"


def test_a_runtime_with_its_own_quota_gets_it_back_as_it_recorded_it() -> None:
    rt = OwnQuota()
    ctx = _context(rt)
    kind = straggler.Straggler()
    assert "own quota" in kind.inject(ctx)
    assert rt.calls[0][0] / rt.calls[0][1] == pytest.approx(ctx.details["share_cpus"] / 4, rel=0.01)
    healed = kind.heal(ctx)
    assert rt.calls[-1] == (0, 0) and healed is not None and healed["restored"] is True
    assert not ctx.handles[0].owner.exists()


def test_explore_generates_stragglers_within_the_bounds() -> None:
    from hypothesis import given, settings

    from chaos.explore import fault_strategy
    from chaos.scenario import Explore

    bounds = Explore(kinds=["straggler"], targets=[1], durations=(2.0, 6.0),
                     straggler={"slowdowns": (3, 5.5)})
    assert straggler.Straggler.can_generate()

    @settings(max_examples=25, deadline=None, database=None)
    @given(fault_strategy(bounds, nodes=3))
    def check(plan: list[Any]) -> None:
        for f in plan:
            assert f.kind == "straggler" and 3 <= f.slowdown <= 5.5 and 2.0 <= f.duration <= 6.0 and f.target == 1

    check()


def test_the_report_adds_a_node_table_only_when_a_node_runs_several_ranks() -> None:
    from chaos.reports.text import step_timing_node_rows

    st = timing(history(STARVED))["step_timing"]
    assert step_timing_node_rows(st) == []  # one rank per node: the rank rows say it all
    two_per_node = {**st, "ranks": st["ranks"] + [{**st["ranks"][1], "rank": 3}]}
    rows = step_timing_node_rows(two_per_node)
    assert [r[0] for r in rows] == ["node0", "node1 ◀ slow", "node2"] and rows[1][2] == "0.05 / 0.70 / 0.05"


def test_a_node_whose_processes_are_all_gone_is_not_capped_and_nothing_is_left() -> None:
    lay = _cpu_cgroup_or_skip()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()

    class Vanishing(HostProcesses):
        def node_pids(self, name: str) -> list[int]:
            return [dead.pid]  # listed, but gone before it can be moved

    rt = Vanishing([])
    ctx = _context(rt)
    with pytest.raises(RuntimeError, match="acted on nothing"):
        straggler.Straggler().inject(ctx)
    suffix = rt.run_id.rsplit("-", 1)[1]
    owners = [p.name for p in straggler.OWNERS_DIR.glob(f"*{suffix}-*")] if straggler.OWNERS_DIR.is_dir() else []
    base = lay.cgroup_of(os.getpid()) if lay.version == 1 else lay.mount
    assert owners == [] and not list((base / straggler.PARENT).glob(f"{suffix}/*"))


def test_a_replacement_of_the_capped_node_is_capped_too_and_heals_exactly() -> None:
    """node_restart while a straggler lasts: the new tree starts outside the cap (the engine starts it); the next
    look moves it in, says so in the history with the uncapped time, and heal puts it back where it started."""
    lay = _cpu_cgroup_or_skip()
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    replacement = None
    try:
        home = lay.cgroup_of(first.pid)
        rt = HostProcesses([first.pid])
        ctx = _context(rt)
        kind = straggler.Straggler()
        kind.inject(ctx)
        cpu = ctx.handles[0]
        cpu.next_look = 0.0
        assert kind.observe(ctx) == []  # nothing replaced: nothing to say
        first.kill()
        first.wait()
        replacement = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        rt.pids = [replacement.pid]
        assert lay.cgroup_of(replacement.pid) == home  # born outside the cap, as a node the engine restarts is
        cpu.next_look = 0.0
        seen = kind.observe(ctx)
        assert len(seen) == 1 and seen[0]["event"] == "fault_node_replaced" and seen[0]["reapplied"] is True
        assert seen[0]["pids"] == [replacement.pid] and 0 <= seen[0]["after_s"] < 5
        assert set(seen[0]) - {"event"} >= required_fields(Ev.FAULT_NODE_REPLACED) - {"t", "source", "event"}
        assert lay.cgroup_of(replacement.pid) == cpu.path
        assert str(replacement.pid) in json.loads(cpu.owner.read_text())["homes"]  # cleanup would move it back
        cpu.next_look = 0.0
        assert kind.observe(ctx) == []  # reported once
        healed = kind.heal(ctx)
        assert healed is not None and healed["restored"] is True, healed
        assert lay.cgroup_of(replacement.pid) == home and not cpu.path.exists()
    finally:
        for proc in (first, replacement):
            if proc is not None:
                proc.kill()
                proc.wait()


def test_a_replaced_container_gets_its_quota_again() -> None:
    rt = OwnQuota()
    ctx = _context(rt)
    kind = straggler.Straggler()
    kind.inject(ctx)
    cpu = ctx.handles[0]
    cpu.next_look = 0.0
    assert kind.observe(ctx) == []
    rt.quota = (0, 0)  # node_restart: a new container
    cpu.next_look = 0.0
    seen = kind.observe(ctx)
    assert [e["reapplied"] for e in seen] == [True] and rt.quota == cpu.cap == rt.calls[0]
    assert seen[0]["mechanism"] == "own quota"
    healed = kind.heal(ctx)
    assert rt.calls[-1] == (0, 0) and healed is not None and healed["restored"] is True


def test_result_and_report_say_what_became_of_the_cap_on_a_replaced_node() -> None:
    from chaos.reports.text import replaced_rows

    events = history(STARVED)
    at = next(i for i, e in enumerate(events) if e["event"] == Ev.FAULT_INJECTED)
    t = events[at]["t"] + 1.0
    events[at + 1:at + 1] = [
        {"t": t, "source": Source.ENGINE, "event": Ev.FAULT_NODE_REPLACED, "fault_id": 0, "kind": "straggler",
         "node": "node1", "reapplied": True, "pids": [7], "after_s": 0.25, "mechanism": "moved"},
        {"t": t + 1, "source": Source.ENGINE, "event": Ev.FAULT_NODE_REPLACED, "fault_id": 0, "kind": "straggler",
         "node": "node1", "reapplied": False, "pids": [8], "why": "the runtime could not cap it"}]
    fault = timing(events)
    assert RESULT_SCHEMA_VERSION >= 9
    assert [(r["reapplied"], r.get("after_s")) for r in fault["node_replaced"]] == [(True, 0.25), (False, None)]
    assert fault["node_replaced"][0]["after_injection_s"] == pytest.approx(1.0, abs=1e-3)
    assert "node_replaced" not in timing(history(STARVED))  # absent when nothing was replaced

    from types import SimpleNamespace

    rows = replaced_rows(SimpleNamespace(result=ResultModel.from_dict({"verdict": "pass", "faults": [fault]})))  # type: ignore[arg-type]
    assert rows[0] == ("straggler #0: node1 replaced", "put on the replacement too, 0.25 s after it started")
    assert rows[1][1] == "ended early: the runtime could not cap it"


def test_the_cpu_controller_is_found_on_a_hybrid_host_s_unified_hierarchy(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A hybrid host mounts v2 at /sys/fs/cgroup/unified; a cpu controller no v1 hierarchy holds appears there."""
    monkeypatch.setattr(straggler, "CGROUP_ROOT", tmp_path / "root")  # a v1 root: a tmpfs without cgroup.controllers
    unified, v1 = tmp_path / "unified", tmp_path / "cpu"
    unified.mkdir()
    mounts = (f"cgroup {v1} cgroup rw,relatime,cpu 0 0\n"
              f"cgroup2 {unified} cgroup2 rw,relatime 0 0\n")
    (unified / "cgroup.controllers").write_text("hugetlb\n")
    assert straggler.cpu_layout(mounts) == straggler.CpuLayout(1, v1)  # cpu still bound to v1
    (unified / "cgroup.controllers").write_text("cpu hugetlb\n")
    assert straggler.cpu_layout(mounts) == straggler.CpuLayout(2, unified)
    assert straggler.cpu_layout("") is None


def test_probe_cpu_reading_keeps_one_descriptor_per_live_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe keeps each thread's schedstat open between steps (a step's reading was mostly open/close): a
    thread that ends gives its descriptor back, CPU a thread burnt is still counted, and a forked child reads its
    own threads, not the parent's descriptors. (The list of threads is read at every call here; by default every
    TIDS_EVERY_S: the next test.)"""
    import threading

    monkeypatch.setattr(probe, "_schedstat_pid", 0)
    monkeypatch.setattr(probe, "_schedstat_fds", {})
    monkeypatch.setattr(probe, "_cpu_seen", {})
    monkeypatch.setattr(probe, "TIDS_EVERY_S", 0.0)
    assert probe._cpu_since_last() == {}  # the first call is the baseline
    done = threading.Event()
    worker = threading.Thread(target=lambda: (sum(range(300_000)), done.wait()))
    worker.start()
    try:
        reading = probe._cpu_since_last()
        assert str(worker.native_id) in probe._schedstat_fds
        assert reading["cpu_s"] > 0  # the new thread's CPU so far counts in the step it appeared
    finally:
        done.set()
        worker.join()
    probe._cpu_since_last()
    assert set(probe._schedstat_fds) == set(os.listdir("/proc/self/task"))  # the ended thread's descriptor closed
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        ok = probe._cpu_since_last() == {} and set(probe._schedstat_fds) == {str(os.getpid())}
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.waitpid(child, 0)
    probe._forget_schedstat()  # the descriptors this test opened


def test_a_thread_started_between_readings_of_the_thread_list_loses_no_cpu_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe reads the list of threads every TIDS_EVERY_S, not at every step (its listdir was ~18 us a step):
    a thread that started meanwhile is read at the next listing, with all its CPU time so far."""
    import threading

    monkeypatch.setattr(probe, "_schedstat_pid", 0)
    monkeypatch.setattr(probe, "_schedstat_fds", {})
    monkeypatch.setattr(probe, "_cpu_seen", {})
    monkeypatch.setattr(probe, "TIDS_EVERY_S", 3600.0)
    assert probe._cpu_since_last() == {}
    done = threading.Event()
    burnt = threading.Event()
    worker = threading.Thread(target=lambda: (sum(range(2_000_000)), burnt.set(), done.wait()))
    worker.start()
    try:
        burnt.wait()
        probe._cpu_since_last()
        assert str(worker.native_id) not in probe._schedstat_fds  # not listed yet
        monkeypatch.setattr(probe, "_tids_at", probe._tids_at - 3600.0)  # the interval has passed
        with open(f"/proc/self/task/{worker.native_id}/schedstat") as f:
            so_far = int(f.read().split()[0]) / 1e9
        reading = probe._cpu_since_last()
        assert str(worker.native_id) in probe._schedstat_fds
        assert reading["cpu_s"] >= so_far - 1e-6  # everything it ran before it was listed (cpu_s is in us)
    finally:
        done.set()
        worker.join()
        probe._forget_schedstat()  # the descriptors this test opened
