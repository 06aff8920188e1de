"""`chaos cluster` without a cluster: the generated slurm.conf and state file, the dry run, the CLI's argument
errors, what a machine without a Docker engine gets, and how `chaos cleanup` tells a cluster from an orphan.

The real cluster (up, sinfo, srun, a killed node, down) is tests/integration/test_slurm_cluster.py."""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.cluster import slurm
from chaos.cluster.spec import (
    CLUSTER_LABEL,
    ID_LABEL,
    PID_LABEL,
    STATE_DIR_ENV,
    STATE_LABEL,
    ClusterSpec,
    check_name,
    check_nodes,
    slurm_conf,
    state,
    state_path,
)

SUBNET = ipaddress.ip_network("172.30.7.0/24")


def conf_settings(text: str) -> dict[str, str]:
    pairs = [line.split("=", 1) for line in text.splitlines() if line and not line.startswith(("#", "NodeName",
                                                                                                  "PartitionName"))]
    return {k: v for k, v in pairs}


def test_slurm_conf_has_the_lab_settings_and_one_line_per_node() -> None:
    spec = ClusterSpec("slurm", 3, SUBNET, cpus=2)
    text = slurm_conf(spec)
    settings = conf_settings(text)
    assert settings["ProctrackType"] == "proctrack/linuxproc"
    assert settings["TaskPlugin"] == "task/none"
    assert settings["SlurmdParameters"] == "config_overrides"
    assert settings["ReturnToService"] == "2"
    assert settings["SlurmdTimeout"] == "10"
    assert settings["MessageTimeout"] == "5"  # 19.5 s to down* after a job instead of ~31 s (spec.py)
    assert settings["AuthType"] == "auth/munge"
    assert settings["SlurmctldHost"] == "ctl(172.30.7.2)"
    nodes = [line for line in text.splitlines() if line.startswith("NodeName=")]
    assert nodes == [f"NodeName=c{i} NodeAddr=172.30.7.{9 + i} NodeHostname=c{i} CPUs=2 State=UNKNOWN"
                     for i in (1, 2, 3)]
    assert text.splitlines()[-1] == "PartitionName=chaos Nodes=c[1-3] Default=YES MaxTime=INFINITE State=UP"
    assert "Nodes=c1 " in slurm_conf(ClusterSpec("one", 1, SUBNET))


def test_names_and_addresses_do_not_collide() -> None:
    spec = ClusterSpec("lab", 200, SUBNET)
    addresses = [spec.address(h) for h in spec.hosts]
    assert len(set(addresses)) == len(addresses) == 201
    assert all(ipaddress.ip_address(a) in SUBNET for a in addresses)
    assert spec.gateway not in addresses
    assert {spec.container(h) for h in spec.hosts} == {"tchaos-lab-ctl", *(f"tchaos-lab-c{i}" for i in
                                                                          range(1, 201))}
    assert (spec.network, spec.volume) == ("tchaos-lab", "tchaos-lab-shared")


def test_state_file_names_what_the_slurm_runtime_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    spec = ClusterSpec("slurm", 2, SUBNET)
    st = state(spec, cluster_id="abcd", image="torch-chaos-slurm:x", shared_host_path="/var/lib/docker/v/_data",
               repo="/repo", python="/opt/venv/bin/python", created="2026-12-02T00:00:00+00:00")
    assert st["version"] == 1 and st["kind"] == "slurm" and st["id"] == "abcd"
    assert st["controller"] == {"hostname": "ctl", "container": "tchaos-slurm-ctl", "address": "172.30.7.2"}
    assert [n["name"] for n in st["nodes"]] == ["c1", "c2"] and st["node_list"] == "c[1-2]"
    assert st["user"] == {"name": "chaos", "uid": 1000, "gid": 1000, "home": "/home/chaos"}
    assert st["shared"] == {"volume": "tchaos-slurm-shared", "host_path": "/var/lib/docker/v/_data",
                            "path": "/shared"}
    assert st["exec"] == ["docker", "exec", "-u", "chaos", "-w", "/shared", "tchaos-slurm-ctl"]
    assert json.loads(json.dumps(st)) == st
    assert state_path("slurm") == tmp_path / "clusters" / "slurm.json"


@pytest.mark.parametrize(("name", "ok"), [("slurm", True), ("a-1", True), ("Slurm", False), ("1abc", False),
                                          ("x" * 32, False), ("a_b", False), ("", False)])
def test_cluster_names(name: str, ok: bool) -> None:
    assert (check_name(name) is None) == ok


def test_node_counts() -> None:
    assert check_nodes(1) is None and check_nodes(200) is None
    assert "at least 1" in str(check_nodes(0)) and "at most 200" in str(check_nodes(201))


@pytest.mark.parametrize(("argv", "message"), [
    (["cluster", "up", "slurm"], "--nodes N is required"),
    (["cluster", "up", "slurm", "--nodes", "0"], "at least 1 compute node"),
    (["cluster", "up", "slurm", "--nodes", "500"], "at most 200"),
    (["cluster", "up", "slurm", "--nodes", "2", "--name", "Bad_Name"], "cluster name 'Bad_Name'"),
    (["cluster", "up", "slurm", "--nodes", "2", "--timeout", "0"], "--timeout 0: expected seconds > 0"),
    (["cluster", "down", "--nodes", "3"], "--nodes: only `chaos cluster up` takes it"),
    (["cluster", "status", "--dry-run"], "--dry-run: only `chaos cluster up` takes it"),
])
def test_cli_argument_errors_exit_2_with_the_reason(argv: list[str], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["cluster", "up", "pbs", "--nodes", "2"], ["cluster", "sideways"]])
def test_cli_unknown_kind_or_action_is_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_dry_run_shows_every_step_and_the_conf(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "up", "slurm", "--nodes", "2", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    commands = [s["command"] for s in plan["steps"]]
    assert commands[0].startswith("docker network create --driver bridge --internal --subnet ")
    assert commands[1].startswith("docker volume create ")
    creates = [c for c in commands if c.startswith("docker create ")]
    assert [c.split("--hostname ")[1].split()[0] for c in creates] == ["ctl", "c1", "c2"]
    assert all(f"--label {CLUSTER_LABEL}=slurm" in c for c in commands[:2] + creates)
    assert "NodeName=c2 " in plan["slurm_conf"] and plan["image"].startswith("torch-chaos-slurm:")
    assert main(["cluster", "up", "slurm", "--nodes", "2", "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "apt-get" in text and "--download-only" in text and "PartitionName=chaos" in text


def test_without_a_docker_engine_every_action_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    for argv in (["cluster", "up", "slurm", "--nodes", "2"], ["cluster", "down"], ["cluster", "status"],
                 ["cluster", "build"]):
        assert main(argv) == 1, argv
        assert "docker engine unreachable" in capsys.readouterr().err
    assert main(["cluster", "up", "slurm", "--nodes", "2", "--dry-run"]) == 0  # the plan needs no engine
    assert slurm.cleanup(None, only_orphans=False) == []
    check = slurm.machine_checks()[0]
    assert not check.ok and not check.required and "dockerd" in check.fix


@pytest.mark.parametrize("error", ["api", "connection"])
def test_a_docker_engine_failing_mid_command_is_an_error_not_a_traceback(
        error: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import docker.errors
    import requests

    def fail(*_: object, **__: object) -> None:
        raise (docker.errors.APIError("500 Server Error: no space left on device") if error == "api"
               else requests.ConnectionError("Connection aborted"))

    for action in ("down", "status", "build_slurm_image"):
        monkeypatch.setattr(slurm, action, fail)
    for argv in (["cluster", "down"], ["cluster", "status"], ["cluster", "build"]):
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert "error" in err and "Traceback" not in err and "chaos cluster down" in err, err


def test_apt_resolves_against_the_image_not_the_host() -> None:
    cmd = slurm.apt_download_command(Path("/tmp/s/status"), Path("/tmp/s/debs"))
    assert "Dir::State::status=/tmp/s/status" in cmd and "--download-only" in cmd
    assert cmd[-6:] == ["slurmctld", "slurmd", "slurm-client", "munge", "fuse3", "libfuse3-3"]


def test_a_cluster_is_claimed_by_its_state_file_or_its_live_up(tmp_path: Path) -> None:
    path = tmp_path / "clusters" / "x.json"
    dead_pid = "999999999"
    labels = {CLUSTER_LABEL: "x", ID_LABEL: "id1", STATE_LABEL: str(path), PID_LABEL: dead_pid}
    assert not slurm._claimed(labels)  # `up` died before writing the state file: an orphan
    assert slurm._claimed({**labels, PID_LABEL: str(os.getpid())})  # `up` still running
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"id": "id1"}))
    assert slurm._claimed(labels)
    path.write_text(json.dumps({"id": "another bring-up"}))
    assert not slurm._claimed(labels)
    path.write_text("{damaged")
    assert not slurm._claimed(labels)


def test_cleanup_with_a_run_id_leaves_clusters_alone() -> None:
    assert slurm.cleanup("some-run", only_orphans=False) == []


def test_missing_node_image_says_to_build_it(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        slurm._docker()
    except slurm.ClusterError as exc:
        pytest.skip(f"needs a Docker engine: {exc}")
    monkeypatch.setattr(slurm, "image_tag", lambda: "torch-chaos:no-such-image")
    with pytest.raises(slurm.ClusterError, match=r"node image torch-chaos:no-such-image is not built.*chaos image "
                       r"build"):
        slurm.build_slurm_image(log=lambda line: None)


class FakeEngine:
    """Just enough of the docker SDK's low-level API for wait_idle: container states, one sinfo answer, logs."""

    def __init__(self, sinfo: str, stopped: str | None = None):
        self.sinfo, self.stopped, self.api = sinfo, stopped, self

    def inspect_container(self, name: str) -> dict[str, dict[str, object]]:
        return {"State": {"Status": "exited", "ExitCode": 1} if name == self.stopped else {"Status": "running"}}

    def exec_create(self, container: str, cmd: list[str], **kwargs: object) -> dict[str, str]:
        return {"Id": "exec"}

    def exec_start(self, exec_id: str) -> bytes:
        return self.sinfo.encode()

    def exec_inspect(self, exec_id: str) -> dict[str, int]:
        return {"ExitCode": 0}

    def logs(self, container: str, tail: int) -> bytes:
        return f"{container}: error: last words".encode()


def test_waiting_for_idle_is_bounded_and_says_what_it_saw() -> None:
    spec = ClusterSpec("slurm", 2, SUBNET)
    slurm.wait_idle(FakeEngine("c1 idle\nc2 idle\n"), spec, timeout_s=5)  # returns at once
    with pytest.raises(slurm.ClusterError, match=r"(?s)not idle after 0 s \(c1=idle, c2=down\*\).*tchaos-slurm-ctl: "
                       r"error: last words.*--timeout"):
        slurm.wait_idle(FakeEngine("c1 idle\nc2 down*\n"), spec, timeout_s=0.3)
    with pytest.raises(slurm.ClusterError, match=r"(?s)tchaos-slurm-c2 stopped \(exit 1\).*tchaos-slurm-c2: error: "
                       "last words"):
        slurm.wait_idle(FakeEngine("", stopped="tchaos-slurm-c2"), spec, timeout_s=5)
