"""One scenario matrix across runtimes: shipped scenarios run for real on netns and docker, each with its
documented verdict (``chaos run NAME --runtime RUNTIME``; one file per scenario, not a copy per runtime).

Each starts real torchrun agents in real network namespaces or containers and injects real faults (SIGKILL,
SIGSTOP / docker pause, iptables DROP, tc tbf, an NFQUEUE delayer). Under CI=true a missing piece (docker, root,
the image) fails the test; elsewhere it is skipped with the command that fixes it. The local runtime's runs of the
same scenarios are test_shipped_scenarios.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from chaos.history import read_history
from tests.runs import run_shipped, shipped, steps_run

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

# The scenarios whose runtime changes how the fault is made (a node's tree or container killed and replaced with
# the same address, a store in its own namespace or container, SIGSTOP or docker pause, and the network faults,
# which need a network per node). Scenarios that only differ in torchrun settings or checkpoint contents run on
# local alone.
EXPECTED_VERDICT = {
    "quickstart": "pass",
    "elastic-dedicated-store-node-crash": "pass",
    "elastic-freeze": "pass",
    "network/delay": "pass",
    "network/bandwidth": "pass",
    "network/isolate": "pass",
    "network/partial-partition": "restart_loop",
}
RUNTIMES = ("netns", "docker")
CASES = [pytest.param(runtime, name, id=f"{runtime}-{name.removeprefix('network/')}")
         for runtime in RUNTIMES for name in sorted(EXPECTED_VERDICT)]


def cases(*names: str) -> list[Any]:
    return [c for c in CASES if c.values[1] in names]


def run_case(runtime: str, name: str, machine_for: Callable[[Any], None]) -> tuple[dict[str, Any], Any]:
    machine_for(shipped(name, runtime))
    return run_shipped(name, runtime)


@pytest.mark.parametrize(("runtime", "name"), CASES)
def test_documented_verdict(runtime: str, name: str, machine_for: Callable[[Any], None]) -> None:
    result, run_dir = run_case(runtime, name, machine_for)
    assert result["verdict"] == EXPECTED_VERDICT[name], (result["why"], run_dir)
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    assert resolved["cluster"]["runtime"] == runtime, "the run's resolved scenario names the runtime it ran on"
    [fault] = result["faults"]
    assert fault["mechanism"], fault
    injected = [e for e in read_history(run_dir / "events.jsonl") if e.get("event") == "fault_injected"]
    assert len(injected) == 1, "the fault was not injected"
    if EXPECTED_VERDICT[name] == "pass":
        assert result["steps_completed"] == steps_run(name), result["why"]
    if name in ("quickstart", "elastic-dedicated-store-node-crash", "network/isolate"):
        # what the per-runtime copies of these scenarios expected of the checkpoints, checked here
        for verdict in ("digests_ok", "resumed_from_newest_valid", "exactly_once"):
            assert result["checkpoint"][verdict]["ok"] is True, (verdict, result["checkpoint"][verdict])
    if name in ("quickstart", "elastic-dedicated-store-node-crash"):
        assert result["checkpoint"]["matches_golden"]["ok"] is True, result["checkpoint"]["matches_golden"]


@pytest.mark.parametrize(("runtime", "name"), cases("quickstart", "elastic-freeze", "network/isolate"))
def test_disruption_measured(runtime: str, name: str, machine_for: Callable[[Any], None]) -> None:
    """A crash, a freeze or an isolated node: the job restarts, and recovery and lost work are measured."""
    result, run_dir = run_case(runtime, name, machine_for)
    [fault] = result["faults"]
    assert fault["restarted"], (fault, run_dir)
    assert fault["recovery_s"] is not None and 0 < fault["recovery_s"] < 120, fault
    assert 0 <= fault["lost_steps"] <= 50, fault


@pytest.mark.parametrize(("runtime", "name"), cases("network/delay", "network/bandwidth"))
def test_impairment_slows_without_restart_and_heals_exactly(runtime: str, name: str,
                                                            machine_for: Callable[[Any], None]) -> None:
    result, run_dir = run_case(runtime, name, machine_for)
    [fault] = result["faults"]
    assert not fault["restarted"], fault
    assert fault["slowdown"] is not None and fault["slowdown"] > 2, fault
    events = read_history(run_dir / "events.jsonl")
    [injected] = [e for e in events if e.get("event") == "fault_injected"]
    [healed] = [e for e in events if e.get("event") == "fault_healed"]
    assert injected["details"]["mechanism"] in ("netem", "nfqueue", "tbf"), injected
    assert healed["restored"] is True, healed  # iptables rules and qdiscs exactly as before the fault
    if injected["details"]["mechanism"] == "nfqueue":
        assert healed["delayer"]["exit_code"] == 0 and healed["delayer"]["packets"] > 0, healed
        assert 90 <= healed["delayer"]["mean_delay_ms"] <= 250, healed  # ~100 ms added; late wakeups under load
    assert result["checkpoint"]["matches_golden"]["mode"] == "bitwise", result["checkpoint"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_partial_partition_loops_and_is_reported(runtime: str, machine_for: Callable[[Any], None]) -> None:
    result, run_dir = run_case(runtime, "network/partial-partition", machine_for)
    assert result["verdict"] == "restart_loop", result["why"]
    assert result["steps_completed"] < steps_run("network/partial-partition")
    [fault] = result["faults"]
    assert fault["target"] == "network"
    starts = [e for e in read_history(run_dir / "events.jsonl")
              if e.get("event") == "process_started" and e.get("rank") == 0 and e["t"] > fault["t_injected"]]
    assert len(starts) >= 3, "the workers did not restart repeatedly after the partition"


WORKER_AND_STORAGE_FAULTS = """\
name: {runtime}-worker-and-storage-faults
cluster: {{runtime: {runtime}, nodes: 2, min_nodes: 2}}
workload: {{name: ddp-mlp, args: {{steps: 400, checkpoint_every: 50}}}}
faults:
  - {{kind: kill_worker, target: 1, at_step: 120}}
  - {{kind: corrupt_checkpoint, mode: flip, at_step: 260}}
  - {{kind: segfault, target: 0, local_rank: 0, at_step: 270}}
expect:
  checkpoint: {{digests_ok: true, resumed_from_newest_valid: true, exactly_once: true, matches_golden: bitwise}}
limits: {{deadline_s: 240, stall_timeout_s: 60}}
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_worker_kill_and_checkpoint_damage_through_the_mount(runtime: str,
                                                            machine_for: Callable[[Any], None]) -> None:
    """kill_worker reaches the workers (from the host, into the container) and leaves the agent, which restarts
    them; corrupt_checkpoint damages the newest checkpoint on the shared mount, and the resume skips it; a segfault
    is a SIGSEGV to the one worker, which the agent reports as exit code -11 (not the -9 of a kill)."""
    from chaos.loading import parse_scenario
    from tests.runs import run_scenario

    scenario = parse_scenario(WORKER_AND_STORAGE_FAULTS.format(runtime=runtime))
    machine_for(scenario)
    result, run_dir = run_scenario(scenario)
    assert result["verdict"] == "pass", (result["why"], run_dir)
    kills = [f for f in result["faults"] if f["kind"] in ("kill_worker", "segfault")]
    assert all(f["restarted"] and "agent stays" in f["mechanism"] for f in kills), kills
    assert kills[0]["mechanism"].startswith("SIGKILL") and kills[1]["mechanism"].startswith("SIGSEGV"), kills
    assert "exitcode: -11" in (run_dir / "logs" / "node0.log").read_text()
    assert result["node_replacements"] == 0  # the agents restarted their workers; no node was replaced
    [damage] = [e for e in read_history(run_dir / "events.jsonl")
                if e.get("event") == "fault_injected" and e["kind"] == "corrupt_checkpoint"]
    assert damage["details"]["step"] == 250
    assert kills[1]["resumed_from"] == 200, "the resume must skip the damaged step-250 checkpoint"
