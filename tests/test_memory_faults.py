"""The memory faults without a cluster: their options, the kernel's record turned into events, the report telling an
OOM kill from a SIGKILL crash, and ``chaos cleanup`` restoring what an interrupted run left.

The kernel side is faked with files shaped like a memory cgroup's (a directory with ``memory.oom_control``); the
real kernel is exercised by tests/integration/test_memory_faults.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos import cgroup
from chaos.analysis.result_json import add_oom_kills
from chaos.cgroup import V1, V2, NodeMemory
from chaos.events import Ev, Source, required_fields
from chaos.faults import membase
from chaos.faults.membase import Kill, OomWatch
from chaos.faults.memory_pressure import MemoryPressure
from chaos.faults.oom_kill import OomKill
from chaos.loading import ScenarioInvalid, parse_scenario
from chaos.registry import fault_plugins
from chaos.reports.text import oom_rows
from chaos.scenario import Explore
from tests.histories import H

BASE = """
name: t
cluster: {mode: elastic, nodes: 2}
workload: {name: ddp-mlp, args: {steps: 100}}
faults:
  - %s
"""


def scenario(fault: str) -> Any:
    return parse_scenario(BASE % fault)


def problems(fault: str) -> str:
    with pytest.raises(ScenarioInvalid) as err:
        scenario(fault)
    return str(err.value)


# ------------------------------------------------------------------------------------------ options

def test_options_parse_sizes_and_defaults() -> None:
    f = scenario("{kind: oom_kill, target: 1, at_step: 5}").faults[0]
    assert f.limit is None and f.wait == 30 and f.duration is None
    f = scenario("{kind: oom_kill, target: 1, at_step: 5, limit: 1GB, duration: 3s}").faults[0]
    assert f.limit == 10**9 and f.duration == 3
    f = scenario("{kind: memory_pressure, target: 0, at_step: 5, size: 512MB, headroom: 256MiB, duration: 10s}"
                 ).faults[0]
    assert (f.size, f.headroom, f.limit) == (512 * 10**6, 256 << 20, None)


@pytest.mark.parametrize(("fault", "says"), [
    ("{kind: oom_kill, at_step: 5}", "needs a target"),
    ("{kind: oom_kill, target: 1, at_step: 5, limit: lots}", "limit"),
    ("{kind: oom_kill, target: 1, at_step: 5, wait: 0}", "wait"),
    ("{kind: oom_kill, target: 1, at_step: 5, size: 1GB}", "size applies to kind: memory_pressure only"),
    ("{kind: memory_pressure, target: 1, at_step: 5, duration: 2s}", "needs size, e.g. size: 512MB"),
    ("{kind: memory_pressure, target: 1, at_step: 5, size: 1GB}", "needs a duration"),
    ("{kind: memory_pressure, target: 1, at_step: 5, size: 0, duration: 2s}", "size"),
    ("{kind: memory_pressure, target: 1, at_step: 5, size: 1GB, limit: 2GB, headroom: 1GB, duration: 2s}",
     "limit or headroom, not both"),
])
def test_bad_options_name_the_field(fault: str, says: str) -> None:
    assert says in problems(fault)


def test_both_kinds_are_plug_ins_that_need_a_memory_cgroup_and_explore_can_generate() -> None:
    plugins = fault_plugins()
    for kind, cls in (("oom_kill", OomKill), ("memory_pressure", MemoryPressure)):
        assert plugins[kind] is cls and cls.needs == {"memory_cgroup"} and cls.can_generate()


def test_explore_takes_both_kinds() -> None:
    assert Explore(kinds=["oom_kill", "memory_pressure"]).kinds == ["oom_kill", "memory_pressure"]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_generated_options_are_valid(data: st.DataObject) -> None:
    for cls in (OomKill, MemoryPressure):
        opts = cls.generate(data.draw, Explore())
        spec = cls.options(kind=cls.kind, target=0, at_step=3, **opts)
        assert cls.describe(spec)
        if cls is MemoryPressure:
            assert spec.size is not None and spec.size <= 512 << 20 and spec.duration is not None


# ------------------------------------------------------------------------------------------ the kernel's record

def test_kernel_lines_are_parsed() -> None:
    line = ("Memory cgroup out of memory: Killed process 4242 (python) total-vm:323772kB, anon-rss:314092kB, "
            "file-rss:6636kB, shmem-rss:0kB, UID:0 pgtables:672kB oom_score_adj:0")
    m = membase._KILLED.search(line)
    assert m and (m.group(1), m.group(2)) == ("4242", "python")
    c = membase._MEMCG.search("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
                              "oom_memcg=/a/torch-chaos/r/node1,task_memcg=/a/torch-chaos/r/node1,task=python,"
                              "pid=4242,uid=0")
    assert c and (c.group(1), c.group(2)) == ("/a/torch-chaos/r/node1", "4242")


def test_counters_and_limits_of_both_versions(tmp_path: Path) -> None:
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n")
    assert cgroup.read_counter(tmp_path / V1.events, "oom_kill") == 3
    assert cgroup.read_counter(tmp_path / V2.events, "oom_kill") == 2
    assert cgroup.read_counter(tmp_path / V2.events, "absent") == 0
    assert cgroup.parse_limit("9223372036854771712\n", V1) is None and cgroup.parse_limit("max\n", V2) is None
    assert cgroup.parse_limit("1048576", V2) == 1 << 20


class FakeLog:
    def __init__(self) -> None:
        self.lines: list[Kill] = []
        self.fd = 1

    def kills(self) -> list[Kill]:
        out, self.lines = self.lines, []
        return out

    def close(self) -> None:
        self.fd = None  # type: ignore[assignment]


class FakeRuntime:
    run_id = "run-abcdef"

    def node_pids(self, name: str) -> list[int]:
        return []


def fake_cgroup(tmp_path: Path, version: Any = V1) -> NodeMemory:
    mount = tmp_path / "memory"
    path = mount / "a" / "torch-chaos" / "r" / "node1"
    path.mkdir(parents=True)
    (path / version.events).write_text("oom_kill 0\n")
    (path / version.limit).write_text(version.unlimited + "\n")
    (path / version.usage).write_text(str(500 << 20))
    return NodeMemory("node1", version, path, tmp_path / "owner.json")


def bump(mem: NodeMemory, n: int) -> None:
    (mem.path / mem.lay.events).write_text(f"oom_kill {n}\n")


def test_each_counted_kill_is_one_event_with_the_victim_from_the_kernel_line(tmp_path: Path,
                                                                               monkeypatch: Any) -> None:
    monkeypatch.setattr(cgroup, "CGROUP_ROOT", tmp_path)
    mem = fake_cgroup(tmp_path)
    log = FakeLog()
    watch = OomWatch(mem, FakeRuntime(), klog=log)  # type: ignore[arg-type]
    watch.who = {4242: {"role": "worker", "rank": 1, "local_rank": 0}}
    watch.allocator, watch.limit = 99, 1 << 29
    assert watch.poll(0, "oom_kill") == []  # nothing counted: no event, whatever the log says
    log.lines = [Kill(4242, "python", 5.0, "Memory cgroup out of memory: Killed process 4242 (python)",
                      "/a/torch-chaos/r/node1"),
                 Kill(777, "java", 5.1, "Memory cgroup out of memory: Killed process 777 (java)", "/elsewhere")]
    bump(mem, 1)
    [event] = watch.poll(0, "oom_kill")
    assert {k: event[k] for k in ("event", "pid", "role", "rank", "local_rank", "killed_at", "limit_bytes")} == {
        "event": "oom_killed", "pid": 4242, "role": "worker", "rank": 1, "local_rank": 0, "killed_at": 5.0,
        "limit_bytes": 1 << 29}
    assert "oom_kill 0 -> 1" in event["evidence"] and "Killed process 4242" in event["evidence"]
    assert set(event) - {"event"} >= required_fields(Ev.OOM_KILLED) - {"t", "source", "event"}
    assert watch.poll(0, "oom_kill") == []  # reported once
    log.lines = [Kill(99, "python", 6.0, "Memory cgroup out of memory: Killed process 99 (python)", None)]
    bump(mem, 2)
    assert watch.poll(0, "memory_pressure")[0]["role"] == "allocator"
    # Counted before its kernel line is readable (seen in CI on a busy machine): held back, then reported with
    # its victim when the line comes; a line read before the counter moved waits for the count.
    bump(mem, 3)
    assert watch.poll(0, "oom_kill") == []
    log.lines = [Kill(4242, "python", 7.0, "Memory cgroup out of memory: Killed process 4242 (python)", None),
                 Kill(99, "python", 7.5, "Memory cgroup out of memory: Killed process 99 (python)", None)]
    [late] = watch.poll(0, "oom_kill")
    assert late["pid"] == 4242 and late["role"] == "worker" and "oom_kill 2 -> 3" in late["evidence"], late
    bump(mem, 4)
    [early] = watch.poll(0, "oom_kill")
    assert early["pid"] == 99 and early["role"] == "allocator" and "oom_kill 3 -> 4" in early["evidence"], early
    # A line that never comes: reported without it once LINE_WAIT_S has passed, or at the last look before heal.
    bump(mem, 5)
    assert watch.poll(0, "oom_kill") == []
    monkeypatch.setattr(membase, "FINAL_SETTLE_S", 0.0)
    [blind] = watch.poll(0, "oom_kill", final=True)
    assert blind["pid"] is None and blind["role"] == "unknown" and "oom_kill 4 -> 5" in blind["evidence"]
    assert "none read within" in blind["evidence"], blind["evidence"]
    # the line of that blind kill comes late: it is its own, never the next kill's victim
    log.lines = [Kill(4242, "python", 1.0, "Memory cgroup out of memory: Killed process 4242 (python)", None)]
    bump(mem, 6)
    monkeypatch.setattr(membase, "LINE_WAIT_S", 0.0)
    [waited] = watch.poll(0, "oom_kill")
    assert waited["role"] == "unknown" and waited["pid"] is None and "oom_kill 5 -> 6" in waited["evidence"]
    # a cgroup gone with its node (a docker container): the kills it counted last are still written
    monkeypatch.setattr(membase, "LINE_WAIT_S", 3.0)
    bump(mem, 7)
    assert watch.poll(0, "oom_kill") == []  # counted, its line awaited
    import shutil
    shutil.rmtree(mem.path)
    [gone] = watch.poll(0, "oom_kill", final=True)
    assert "oom_kill 6 -> 7" in gone["evidence"], gone
    log.close()
    mem.path.mkdir(parents=True)
    bump(mem, 8)  # no /dev/kmsg at all: nothing to wait for
    [no_log] = watch.poll(0, "oom_kill")
    assert no_log["role"] == "unknown" and "(no /dev/kmsg)" in no_log["evidence"]


def test_a_limit_is_set_with_swap_and_restored_exactly(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(cgroup, "OWNERS_DIR", tmp_path / "owners")
    mem = fake_cgroup(tmp_path)
    (mem.path / V1.swap).write_text(V1.unlimited + "\n")
    mem.owner = tmp_path / "owners" / "limit.json"
    mem.set_limit(400 << 20, "run-abcdef")
    assert (mem.path / V1.limit).read_text() == str(400 << 20) == (mem.path / V1.swap).read_text()
    assert json.loads(mem.owner.read_text())["before"][V1.limit] == V1.unlimited
    assert mem.restore() == {"restored": True} and not mem.owner.exists()
    assert (mem.path / V1.limit).read_text() == V1.unlimited


def test_a_cgroup_gone_with_its_node_took_the_limit_with_it(tmp_path: Path, monkeypatch: Any) -> None:
    """A docker node whose launcher was OOM-killed: its container and cgroup ended; nothing of the limit is left."""
    monkeypatch.setattr(cgroup, "OWNERS_DIR", tmp_path / "owners")
    mem = fake_cgroup(tmp_path)
    mem.owner = tmp_path / "owners" / "limit.json"
    mem.set_limit(400 << 20, "run-abcdef")
    for f in mem.path.iterdir():
        f.unlink()
    mem.path.rmdir()
    out = mem.restore()
    assert out["restored"] is True and "is gone" in out["limit_gone_with_cgroup"] and not mem.owner.exists()


def test_a_restore_that_does_not_read_back_says_so(tmp_path: Path) -> None:
    path = tmp_path / "cg"
    path.mkdir()
    (path / V2.limit).write_text("max")
    assert cgroup.restore_limits(tmp_path / "gone", {V2.limit: "max"}) == [f"{tmp_path / 'gone'} is gone (the "
                                                                             "node was replaced or removed)"]
    problems = cgroup.restore_limits(path, {V2.limit: "max", "memory.swap.max": "max"})
    assert problems == [] and (path / "memory.swap.max").read_text() == "max"


# ------------------------------------------------------------------------------------------ chaos cleanup

def test_cleanup_restores_limits_of_dead_engines_only(tmp_path: Path, monkeypatch: Any) -> None:
    owners = tmp_path / "owners"
    owners.mkdir()
    monkeypatch.setattr(cgroup, "OWNERS_DIR", owners)
    cgroups = {}
    for name, engine in (("dead", 2**22 + 12345), ("live", os.getpid())):
        path = tmp_path / name
        path.mkdir()
        (path / V1.limit).write_text("1000")
        cgroups[name] = path
        (owners / f"limit-{name}.json").write_text(json.dumps(
            {"run_id": name, "engine_pid": engine, "path": str(path), "before": {V1.limit: V1.unlimited},
             "created": False}))
    removed = cgroup.cleanup(None, only_orphans=True)
    assert removed == [f"memory limit on {cgroups['dead']} restored"]
    assert (cgroups["dead"] / V1.limit).read_text() == V1.unlimited
    assert (cgroups["live"] / V1.limit).read_text() == "1000"
    assert [p.name for p in owners.iterdir()] == ["limit-live.json"]
    assert cgroup.cleanup("live", only_orphans=False) == [f"memory limit on {cgroups['live']} restored"]


def test_cleanup_forgets_a_container_that_is_gone(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(cgroup, "OWNERS_DIR", tmp_path)
    (tmp_path / "limit-x.json").write_text(json.dumps({"run_id": "x", "engine_pid": 2**22 + 1, "created": False,
                                                       "path": str(tmp_path / "removed"), "before": {}}))
    assert cgroup.cleanup(None, only_orphans=True) == [] and not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------------------ the report

def oom_event(fid: int, t: float, pid: int = 4242) -> dict[str, Any]:
    return {"t": t + 0.2, "source": Source.ENGINE, "event": Ev.OOM_KILLED, "fault_id": fid, "kind": "oom_kill",
            "node": "node1", "pid": pid, "role": "worker", "rank": 1, "local_rank": 0, "killed_at": t + 0.05,
            "limit_bytes": 1 << 29, "evidence": "x"}


class Rep:
    """What the report rows read: the result, as the loader gives it."""

    def __init__(self, faults: list[dict[str, Any]]):
        from chaos.analysis.result_model import ResultModel

        self.result = ResultModel.from_dict({"verdict": "pass", "faults": faults})


def test_the_report_says_oom_killed_for_an_oom_kill_and_nothing_of_the_kind_for_a_crash() -> None:
    h = H().start(2).steps(1, 10).fault(0, kind="oom_kill")
    t_f = h.events[-1]["t"]
    h.events.append(oom_event(0, t_f))
    events = h.start(2, load=10).steps(11, 20).end()
    faults = [{"id": 0, "kind": "oom_kill", "t_injected": t_f}]
    add_oom_kills(faults, events)
    [kill] = faults[0]["oom_kills"]
    assert kill["pid"] == 4242 and kill["role"] == "worker" and kill["after_injection_s"] == pytest.approx(0.05)
    [(label, text)] = oom_rows(Rep(faults))  # type: ignore[arg-type]
    assert label == "OOM-killed by the kernel" and "node1 pid 4242 (worker rank 1 local_rank 0)" in text

    crash = H().start(2).steps(1, 10).fault(0, kind="kill_worker").start(2, load=10).steps(11, 20).end()
    faults = [{"id": 0, "kind": "kill_worker", "t_injected": 1001.0}]
    add_oom_kills(faults, crash)
    assert "oom_kills" not in faults[0] and oom_rows(Rep(faults)) == []  # type: ignore[arg-type]


def test_kills_go_to_their_own_fault() -> None:
    h = H().start(2).steps(1, 5).fault(0, kind="memory_pressure", duration=5).fault(1, kind="kill_worker")
    h.events.append(oom_event(0, h.events[-1]["t"], pid=1))
    h.events.append(oom_event(0, h.events[-1]["t"] + 1, pid=2))
    faults = [{"id": 0, "kind": "memory_pressure", "t_injected": 1000.5}, {"id": 1, "kind": "kill_worker",
                                                                            "t_injected": 1000.6}]
    add_oom_kills(faults, h.end())
    assert [k["pid"] for k in faults[0]["oom_kills"]] == [1, 2] and "oom_kills" not in faults[1]


def test_victims_are_biased_and_survivors_get_their_setting_back() -> None:
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(2)]
    try:
        before = membase.bias_victims([p.pid for p in procs], 500)
        assert set(before) == {p.pid for p in procs} and set(before.values()) == {"0"}
        assert Path(f"/proc/{procs[0].pid}/oom_score_adj").read_text().strip() == "500"
        assert membase.bias_victims([procs[0].pid], 300) == {}  # never lowered: that needs a privilege
        procs[1].kill()
        procs[1].wait()
        assert membase.unbias(before) == []  # the dead one is no problem
        assert Path(f"/proc/{procs[0].pid}/oom_score_adj").read_text().strip() == "0"
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_local_rank_picks_the_victim() -> None:
    two_workers = BASE.replace("nodes: 2}", "nodes: 2, procs_per_node: 2}")
    f = parse_scenario(two_workers % "{kind: oom_kill, target: 1, at_step: 5, local_rank: 1}").faults[0]
    assert f.local_rank == 1
    assert "local_rank: 1 does not exist" in problems("{kind: oom_kill, target: 1, at_step: 5, local_rank: 1}")
    assert "local_rank" in problems("{kind: oom_kill, target: 1, at_step: 5, local_rank: -1}")


def test_the_launcher_is_shielded_while_the_allocator_pushes_and_gets_its_value_back() -> None:
    """A second OOM kill before the first victim's memory is freed must not take the launcher (and the node)."""
    import subprocess
    import sys

    from chaos.faults.membase import shield, unbias

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        adj = Path(f"/proc/{proc.pid}/oom_score_adj")
        before = adj.read_text().strip()
        shielded = shield([proc.pid])
        if not shielded:
            pytest.skip("lowering oom_score_adj needs CAP_SYS_RESOURCE")
        assert adj.read_text().strip() == "-1000" and shielded == {proc.pid: before}
        assert unbias(shielded) == [] and adj.read_text().strip() == before
    finally:
        proc.kill()
        proc.wait()


def test_the_allocator_stops_growing_within_64_pages_of_a_kill(tmp_path: Path) -> None:
    """The counter is read every 64 pages of memory really charged (an anonymous mapping, touched page by page;
    a bytearray would be charged whole at creation): once it moves, the allocator asks for nothing more."""
    import subprocess
    import sys

    import psutil

    from chaos.faults.allocator import CHUNK, LOOK

    counter = tmp_path / "memory.oom_control"
    counter.write_text("oom_kill 0\n")
    proc = subprocess.Popen([sys.executable, "-m", "chaos.faults.allocator", str(1 << 30), "30", str(os.getpid()),
                             str(counter)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        first = proc.stdout.readline()  # "allocated 64 MiB after ...": growing
        assert first.startswith("allocated 64 MiB"), first
        counter.write_text("oom_kill 1\n")
        stopped = proc.stdout.readline()
        while stopped.startswith("allocated ") and "holding" not in stopped:  # grew on while we wrote (a busy box)
            stopped = proc.stdout.readline()
        assert stopped.startswith("the OOM killer acted after"), stopped
        grown = int(stopped.split("after ")[1].split(" MiB")[0]) << 20
        # stopped long before its 1 GiB (how far past 64 MiB depends on how fast this test wrote the counter)
        assert grown < (256 << 20), stopped
        rss = psutil.Process(proc.pid).memory_info().rss
        # what it holds is what it counted, within one check (LOOK) and the interpreter's own: the rest of the last
        # chunk was never touched, so never charged
        assert rss < grown + LOOK + CHUNK + (48 << 20), (rss, grown)
    finally:
        proc.kill()
        proc.wait()
