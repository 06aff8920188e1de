"""Network faults and runtimes in scenario files and plans: every mistake is a clear error at validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.doctor import unmet
from chaos.faults.partition import Partition
from chaos.loading import ScenarioInvalid, parse_scenario
from chaos.plan import build_plan
from chaos.runtimes.netns import NetnsRuntime


def errors_of(text: str) -> list[str]:
    with pytest.raises(ScenarioInvalid) as exc:
        parse_scenario(text, "s.yaml")
    return [str(e) for e in exc.value.errors]


def scenario_text(fault: str, runtime: str = "netns", store: str = "node0") -> str:
    return (f"name: n\ncluster: {{runtime: {runtime}, nodes: 3, rendezvous: {{store: {store}}}}}\n"
            f"workload: {{name: ddp-mlp}}\nfaults:\n  - {fault}\n")


@pytest.mark.parametrize(("fault", "message"), [
    ("{kind: delay, target: 1, at_step: 3}", "delay needs delay, e.g. delay: 100ms"),
    ("{kind: loss, target: 1, at_step: 3}", "loss needs loss_percent"),
    ("{kind: loss, target: 1, at_step: 3, loss_percent: 120}", "less than or equal to 100"),
    ("{kind: bandwidth, target: 1, at_step: 3, rate: fast}", "expected a tc rate such as 10mbit"),
    ("{kind: partition, at_step: 3}", "partition needs groups"),
    ("{kind: partition, at_step: 3, groups: [[0]]}", "expected two non-empty groups"),
    ("{kind: partition, at_step: 3, groups: [[0, 1], [1]]}", "cannot be on both sides"),
    ("{kind: partition, target: 1, at_step: 3, groups: [[0], [1]]}", "takes groups, not a target"),
    ("{kind: partition, at_step: 3, groups: [[0], [7]]}", "node 7 does not exist"),
    ("{kind: crash, target: 1, at_step: 3, rate: 1mbit}", "rate applies to kind: bandwidth only"),
    ("{kind: delay, target: 1, at_step: 3, delay: 10ms, one_way: true}", "one_way applies to kind: partition"),
])
def test_network_fault_errors(fault: str, message: str) -> None:
    errs = errors_of(scenario_text(fault))
    assert any(message in e for e in errs), errs
    assert all(e.startswith("s.yaml:5: faults[0]") for e in errs), errs


def test_network_fault_needs_a_network_per_node() -> None:
    errs = errors_of(scenario_text("{kind: isolate, target: 1, at_step: 3}", runtime="local"))
    assert any("isolate needs a runtime that gives each node a network stack of its own" in e
               and "set cluster.runtime: docker or netns" in e for e in errs), errs


def test_unknown_runtime_is_named() -> None:
    errs = errors_of(scenario_text("{kind: crash, target: 1, at_step: 3}", runtime="kubernetes"))
    assert any("expected 'docker', 'local', 'netns' or 'slurm'" in e for e in errs), errs


def netns_plan(tmp_path: Path, fault: str, store: str = "node0"):  # type: ignore[no-untyped-def]
    s = parse_scenario(scenario_text(fault, store=store))
    runtime = NetnsRuntime("20261130-000000-n-abc123", tmp_path)
    return build_plan(s, "20261130-000000-n-abc123", tmp_path, runtime.addressing(s))


def test_netns_plan_gives_every_node_its_address(tmp_path: Path) -> None:
    plan = netns_plan(tmp_path, "{kind: crash, target: 1, at_step: 3}")
    for i, node in enumerate(plan.nodes):
        assert f"--local-addr={plan.addresses[node.name]}" in node.argv
        assert f"--rdzv-endpoint={plan.addresses['node0']}:{plan.store_port}" in node.argv
        assert any(a.startswith("--rdzv-conf=is_host=" + ("true" if i == 0 else "false")) for a in node.argv)
        assert node.env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert len(set(plan.addresses.values())) == 3


def test_partition_cuts_resolve_the_store(tmp_path: Path) -> None:
    """Cuts are silent ingress drops in the receiver's namespace; a node0-hosted store is node 0's store port."""
    plan = netns_plan(tmp_path, "{kind: partition, at_step: 3, groups: [[1], [store]]}")
    ns, match = Partition._cut(plan, "node1", "store")
    assert ns == "node0" and match == ["-s", plan.addresses["node1"], "-p", "tcp", "--dport", str(plan.store_port)]
    ns, match = Partition._cut(plan, "store", "node1")
    assert ns == "node1" and match == ["-s", plan.addresses["node0"], "-p", "tcp", "--sport", str(plan.store_port)]
    with pytest.raises(ValueError, match="share node0's network stack"):
        Partition._cut(plan, "node0", "store")
    dedicated = netns_plan(tmp_path, "{kind: partition, at_step: 3, groups: [[0], [store]]}", store="dedicated")
    assert Partition._cut(dedicated, "node0", "store") == ("store", ["-s", dedicated.addresses["node0"]])


def test_node0_and_its_own_store_cannot_be_partitioned() -> None:
    errs = errors_of(scenario_text("{kind: partition, at_step: 3, groups: [[1, 0], [store]]}"))
    assert any("node 0 hosts the rendezvous store" in e for e in errs), errs


def test_local_scenarios_need_nothing_from_the_machine() -> None:
    s = parse_scenario("name: l\nworkload: {name: ddp-mlp}\nfaults:\n  - {kind: crash, target: 1, at_step: 3}\n")
    assert unmet(s) == []


def test_dry_run_shows_network_addresses_and_creates_nothing(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    assert main(["run", "network/partial-partition", "--dry-run", "--json", "--out", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["runtime"] == "netns" and plan["addresses"]["node1"].startswith("10.213.0.")
    assert plan["faults"][0]["kind"] == "partition"
    assert not any(tmp_path.iterdir())


def test_validate_refuses_a_scenario_this_machine_cannot_run(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Missing pieces are found at validation, with the fix, never halfway through a run."""
    s = tmp_path / "needs-an-image.yaml"
    s.write_text("name: img\ncluster: {runtime: docker, nodes: 2, docker: {image: 'torch-chaos:not-built-here'}}\n"
                 "workload: {name: ddp-mlp}\n")
    assert main(["validate", str(s)]) == 2
    message = capsys.readouterr().err.replace("\n", " ")
    assert "cannot run it yet" in message and "fix:" in message
    assert "chaos image build" in message or "dockerd" in message
    assert main(["validate", "--no-machine", str(s)]) == 0
    assert main(["run", str(s), "--out", str(tmp_path / "runs")]) == 2
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_doctor_names_a_fix_for_every_gap(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import chaos.launchers.ray as ray_launcher

    # The Ray check imports ray in a new interpreter (~0.7 CPU-s): the first doctor runs it for real, the second
    # (the same checks drawn as a table) is handed that answer again.
    real, answers = ray_launcher.ray_version, []

    def ray_version() -> tuple[str | None, str]:
        if not answers:
            answers.append(real())
        return answers[0]

    monkeypatch.setattr(ray_launcher, "ray_version", ray_version)
    code = main(["doctor", "--json"])
    assert answers, "the Ray check was not run"
    checks = json.loads(capsys.readouterr().out)
    names = {c["name"] for c in checks}
    assert {"root", "docker engine", "docker image", "iptables", "debootstrap (offline image build)"} <= names
    assert all(c["fix"] for c in checks if not c["ok"]), checks
    assert code in (0, 1)
    main(["doctor"])  # the table, and where the plug-ins behind its checks are listed
    said = " ".join(capsys.readouterr().out.split())
    assert "what this machine supports" in said and "`chaos plugins` lists each" in said, said[-400:]


@pytest.mark.parametrize("kind", ["delay: 100ms", "loss_percent: 5", "rate: 1mbit", "groups: [[0], [1]]", ""])
def test_network_fault_durations_are_seconds(kind: str) -> None:
    """Every network kind reads `duration: 20s` as 20.0 seconds (the engine adds it to a time)."""
    name = {"delay": "delay", "loss_percent": "loss", "rate": "bandwidth", "groups": "partition"}.get(
        kind.split(":")[0], "isolate")
    target = "" if name == "partition" else ", target: 1"
    extra = f", {kind}" if kind else ""
    s = parse_scenario(scenario_text(f"{{kind: {name}{target}, at_step: 3, duration: 20s{extra}}}"))
    assert s.faults[0].duration == 20.0
