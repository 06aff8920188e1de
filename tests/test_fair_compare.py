"""Fair comparisons (issue 15, item 1): cores pinned per node, refused when the host cannot give them, recorded in
result.json, and stated (and flagged when unfair) by ``chaos compare``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import chaos.plan
from chaos.admission import admit
from chaos.analysis.result_json import resources_of
from chaos.compare import LOSS_RTOL, Column, conclusions, fairness, table
from chaos.loading import ScenarioInvalid
from chaos.plan import PlanError, build_plan, pin_cpus
from chaos.runtimes.local import pinned_argv
from chaos.scenario import Scenario

# ------------------------------------------------------------------------------------------ the plan


def test_each_node_gets_its_own_consecutive_cores() -> None:
    r = pin_cpus(3, 2, [0, 1, 2, 3, 4, 5, 6, 7])
    assert r["nodes"] == {"node0": [0, 1], "node1": [2, 3], "node2": [4, 5]}
    assert r["cpus_per_node"] == 2 and not r["oversubscribed"] and not r["shared_cores"]
    cores = [c for cs in r["nodes"].values() for c in cs]
    assert len(cores) == len(set(cores)), "pinned sets are disjoint"


def test_pinning_follows_the_engines_own_cores_not_their_numbers() -> None:
    assert pin_cpus(2, 1, [2, 5])["nodes"] == {"node0": [2], "node1": [5]}


def test_unpinned_nodes_are_recorded_as_sharing_the_host() -> None:
    assert pin_cpus(2, None, [0, 1]) == {"cpus_per_node": None, "host_cpus": [0, 1], "nodes": {},
                                         "oversubscribed": False, "shared_cores": True}
    assert pin_cpus(1, None, [0, 1])["shared_cores"] is False


def test_a_shape_the_host_cannot_give_is_refused_naming_the_field_and_the_host() -> None:
    with pytest.raises(PlanError) as exc:
        pin_cpus(3, 1, [0, 1])
    message = str(exc.value)
    assert message.startswith("cluster.resources.cpus: 3 node(s) × 1 core(s) = 3 cores to pin")
    assert "this host gives 2 (0,1)" in message and "allow_oversubscribe: true" in message


def test_oversubscription_when_allowed_deals_cores_round_robin_and_is_flagged() -> None:
    r = pin_cpus(3, 1, [0, 1], allow_oversubscribe=True)
    assert r["nodes"] == {"node0": [0], "node1": [1], "node2": [0]}
    assert r["oversubscribed"] and r["shared_cores"]


def test_more_cores_per_node_than_the_host_has_is_refused_even_when_oversubscription_is_allowed() -> None:
    with pytest.raises(PlanError, match=r"lower cluster\.nodes or cluster\.resources\.cpus$"):
        pin_cpus(1, 4, [0, 1], allow_oversubscribe=True)


def _scenario(resources: dict[str, Any], nodes: int = 2, mode: str = "elastic") -> Scenario:
    return Scenario.model_validate({"name": "pin", "cluster": {"mode": mode, "nodes": nodes, "resources": resources},
                                    "workload": {"name": "ddp-mlp", "args": {"steps": 10}}})


def test_the_plan_shows_each_nodes_cores(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(chaos.plan, "host_cpus", lambda: [0, 1, 2, 3])
    plan = build_plan(_scenario({"cpus": 2}), "r", tmp_path)
    shown = plan.to_dict()
    assert [n["cpus"] for n in shown["nodes"]] == [[0, 1], [2, 3]]
    assert shown["resources"]["nodes"] == {"node0": [0, 1], "node1": [2, 3]}
    central = build_plan(_scenario({"cpus": 1}, nodes=1, mode="centralized"), "r", tmp_path)
    assert central.nodes[0].cpus == [0]
    unpinned = build_plan(_scenario({}), "r", tmp_path).to_dict()
    assert all("cpus" not in n for n in unpinned["nodes"]) and unpinned["resources"]["cpus_per_node"] is None


def test_validation_refuses_the_shape_at_its_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(chaos.plan, "host_cpus", lambda: [0, 1])
    path = tmp_path / "s.yaml"
    path.write_text("name: pin\ncluster:\n  nodes: 3\n  resources:\n    cpus: 1\n"
                    "workload: {name: ddp-mlp, args: {steps: 10}}\n")
    with pytest.raises(ScenarioInvalid) as exc:
        admit(path, machine=False)
    [error] = exc.value.errors
    assert error.line == 5 and "this host gives 2" in str(error)
    path.write_text(path.read_text().replace("cpus: 1", "cpus: 1\n    allow_oversubscribe: true"))
    assert admit(path, machine=False).cluster.resources.allow_oversubscribe


def test_the_run_records_what_each_node_got() -> None:
    resources = pin_cpus(2, 1, [0, 1])
    assert resources_of({"plan": {"resources": resources}}) == resources
    assert resources_of({"plan": {"nodes": []}}) is None and resources_of({}) is None


# ------------------------------------------------------------------------------------------ the runtime


def test_a_pinned_node_is_started_under_taskset() -> None:
    argv = ["python", "train.py"]
    assert pinned_argv(argv, None) == argv
    if chaos.runtimes.local.shutil.which("taskset"):
        assert pinned_argv(argv, [0, 2]) == ["taskset", "--cpu-list", "0,2", *argv]


def test_without_taskset_the_python_wrapper_pins_the_process_and_its_children(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    monkeypatch.setattr(chaos.runtimes.local.shutil, "which", lambda name: None)
    core = min(os.sched_getaffinity(0))
    child = "import os, subprocess, sys; subprocess.run([sys.executable, '-c', " \
            "'import os; print(sorted(os.sched_getaffinity(0)))'])"
    argv = pinned_argv([sys.executable, "-c", child], [core])
    assert argv[0] == sys.executable
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.strip() == str([core])


# ------------------------------------------------------------------------------------------ compare


def _column(label: str, nodes: int, resources: dict[str, Any] | None, loss: float | None = 0.5,
            steps_per_s: float = 10.0, world_size: int | None = None, batch: int = 48) -> Column:
    return Column(label=label, scenario=label, run_dir="", verdict="pass",
                  mode="centralized" if nodes == 1 else "elastic", nodes=nodes, world_size=world_size or nodes,
                  steps_per_s=steps_per_s, samples_per_s=None, comm_share=0.5 if nodes > 1 else 0.0,
                  time_to_first_step_s=None, recovery_s=None, lost_work_s=None, lost_steps=None, goodput=None,
                  node_seconds_per_step=None, duration_s=None, resources=resources, final_step=100,
                  final_loss=loss, training={"steps": 100, "global_batch": batch, "seed": 1})


def test_pinned_columns_are_a_fair_comparison_and_say_what_each_node_had() -> None:
    one = _column("one", 1, pin_cpus(1, 1, [0, 1]))
    two = _column("two", 2, pin_cpus(2, 1, [0, 1]), loss=0.5 * (1 + LOSS_RTOL / 2), steps_per_s=15.0)
    assert fairness([one, two]) == {"one": [], "two": []}
    rows = {r[0]: r[1:] for r in table([one, two])}
    assert rows["resources per node"] == ["1 core(s) pinned per node (node0: 0) of 2",
                                          "1 core(s) pinned per node (node0: 0; node1: 1) of 2"]
    assert rows["fair comparison"] == ["yes", "yes"]
    assert rows["speedup over one (steps/s)"] == ["1.00×", "1.50×"]
    assert rows[f"final loss vs one (tolerance {LOSS_RTOL:g} relative)"] == ["reference", "+5.00e-04 (within)"]
    assert table([one, two])[-1][0] == "verdict"
    lines = conclusions([one, two])
    assert lines[0].startswith("A fair comparison: every node ran on cores of its own")
    assert not any("not a fair comparison" in line for line in lines)
    assert any(line.startswith("At the same global batch (48 samples per step, 100 steps)") and
               "within it: more workers did not change the model" in line for line in lines), lines


def test_unpinned_shared_and_oversubscribed_columns_are_flagged_in_the_table_and_the_conclusions() -> None:
    central = _column("central", 1, pin_cpus(1, 1, [0, 1]), steps_per_s=100.0)
    shared = _column("shared", 3, pin_cpus(3, None, [0, 1]))
    over = _column("over", 3, pin_cpus(3, 1, [0, 1], allow_oversubscribe=True))
    alone = _column("alone", 1, pin_cpus(1, None, [0, 1]))
    old = _column("old", 2, None)
    flags = fairness([central, shared, over, alone, old])
    assert flags["central"] == []
    assert flags["shared"] == ["its 3 nodes are not pinned and share the host's 2 cores"]
    assert flags["over"] == ["oversubscribed: 3 nodes × 1 core(s) on 2 host cores, so nodes share cores"]
    assert flags["alone"] == ["its node is not pinned (it may use all 2 host cores) while other columns' are"]
    assert flags["old"][0].startswith("its resources were not recorded")
    rows = {r[0]: r[1:] for r in table([central, shared, over])}
    assert rows["fair comparison"][0] == "yes" and rows["fair comparison"][1].startswith("no: its 3 nodes")
    assert rows["resources per node"][2].endswith("of 2, oversubscribed")
    lines = conclusions([central, shared, over])
    assert lines[0].startswith("Not a fair comparison: shared: its 3 nodes are not pinned") and "over: " in lines[0]
    # the speed conclusions stay computed from the numbers, and say they rest on an unfair column
    assert any(line.startswith("central is the fastest: 100.0 steps/s, 10.0× ") and
               line.endswith("(not a fair comparison, see above).") for line in lines), lines
    # a single unpinned node alone is no unfairness
    assert fairness([alone]) == {"alone": []}


def test_final_loss_is_compared_only_at_the_same_global_batch() -> None:
    one = _column("one", 1, pin_cpus(1, 1, [0, 1]))
    far = _column("far", 2, pin_cpus(2, 1, [0, 1]), loss=0.6)
    other = _column("other", 2, pin_cpus(2, 1, [0, 1]), batch=96)
    rows = {r[0]: r[1:] for r in table([one, far, other])}
    assert rows["final loss (global batch 48/96)"] == ["0.5 (step 100)", "0.6 (step 100)", "0.5 (step 100)"]
    assert rows[f"final loss vs one (tolerance {LOSS_RTOL:g} relative)"] == ["reference", "+2.00e-01 (BEYOND)", "—"]
    assert any("beyond it: the model differs with the world size" in line for line in conclusions([one, far, other]))


# ------------------------------------------------------------------------------------------ the interconnect sweep


def test_a_sweep_is_parsed_best_link_first_and_bad_values_are_refused() -> None:
    from chaos.net.units import rate_bits
    from chaos.sweep import parse_sweep

    assert parse_sweep("bandwidth=10mbit,1gbit,100mbit") == ("bandwidth", ["1gbit", "100mbit", "10mbit"])
    assert rate_bits("1mbps") == 8e6  # tc's bps units are bytes
    # a delay sweep: the best link (least delay) first
    assert parse_sweep("delay=20ms,0ms,5ms") == ("delay", ["0ms", "5ms", "20ms"])
    for bad in ("jitter=10ms,20ms", "bandwidth=1gbit", "bandwidth=fast,slow", "bandwidth", "delay=5ms,soon",
                "delay=5ms,0.005s", "delay=-5ms,5ms"):
        with pytest.raises(ValueError, match=r"--sweep|tc rate|a delay such as"):
            parse_sweep(bad)


def test_a_delay_sweep_delays_every_node_and_its_zero_point_is_the_unimpaired_link() -> None:
    from chaos.loading import load_scenario, shipped_scenarios_dir
    from chaos.sweep import swept_scenario

    elastic = load_scenario(shipped_scenarios_dir() / "compare" / "elastic-tuned.yaml")
    swept = swept_scenario(elastic, "delay", "20ms")
    assert swept.cluster.runtime == "netns"
    assert [(f.kind, f.target, f.at, f.duration, f.delay) for f in swept.faults] == [
        ("delay", i, 0, None, 0.02) for i in range(elastic.cluster.nodes)]
    zero = swept_scenario(elastic, "delay", "0ms")
    assert zero.faults == [] and zero.cluster.runtime == "netns" and zero.name == "compare-elastic-tuned-delay-0ms"


def test_a_point_runs_fewer_steps_only_when_the_previous_pace_says_they_would_not_fit() -> None:
    from chaos.loading import load_scenario, shipped_scenarios_dir
    from chaos.sweep import MIN_STEPS, fit_steps, swept_scenario

    elastic = load_scenario(shipped_scenarios_dir() / "compare" / "elastic-tuned.yaml")  # 1000 steps, 240 s
    prev = _column("two-100mbit", 2, pin_cpus(2, 1, [0, 1]), steps_per_s=20.0)
    prev.time_to_first_step_s = 24.0
    assert fit_steps(elastic, "bandwidth", None, "1gbit") == (None, "")  # the first point: nothing to go by
    # 10× less bandwidth: 2 steps/s planned; 0.6 × 240 s - 24 s start = 120 s → 240 steps
    steps, note = fit_steps(elastic, "bandwidth", ("100mbit", prev), "10mbit")
    assert steps == 240 and note.startswith("240 of 1000 steps: at 100mbit it ran 20.0 steps/s")
    assert swept_scenario(elastic, "bandwidth", "10mbit", steps).workload.args["steps"] == 240
    # a small slowdown fits: the scenario's steps are kept
    assert fit_steps(elastic, "bandwidth", ("100mbit", prev), "80mbit") == (None, "")
    # a hopeless link still runs enough steps for a median
    assert fit_steps(elastic, "bandwidth", ("100mbit", prev), "10kbit")[0] == MIN_STEPS
    # delay: 0 ms → 20 ms is 21× the 1 ms a step's round trips are assumed to take unimpaired
    steps, _ = fit_steps(elastic, "delay", ("0ms", prev), "20ms")
    assert steps == int(120 * 20.0 / 21)
    prev.steps_per_s = None  # no pace measured: nothing to go by
    assert fit_steps(elastic, "bandwidth", ("100mbit", prev), "10mbit") == (None, "")


def test_swept_runs_impair_every_nodes_link_for_the_whole_run_on_netns() -> None:
    from chaos.loading import load_scenario, shipped_scenarios_dir
    from chaos.sweep import baseline_scenario, swept_scenario

    elastic = load_scenario(shipped_scenarios_dir() / "compare" / "elastic-tuned.yaml")
    swept = swept_scenario(elastic, "bandwidth", "10mbit")
    assert swept.cluster.runtime == "netns" and swept.cluster.resources == elastic.cluster.resources
    assert [(f.kind, f.target, f.at, f.duration, f.rate) for f in swept.faults] == [
        ("bandwidth", i, 0, None, "10mbit") for i in range(elastic.cluster.nodes)]
    assert not swept.checks.golden
    base = baseline_scenario(load_scenario(shipped_scenarios_dir() / "compare" / "centralized.yaml"))
    assert base.faults == [] and base.cluster.nodes == 1


def test_the_crossover_is_where_the_speedup_falls_below_one(tmp_path: Path) -> None:
    from chaos.sweep import write_sweep

    base = _column("one", 1, pin_cpus(1, 1, [0, 1]), steps_per_s=100.0)
    swept = {"two": [(v, _column(f"two-{v}", 2, pin_cpus(2, 1, [0, 1]), steps_per_s=pace))
                     for v, pace in (("10mbit", 40.0), ("1gbit", 150.0), ("100mbit", 120.0))]}
    paths = write_sweep("bandwidth", base, swept, tmp_path)
    data = json.loads(paths["json"].read_text())
    [curve] = data["curves"]
    assert [(p["value"], p["speedup"]) for p in curve["points"]] == [("1gbit", 1.5), ("100mbit", 1.2),
                                                                      ("10mbit", 0.4)]
    assert curve["crossover"] == ("two: crossover between 100mbit (1.20×) and 10mbit (0.40×): on a link of 10mbit "
                                  "or worse, one machine (one) wins.")
    assert paths["svg"].read_text().startswith("<?xml")
    assert "| 10mbit | 100 | 40.0 | 0.40× |" in paths["md"].read_text()
    slow = {"two": [(v, _column("two", 2, pin_cpus(2, 1, [0, 1]), steps_per_s=10.0)) for v in ("1gbit", "10mbit")]}
    assert "wins at every tested link quality" in json.loads(
        write_sweep("bandwidth", base, slow, tmp_path / "slow")["json"].read_text())["curves"][0]["crossover"]


def test_a_delay_sweep_finds_its_crossover_and_states_the_points_steps(tmp_path: Path) -> None:
    from chaos.sweep import write_sweep

    base = _column("one", 1, pin_cpus(1, 1, [0, 1]), steps_per_s=100.0)
    cut = "240 of 1000 steps: test"
    swept = {"two": [("20ms", _column("two", 2, pin_cpus(2, 1, [0, 1]), steps_per_s=30.0), cut),
                     ("0ms", _column("two", 2, pin_cpus(2, 1, [0, 1]), steps_per_s=180.0), ""),
                     ("5ms", _column("two", 2, pin_cpus(2, 1, [0, 1]), steps_per_s=90.0), "")]}
    paths = write_sweep("delay", base, swept, tmp_path)
    [curve] = json.loads(paths["json"].read_text())["curves"]
    assert [(p["value"], p["delay_s"], p["bits_per_s"], p["speedup"]) for p in curve["points"]] == [
        ("0ms", 0.0, None, 1.8), ("5ms", 0.005, None, 0.9), ("20ms", 0.02, None, 0.3)]
    assert curve["crossover"].startswith("two: crossover between 0ms (1.80×) and 5ms (0.90×)")
    md = paths["md"].read_text()
    assert f"- two at 20ms: {cut}." in md and "every node's packets delayed" in md
    assert "delay added to every packet" in paths["svg"].read_text()


def test_a_pinned_docker_node_gets_its_cores_as_the_containers_cpuset(tmp_path: Path) -> None:
    from chaos.plan import NodePlan
    from chaos.runtimes.docker import DockerRuntime

    host_configs: list[dict[str, Any]] = []

    class Api:

        def containers(self, **_: Any) -> list[Any]:
            return []

        def create_host_config(self, **kw: Any) -> dict[str, Any]:
            host_configs.append(kw)
            return kw

        def create_networking_config(self, config: Any) -> Any:
            return config

        def create_endpoint_config(self, **kw: Any) -> Any:
            return kw

        def create_container(self, *_: Any, **__: Any) -> dict[str, str]:
            return {"Id": "c"}

        def start(self, _: str) -> None:
            return None

    runtime = DockerRuntime("run-abcdef", tmp_path, image="img")
    runtime._client = type("Client", (), {"api": Api()})()
    runtime.addresses = {"node0": "172.30.0.10", "node1": "172.30.0.11"}
    runtime.start_node(NodePlan("node0", 0, ["python", "t.py"], {}, cpus=[2, 3]))
    runtime.start_node(NodePlan("node1", 1, ["python", "t.py"], {}))
    assert [c["cpuset_cpus"] for c in host_configs] == ["2,3", None]


def test_no_phase_is_named_when_the_common_ones_explain_almost_none_of_the_difference() -> None:
    from chaos.compare import _widest_gap

    quick = _column("quick", 1, None)
    slow = _column("slow", 2, None)
    quick.recovery_s, quick.recovery_phases = 14.8, [("detection + restart", 14.8), ("first step", 0.0)]
    slow.recovery_s, slow.recovery_phases = 99.3, [("rendezvous", 99.2), ("first step", 0.1)]
    assert _widest_gap(quick, slow) is None


# ------------------------------------------------------------------------------------------ setup steps and levers


def _plan(tmp_path: Path, name: str) -> dict[str, Any]:
    """The plan.yaml build_plan writes for a shipped compare scenario (no cluster started)."""
    from chaos.loading import load_scenario, shipped_scenarios_dir

    scenario = load_scenario(shipped_scenarios_dir() / "compare" / f"{name}.yaml")
    plan = build_plan(scenario, f"run-{name}", tmp_path / name)
    return json.loads(json.dumps(plan.to_dict()))


def test_setup_steps_are_derived_from_the_plan_of_each_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.compare import setup_steps

    monkeypatch.setattr(chaos.plan, "host_cpus", lambda: [0, 1])
    restart = {"policy": "on-failure", "delay_s": 1.0, "max_restarts": 10}
    central = setup_steps(_plan(tmp_path, "centralized"), restart)
    assert central == ["provision 1 host (1 core)", "start 1 process on the host (train.py)",
                       "checkpoint storage on the host",
                       "a supervisor that restarts a failed host's process (after 1 s, at most 10 times)"]
    elastic = setup_steps(_plan(tmp_path, "elastic-tuned"), None)
    assert elastic[0] == "provision 2 hosts (1 core each)"
    assert elastic[1] == "start torchrun on each of the 2 hosts (--nnodes=1:2, --nproc-per-node=1, train.py)"
    assert elastic[2].startswith("a c10d rendezvous endpoint (node0's TCP store)")
    assert elastic[3].startswith("a network between the 2 hosts")
    assert elastic[4] == "checkpoint storage every host reads and writes (shared)"
    assert len(elastic) == 5  # no node_restart given: no supervisor
    # a dedicated store is one more host to run, on the network
    plan = _plan(tmp_path, "elastic-tuned")
    plan["store"] = {"name": "store", "role": "store", "argv": ["python", "-c", "..."]}
    steps = setup_steps(plan, None)
    assert "run the rendezvous store on a host of its own" in steps
    assert any(s.startswith("a c10d rendezvous endpoint (the store host)") for s in steps)
    assert any(s.startswith("a network between the 3 hosts") for s in steps)
    assert setup_steps({}, None) == []


def test_the_comparison_has_a_setup_row_and_says_what_the_bigger_shape_adds() -> None:
    one = _column("one", 1, pin_cpus(1, 1, [0, 1]))
    two = _column("two", 2, pin_cpus(2, 1, [0, 1]))
    one.setup, two.setup = ["provision 1 host", "start 1 process"], ["provision 2 hosts", "start 1 process", "a net"]
    rows = {r[0]: r[1:] for r in table([one, two])}
    assert rows["setup steps (from the run's plan)"] == ["2: provision 1 host; start 1 process",
                                                        "3: provision 2 hosts; start 1 process; a net"]
    assert "Setting up one takes 2 steps; two takes 3, differing in: provision 2 hosts; a net." in conclusions(
        [one, two])
    two.setup = None
    assert rows["setup steps (from the run's plan)"][0].startswith("2:")
    assert {r[0]: r[1:] for r in table([one, two])}["setup steps (from the run's plan)"][1] == (
        "not recorded (no plan.yaml)")


def test_the_largest_recovery_part_is_named_with_its_settings_and_their_measured_effect() -> None:
    from chaos.analysis.breakdown import RENDEZVOUS, WORKER_INIT

    tuned = _column("tuned", 2, pin_cpus(2, 1, [0, 1]))
    defaults = _column("defaults", 2, pin_cpus(2, 1, [0, 1]))
    tuned.recovery_s, tuned.recovery_phases = 10.0, [(RENDEZVOUS, 2.0), (WORKER_INIT, 6.0), ("first step", 2.0)]
    tuned.largest_phase, tuned.largest_s = WORKER_INIT, 6.0
    tuned.settings = {"last_call_timeout_s": 2, "join_timeout_s": 60, "min_nodes": 1, "process_group_timeout_s": 10,
                      "share_rendezvous_store": False}
    defaults.recovery_s, defaults.recovery_phases = 90.0, [(RENDEZVOUS, 80.0), (WORKER_INIT, 7.0), ("first step", 3.0)]
    defaults.largest_phase, defaults.largest_s = RENDEZVOUS, 80.0
    defaults.settings = {**tuned.settings, "last_call_timeout_s": 30, "join_timeout_s": 600,
                         "process_group_timeout_s": 1800, "share_rendezvous_store": True}
    rows = {r[0]: r[1:] for r in table([tuned, defaults])}
    assert rows["recovery, what shrinks the largest part"] == [
        "process_group_timeout_s (10 s); share_rendezvous_store (False)",
        "last_call_timeout_s (30 s); join_timeout_s (600 s); min_nodes (1)"]
    lines = conclusions([tuned, defaults])
    [on_defaults] = [line for line in lines if line.startswith("On defaults")]
    assert on_defaults == (
        "On defaults the largest part of the 90.0 s recovery is rendezvous: 80.0 s (89%); the settings that bound "
        "it: last_call_timeout_s = 30 s, join_timeout_s = 600 s, min_nodes = 1. Measured effect: tuned, with "
        "last_call_timeout_s = 2 s, join_timeout_s = 60 s, spent 2.0 s in rendezvous: 78.0 s less (the two runs "
        "also differ in process_group_timeout_s, share_rendezvous_store).")
    [on_tuned] = [line for line in lines if line.startswith("On tuned")]
    assert "Measured effect: defaults, with process_group_timeout_s = 1800 s, share_rendezvous_store = True, " \
        "spent 7.0 s in worker init (process group): 1.0 s more" in on_tuned
    # a centralized column: its restart is bounded by node_restart.delay_s, the imports by no setting
    central = _column("central", 1, pin_cpus(1, 1, [0, 1]))
    central.recovery_s, central.largest_s = 8.0, 6.0
    central.largest_phase, central.settings = "detection + restart + worker start", {"node_restart.delay_s": 1.0}
    [line] = [x for x in conclusions([central, tuned]) if x.startswith("On central")]
    assert line == ("On central the largest part of the 8.0 s recovery is detection + restart + worker start: 6.0 s "
                    "(75%); the settings that bound it: node_restart.delay_s = 1 s; what else shrinks it: fewer or "
                    "lazier imports, a warm file cache. Their effect is not measured here: no other column of this "
                    "mode ran with other values.")


def test_time_to_result_is_the_start_until_the_last_step_first_completed() -> None:
    from chaos.analysis.throughput import time_to_result

    events = [{"event": "run_started", "t": 100.0},
              *[{"event": "step_completed", "t": 100.0 + s, "step": s, "rank": r} for s in (1, 2, 3) for r in (0, 1)],
              {"event": "step_completed", "t": 110.0, "step": 3, "rank": 0}]  # a later repeat of the last step
    assert time_to_result(events) == 3.0
    assert time_to_result([{"event": "run_started", "t": 1.0}]) is None
    one = _column("one", 1, pin_cpus(1, 1, [0, 1]))
    two = _column("two", 2, pin_cpus(2, 1, [0, 1]))
    one.time_to_result_s, two.time_to_result_s = 20.0, 50.0
    rows = {r[0]: r[1:] for r in table([one, two])}
    assert rows["time to result (start → last step, faults included)"] == ["20.0 s", "50.0 s"]
    assert ("Ranked by time to result (wall time from the start to the last step, faults included): one finished the "
            "same 100 steps in 20.0 s, 2.5× faster than two (50.0 s)." in conclusions([one, two]))


def test_conclusions_rank_on_time_to_result_and_cost_not_goodput() -> None:
    """The issue's case: the centralized run finished in half the time, the elastic one had the higher goodput;
    "goodput highest on elastic-tuned" was the only ranking said. The ranking is time to result, then what it cost
    in node-seconds; goodput says why it does not rank the runs. Columns are named by short names (the common
    scenario prefix dropped), never by their long labels."""
    central = _column("compare-centralized", 1, pin_cpus(1, 1, [0, 1]), steps_per_s=330.0)
    tuned = _column("compare-elastic-tuned", 2, pin_cpus(2, 1, [0, 1]), steps_per_s=110.0)
    central.label, tuned.label = "compare-centralized (centralized, 1×1)", "compare-elastic-tuned (elastic, 2×1)"
    central.time_to_result_s, tuned.time_to_result_s = 15.5, 31.0
    central.goodput, tuned.goodput = 0.32, 0.97
    lines = conclusions([tuned, central])
    ranking = next(i for i, line in enumerate(lines) if line.startswith("Ranked by time to result"))
    assert ranking == 1, lines  # right after the fairness sentence
    assert lines[ranking] == ("Ranked by time to result (wall time from the start to the last step, faults "
                              "included): centralized finished the same 100 steps in 15.5 s, 2.0× faster than "
                              "elastic-tuned (31.0 s).")
    assert lines[ranking + 1] == ("To the result, centralized held 1 node × 15.5 s = 15.5 node-seconds, elastic-tuned "
                                  "held 2 nodes × 31.0 s = 62.0 node-seconds.")
    goodput = next(line for line in lines if line.startswith("Goodput"))
    assert goodput.startswith("Goodput under this fault plan is highest on elastic-tuned (0.97), yet centralized "
                              "finished first: goodput measures each run against its own fault-free pace")
    assert "elastic-tuned's steps are slower (110.0 against 330.0 steps/s)" in goodput
    assert not any("(centralized, 1×1)" in line or "(elastic, 2×1)" in line for line in lines)


def test_short_names_fall_back_to_letters_when_scenarios_repeat() -> None:
    from chaos.compare import short_names

    a, b = _column("quickstart", 3, None), _column("quickstart", 3, None)
    assert short_names([a, b]) == ["A", "B"]
    assert short_names([_column("x-a", 1, None), _column("x-b", 1, None)]) == ["a", "b"]
    assert short_names([_column("solo", 1, None)]) == ["solo"]


def test_a_sweep_names_its_runs_relative_to_the_page(tmp_path: Path) -> None:
    """The sweep's run list gave absolute paths of the machine that ran it."""
    from dataclasses import replace

    from chaos.sweep import write_sweep

    runs = tmp_path / "runs"
    base = replace(_column("one", 1, pin_cpus(1, 1, [0, 1]), steps_per_s=100.0), run_dir=str(runs / "r-one"))
    swept = {"two": [(v, replace(_column(f"two-{v}", 2, pin_cpus(2, 1, [0, 1]), steps_per_s=50.0),
                                 run_dir=str(runs / f"r-{v}"))) for v in ("1gbit", "10mbit")]}
    md = write_sweep("bandwidth", base, swept, tmp_path / "pages" / "sweep")["md"].read_text()
    assert "- one: `../../runs/r-one`" in md
    assert "`../../runs/r-10mbit`" in md and str(runs) not in md


def test_a_bad_sweep_is_a_usage_error_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.cli import main
    from chaos.loading import shipped_scenarios_dir

    central = str(shipped_scenarios_dir() / "compare" / "centralized.yaml")
    tuned = str(shipped_scenarios_dir() / "compare" / "elastic-tuned.yaml")
    for sweep, message in (("delay=5ms,soon", "--sweep: delay value 'soon': expected a delay such as 0ms, 5ms or "
                                              "20ms, got 'soon'"),
                           ("delay=5ms,0.005s", "two values name the same link"),
                           ("bandwidth=1gbit,1gbit", "a value is given twice"),
                           ("latency=1ms,2ms", "KIND one of bandwidth, delay")):
        assert main(["compare", central, tuned, "--sweep", sweep]) == 2
        err = capsys.readouterr().err
        assert message in " ".join(err.split()) and "Traceback" not in err
    assert main(["compare", central, "--sweep", "delay=0ms,5ms"]) == 2  # no multi-node scenario: nothing to sweep
    assert "at least one multi-node scenario" in " ".join(capsys.readouterr().err.split())


def test_a_sweep_points_pace_is_taken_after_every_nodes_impairment_took_effect() -> None:
    from chaos.analysis.throughput import impaired_pace

    def step(t: float, s: int, rank: int, duration: float, comm: float) -> dict[str, Any]:
        return {"event": "step_completed", "t": t, "step": s, "rank": rank, "node": f"node{rank}", "pid": rank,
                "duration_s": duration, "comm_s": comm}

    # ten fast steps (0.1 s, half communication) before the delay lands on both nodes, then slow ones (0.5 s)
    events = [{"event": "run_started", "t": 0.0}]
    events += [step(0.1 * s, s, r, 0.1, 0.05) for s in range(1, 11) for r in (0, 1)]
    events += [{"event": "fault_injected", "t": 1.02, "id": 0}, {"event": "fault_injected", "t": 1.05, "id": 1}]
    events += [step(1.0 + 0.5 * (s - 10), s, r, 0.5, 0.45) for s in range(11, 31) for r in (0, 1)]
    pace, share, measured = impaired_pace(sorted(events, key=lambda e: e["t"]))
    assert pace == pytest.approx(2.0) and share == pytest.approx(0.9) and measured == 40
    # a point without faults (a 0 ms delay): the whole run
    plain = [e for e in events if e["event"] != "fault_injected"]
    pace, share, measured = impaired_pace(sorted(plain, key=lambda e: e["t"]))
    assert measured == 58 and share == pytest.approx(0.9)  # 18 fast intervals, 40 slow: the median is a slow one


def test_the_compare_page_says_how_each_framework_recovered_and_what_it_cannot_lose() -> None:
    from dataclasses import replace

    from chaos.compare import _recovery_model, recovery_models

    central = replace(_column("central", 1, None), recovery_s=3.7, lost_steps=30, restarts=1,
                      largest_phase="detection + restart", largest_s=3.6,
                      **_recovery_model({"launcher": "process", "orchestrator": "the engine (cluster.node_restart)"}))
    tf = replace(_column("tf", 2, None), mode="tf-multiworker", recovery_s=10.2, lost_steps=30, restarts=2,
                 **_recovery_model({"launcher": "tf-multiworker"}))  # recorded without them: the class's words
    lines = recovery_models([central, tf])
    assert lines[0].startswith("central: restart of the whole job") and "3.7 s after the fault" in lines[0]
    assert "30 steps trained again" in lines[0] and "Single point of failure: node0" in lines[0]
    assert lines[1].startswith("tf: relaunch by the supervisor") and "10.2 s" in lines[1]
    assert "none among the workers" in lines[1] and "2 worker restarts" in lines[1]
    # no Flower run in this comparison: the line says where Flower runs are compared (their own page)
    assert lines[-1].startswith("Not in this comparison: Flower") and "reports/compare/flower/compare.html" in lines[-1]
    unknown = replace(_column("x", 2, None), mode="elastic", **_recovery_model({"launcher": "not-installed"}))
    assert "none named by its launcher" in recovery_models([unknown])[0]
