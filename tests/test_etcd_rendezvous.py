"""The etcd rendezvous backends (chaos/rendezvous/etcd.py): validation, the members in the plan, torchrun's
arguments, and faults on a member. No etcd runs here (tests/integration/test_etcd_rendezvous.py runs one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.plan import build_plan
from chaos.registry import rendezvous_plugins
from chaos.scenario import Scenario
from tests.test_engine_parts import stand_in  # noqa: F401 (the fixture)


def validate(rendezvous: dict[str, Any], faults: list[dict[str, Any]] | None = None,
             runtime: str = "local") -> Scenario:
    return Scenario.model_validate({"name": "t", "workload": {"name": "ddp-mlp"}, "faults": faults or [],
                                    "cluster": {"nodes": 3, "min_nodes": 2, "runtime": runtime,
                                                "rendezvous": rendezvous}})


def test_both_backends_are_plug_ins_needing_rendezvous_servers() -> None:
    plugins = rendezvous_plugins()
    assert {"etcd", "etcd-v2"} <= set(plugins)
    assert all(plugins[n].needs == {"rendezvous_servers"} and not plugins[n].uses_c10d_store
               for n in ("etcd", "etcd-v2"))


@pytest.mark.parametrize("runtime", ["netns", "docker"])
def test_on_an_own_stack_runtime_each_member_has_an_address_of_its_own(runtime: str, tmp_path: Path) -> None:
    """On netns and docker a member is an endpoint like a node: its own namespace or container and address, the
    members' peer URLs and torchrun's endpoint at those addresses, never the engine's loopback."""
    from chaos.registry import runtime_class

    scenario = validate({"backend": "etcd", "members": 3}, runtime=runtime)
    rt = runtime_class(runtime)("r1", tmp_path)
    net = rt.addressing(scenario)
    plan = build_plan(scenario, "r1", tmp_path, net)
    members = {s.name: net.addresses[s.name] for s in plan.servers}
    assert list(members) == ["etcd0", "etcd1", "etcd2"]
    assert len(set(members.values()) | {net.addresses[n.name] for n in plan.nodes}) == 6, net.addresses
    etcd1 = plan.servers[1]
    assert etcd1.argv[etcd1.argv.index("--listen-client-urls") + 1].startswith(f"http://{members['etcd1']}:")
    cluster = etcd1.argv[etcd1.argv.index("--initial-cluster") + 1]
    assert all(f"{n}=http://{a}:" in cluster for n, a in members.items()) and "127.0.0.1" not in cluster
    assert f"--rdzv-endpoint={members['etcd0']}:{plan.servers[0].env['ETCD_CLIENT_PORT']}" in plan.nodes[2].argv


@pytest.mark.parametrize("backend", ["etcd", "etcd-v2"])
def test_the_plan_runs_the_members_and_points_torchrun_at_etcd0(backend: str, tmp_path: Path) -> None:
    scenario = validate({"backend": backend, "members": 3})
    plan = build_plan(scenario, "r1", tmp_path)
    assert [s.name for s in plan.servers] == ["etcd0", "etcd1", "etcd2"] and plan.store is None
    etcd0 = plan.servers[0]
    assert etcd0.argv[0] == "etcd" and "--enable-v2=true" in etcd0.argv and etcd0.role == "server"
    cluster = etcd0.argv[etcd0.argv.index("--initial-cluster") + 1]
    assert cluster.count("=http://127.0.0.1:") == 3
    args = plan.nodes[1].argv
    client = etcd0.env["ETCD_CLIENT_PORT"]
    assert f"--rdzv-backend={backend}" in args and f"--rdzv-endpoint=127.0.0.1:{client}" in args
    conf = next(a for a in args if a.startswith("--rdzv-conf="))
    assert "is_host" not in conf
    if backend == "etcd":
        assert conf == "--rdzv-conf=timeout=60,last_call_timeout=2"
    else:
        assert "join_timeout=60" in conf and "read_timeout=10" in conf
    assert "servers" in plan.to_dict()


def test_one_member_by_default(tmp_path: Path) -> None:
    plan = build_plan(validate({"backend": "etcd"}), "r1", tmp_path)
    assert [s.name for s in plan.servers] == ["etcd0"]


def test_refusals_name_the_field_and_what_was_expected() -> None:
    from chaos.registry import runtime_class

    netns = runtime_class("netns")
    with pytest.MonkeyPatch.context() as mp:  # a runtime that cannot run servers (a third party's, say)
        mp.setattr(netns, "capabilities", netns.capabilities - {"rendezvous_servers"})
        with pytest.raises(ValueError, match=r"cluster.rendezvous.backend: etcd needs .*rendezvous backend's "
                                             r"servers.*; the netns runtime does not: set cluster.runtime: "):
            validate({"backend": "etcd"}, runtime="netns")
    with pytest.raises(ValueError, match=r"cluster.rendezvous.store: etcd-v2 keeps the rendezvous in its own "
                                         r"servers"):
        validate({"backend": "etcd-v2", "store": "dedicated"})
    with pytest.raises(ValueError, match=r"cluster.rendezvous.members: c10d runs no servers of its own"):
        validate({"members": 3})
    with pytest.raises(ValueError, match=r"members\n.*Input should be 1 or 3"):
        validate({"backend": "etcd", "members": 2})


def test_faults_on_a_member() -> None:
    crash = {"kind": "crash", "target": "etcd2", "at_step": 5}
    assert validate({"backend": "etcd", "members": 3}, [crash]).faults[0].target == "etcd2"
    with pytest.raises(ValueError, match=r"faults\[0\].target: etcd2 is not a server of this cluster's rendezvous "
                                         r"\(backend: etcd, servers etcd0\)"):
        validate({"backend": "etcd"}, [crash])
    with pytest.raises(ValueError, match=r"faults\[0\].target: etcd0 is not a server.*backend: c10d, which runs "
                                         r"none"):
        validate({}, [{**crash, "target": "etcd0"}])
    with pytest.raises(ValueError, match=r"faults\[0\].target: kill_worker cannot act on a rendezvous server"):
        validate({"backend": "etcd"}, [{**crash, "kind": "kill_worker", "target": "etcd0"}])


@pytest.mark.usefixtures("stand_in")
def test_the_engine_starts_members_first_and_faults_reach_them(tmp_path: Path) -> None:
    from chaos.engine import FaultScheduler, FaultStatus, NodeOrchestrator, NodeStatus
    from chaos.plan import NodePlan
    from chaos.scenario import NodeRestart, make_fault
    from tests.test_engine_parts import Run

    faults = [make_fault(kind="crash", target="etcd1", at_step=3)]
    run = Run(tmp_path, faults)
    run.plan.servers = [NodePlan(f"etcd{i}", i, ["etcd"], {}, role="server") for i in range(3)]
    run.nodes = NodeOrchestrator(run.runtime, run.plan, NodeRestart(), run.history,  # type: ignore[arg-type]
                                 run.notes.append)
    run.faults = FaultScheduler(faults, run.runtime, run.plan, run.history, tmp_path / "acks",  # type: ignore[arg-type]
                                run.nodes, run.progress, run.notes.append)
    run.nodes.start_cluster()
    assert run.runtime.started[:3] == ["etcd0", "etcd1", "etcd2"] and run.runtime.started[3:] == ["node0", "node1"]
    run.job("step_completed", step=3)
    run.tick(now=1.0)
    assert run.faults.faults[0].status is FaultStatus.DONE and run.faults.faults[0].node == "etcd1"
    run.runtime.codes["etcd1"] = -9
    run.tick(now=2.0)
    assert run.nodes.service_status("etcd1") is NodeStatus.DEAD
    [exited] = [e for e in run.engine_events() if e["event"] == "node_exited"]
    assert exited["node"] == "etcd1" and exited["role"] == "server" and exited["code"] == -9


def test_a_member_container_runs_the_hosts_binary_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.runtimes.docker import SERVER_BIN, host_binary

    tool = tmp_path / "etcd"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    binds: dict[str, dict[str, str]] = {}
    assert host_binary(["etcd", "--name", "etcd0"], binds) == [f"{SERVER_BIN}/etcd", "--name", "etcd0"]
    assert binds == {str(tool): {"bind": f"{SERVER_BIN}/etcd", "mode": "ro"}}
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(RuntimeError, match=r"etcd is not installed on this host: the docker runtime runs a "
                                           r"rendezvous server from the host's binary"):
        host_binary(["etcd"], {})


def test_the_image_carries_the_etcd_client_at_the_hosts_versions() -> None:
    import importlib.metadata

    from chaos.image import dockerfile_text, image_inputs

    pytest.importorskip("etcd", reason="python-etcd is not installed here (pip install 'torch-chaos[etcd]')")
    version = importlib.metadata.version("python-etcd")
    assert f"python-etcd=={version}" in image_inputs()["etcd_client"]
    assert f"python-etcd=={version}" in dockerfile_text()
