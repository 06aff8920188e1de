"""The container cluster's agent without docker: it runs in-process on 127.0.0.1 with a fake engine that records
what it was asked, so every refusal is checked to do nothing, and the Slurm runtime's host loss is checked against
it (the capability, the injection, the return, placement without the lost host).

The agent against a real cluster: tests/integration/test_slurm_runtime.py (the host-lost scenario).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.cluster import agent
from chaos.cluster.spec import STATE_DIR_ENV
from chaos.runtimes import slurm, slurm_commands, slurm_hosts

TOKEN = "0123456789abcdef0123456789abcdef"


class FakeDocker:
    """This cluster (``lab``, id ``abcd``) has compute containers c1..c3; it records every kill and start."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def compute_container(self, cluster: str, cluster_id: str, host: str) -> str | None:
        self.calls.append(("find", f"{cluster}/{cluster_id}/{host}"))
        if (cluster, cluster_id) == ("lab", "abcd") and host in ("c1", "c2", "c3"):
            return f"tchaos-lab-{host}"
        return None

    def kill(self, container: str) -> None:
        self.calls.append(("kill", container))

    def start(self, container: str) -> None:
        self.calls.append(("start", container))

    def controller_exists(self, cluster: str, cluster_id: str) -> bool:
        return True

    def pid(self, container: str) -> int | None:
        return 1000 + int(container.rsplit("-c", 1)[1])

    def run(self, pid: int, argv: list[str], pid_now: Any) -> tuple[int, str, str]:
        """The agent's nsenter, recorded: (pid, argv) of each command it would run."""
        assert pid_now() == pid
        self.calls.append(("net", f"{pid} {' '.join(argv)}"))
        return 0, f"ran {argv[0]}\n", ""

    def actions(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0] != "find"]


@pytest.fixture
def served() -> Iterator[tuple[dict[str, Any], FakeDocker]]:
    docker = FakeDocker()
    server = agent.AgentServer(("127.0.0.1", 0), token=TOKEN, cluster="lab", cluster_id="abcd", docker=docker,
                               runner=docker.run)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield {"address": "127.0.0.1", "port": server.server_address[1], "token": TOKEN}, docker
    finally:
        server.shutdown()
        server.server_close()


def raw(config: dict[str, Any], payload: bytes) -> dict[str, Any]:
    with socket.create_connection((config["address"], config["port"]), timeout=5) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    return dict(json.loads(data))


def test_lose_and_return_do_exactly_that_and_say_when(served: tuple[dict[str, Any], FakeDocker]) -> None:
    config, docker = served
    lost = agent.ask(config, "lose", "c2")
    assert lost["ok"] and lost["container"] == "tchaos-lab-c2" and lost["done"] == "docker kill"
    assert isinstance(lost["t"], float)
    back = agent.ask(config, "return", "c2")
    assert back["done"] == "docker start" and back["t"] >= lost["t"]
    assert docker.actions() == [("kill", "tchaos-lab-c2"), ("start", "tchaos-lab-c2")]
    assert agent.ask(config, "ping")["cluster"] == "lab"
    assert docker.actions() == [("kill", "tchaos-lab-c2"), ("start", "tchaos-lab-c2")]  # a ping does nothing


@pytest.mark.parametrize(("payload", "why"), [
    (b"not json\n", "not a JSON object"),
    (b"[1, 2]\n", "not a JSON object"),
    (b"\xff\xfe\n", "not a JSON object"),
    (json.dumps({"action": "lose", "host": "c2"}).encode() + b"\n", "wrong token"),
    (json.dumps({"token": "x" * 32, "action": "lose", "host": "c2"}).encode() + b"\n", "wrong token"),
    (json.dumps({"token": 5, "action": "lose", "host": "c2"}).encode() + b"\n", "wrong token"),
    (json.dumps({"token": TOKEN, "action": "rm", "host": "c2"}).encode() + b"\n", "action must be one of"),
    (json.dumps({"token": TOKEN, "action": "lose"}).encode() + b"\n", "exactly the fields"),
    (json.dumps({"token": TOKEN, "action": "lose", "host": "c2", "signal": "TERM"}).encode() + b"\n",
     "exactly the fields"),
    (json.dumps({"token": TOKEN, "action": "ping", "host": "c2"}).encode() + b"\n", "exactly the fields"),
    (json.dumps({"token": TOKEN, "action": "lose", "host": "ctl"}).encode() + b"\n", "compute node's name"),
    (json.dumps({"token": TOKEN, "action": "lose", "host": "c2; rm -rf /"}).encode() + b"\n", "compute node's name"),
    (json.dumps({"token": TOKEN, "action": "lose", "host": ["c2"]}).encode() + b"\n", "compute node's name"),
    (json.dumps({"token": TOKEN, "action": "lose", "host": "c9"}).encode() + b"\n", "has no compute node c9"),
    (b'{"token": "' + b"a" * 5000 + b'"}\n', "longer than"),
    # hostile input is an answer, not a traceback
    (json.dumps({"token": "\ud800", "action": "ping"}).encode() + b"\n", "wrong token"),  # a lone surrogate
    (b"[" * 1000 + b"\n", "not a JSON object"),  # deeper than the parser goes
    (json.dumps({"token": TOKEN, "action": "lose", "host": "c1\n"}).encode() + b"\n", "compute node's name"),
])
def test_anything_else_is_refused_and_does_nothing(served: tuple[dict[str, Any], FakeDocker], payload: bytes,
                                                   why: str) -> None:
    config, docker = served
    answer = raw(config, payload)
    assert answer["ok"] is False and why in answer["error"], answer
    assert docker.actions() == []


@pytest.fixture
def started() -> Iterator[Any]:
    """Start AgentServers in threads (``started(**kwargs)``); all are shut down after the test."""
    servers: list[agent.AgentServer] = []

    def start(**kwargs: Any) -> agent.AgentServer:
        kwargs.setdefault("docker", FakeDocker())
        server = agent.AgentServer(("127.0.0.1", 0), token=TOKEN, cluster="lab", cluster_id="abcd", **kwargs)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _config(server: agent.AgentServer) -> dict[str, Any]:
    return {"address": "127.0.0.1", "port": server.server_address[1], "token": TOKEN}


def _idle(server: agent.AgentServer, n: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """``n`` connections that never say anything, from ``source`` (any 127.x address is this host)."""
    return [socket.create_connection(("127.0.0.1", server.server_address[1]), source_address=(source, 0))
            for _ in range(n)]


def test_only_the_cluster_network_may_connect(started: Any) -> None:
    """A peer off the cluster's subnet (Linux delivers to the gateway's address from any interface) gets no
    answer, and nothing is done."""
    docker = FakeDocker()
    fenced = started(docker=docker, subnet="10.99.0.0/24")
    with pytest.raises(agent.AgentError, match=r"answered no JSON|does not answer"):
        agent.ask(_config(fenced), "lose", "c1", timeout=3)
    assert docker.actions() == []


def test_idle_connections_hold_no_slot(started: Any) -> None:
    """Connections that never send their request used to take the 16 slots (5 s each, reopened: for good); now
    they wait without a slot for READ_TIMEOUT_S at most, and an authenticated request is answered at once
    beside 3x MAX_CONNECTIONS of them."""
    server = started()
    idle = _idle(server, 3 * agent.MAX_CONNECTIONS)
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        assert agent.ask(_config(server), "ping", timeout=3)["ok"]
        assert time.monotonic() - t0 < 1.0
        deadline = time.monotonic() + agent.READ_TIMEOUT_S + 3
        for sock in idle:  # and each is closed by the agent after READ_TIMEOUT_S (or to make room)
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            assert sock.recv(1) == b""
    finally:
        for sock in idle:
            sock.close()


def test_one_address_flooding_cannot_push_out_another(started: Any) -> None:
    """Beyond PER_PEER waiting connections from one address, that address's oldest is closed: a container
    flooding the agent cannot close the login node's connection while its request is still on the way."""
    server = started()
    slow = socket.create_connection(("127.0.0.1", server.server_address[1]), source_address=("127.0.0.3", 0))
    flood = _idle(server, 200, source="127.0.0.2")  # more than MAX_PENDING (128): all from one address
    try:
        time.sleep(0.2)
        assert agent.ask(_config(server), "ping", timeout=3)["ok"]  # a fresh request from elsewhere
        slow.settimeout(3)
        slow.sendall(json.dumps({"token": TOKEN, "action": "ping"}).encode() + b"\n")
        assert json.loads(slow.recv(4096))["ok"]
        assert server.gate.pending() <= agent.PER_PEER  # the flood's own: the rest were closed
    finally:
        slow.close()
        for sock in flood:
            sock.close()


def test_token_bearing_requests_are_handled_in_at_most_max_connections_threads(started: Any) -> None:
    """The slots bound the threads of a root process: requests beyond MAX_CONNECTIONS at once are closed
    unanswered, and the slots come back as the handlers end."""
    release = threading.Event()

    class Slow(FakeDocker):
        def compute_container(self, cluster: str, cluster_id: str, host: str) -> str | None:
            release.wait(10)
            return super().compute_container(cluster, cluster_id, host)

    server = started(docker=Slow())
    config = _config(server)
    answers: list[Any] = []
    busy = [threading.Thread(target=lambda: answers.append(agent.ask(config, "lose", "c1", timeout=15)))
            for _ in range(agent.MAX_CONNECTIONS)]
    for thread in busy:
        thread.start()
    try:
        deadline = time.monotonic() + 5
        while len(server.gate.served()) < agent.MAX_CONNECTIONS:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with pytest.raises(agent.AgentError, match=r"answered no JSON|does not answer"):
            agent.ask(config, "ping", timeout=3)
    finally:
        release.set()
        for thread in busy:
            thread.join(15)
    assert len(answers) == agent.MAX_CONNECTIONS and all(a["ok"] for a in answers)
    assert agent.ask(config, "ping", timeout=3)["ok"]


def test_the_engine_refusing_is_the_answer_not_a_crash() -> None:
    class Refusing(FakeDocker):
        def kill(self, container: str) -> None:
            raise RuntimeError("409 Conflict: container is not running")

    answer = agent.handle(json.dumps({"token": TOKEN, "action": "lose", "host": "c1"}).encode(), token=TOKEN,
                          cluster="lab", cluster_id="abcd", docker=Refusing())
    assert answer == {"ok": False, "error": "docker kill tchaos-lab-c1: 409 Conflict: container is not running"}


def test_the_client_says_why(served: tuple[dict[str, Any], FakeDocker], tmp_path: Path) -> None:
    config, _ = served
    with pytest.raises(agent.AgentError, match="refused lose c7: cluster lab has no compute node c7"):
        agent.ask(config, "lose", "c7")
    with pytest.raises(agent.AgentError, match="wrong token"):
        agent.ask({**config, "token": "nope"}, "ping")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(agent.AgentError, match="does not answer"):
        agent.ask({**config, "port": port}, "ping", timeout=2)
    with pytest.raises(agent.AgentError, match="does not exist"):
        agent.read_config(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text('{"address": "127.0.0.1"}')
    with pytest.raises(agent.AgentError, match="lacks address, port or token"):
        agent.read_config(tmp_path / "bad.json")


# --- the slurm runtime's side ---------------------------------------------------------------------------------------


def test_slurm_host_loss_capability_needs_an_agent_that_answers(served: tuple[dict[str, Any], FakeDocker],
                                                                tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    config, _ = served
    path = tmp_path / "agent.json"
    monkeypatch.setenv(slurm.AGENT_FILE_ENV, str(path))
    check = slurm.SlurmRuntime.capability_check("host_loss")
    assert not check.ok and check.required and check.detail == slurm.NO_ROOT  # a real cluster: no agent file
    path.write_text(json.dumps({**config, "port": 1}))
    check = slurm.SlurmRuntime.capability_check("host_loss")
    assert not check.ok and "does not answer" in check.detail
    path.write_text(json.dumps(config))
    assert slurm.SlurmRuntime.capability_check("host_loss").ok


def test_a_host_loss_scenario_validates_anywhere_and_is_refused_where_nobody_can_lose_a_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.doctor import unmet
    from chaos.loading import ScenarioInvalid, parse_scenario

    text = ("name: s\ncluster: {runtime: slurm, nodes: 2, min_nodes: 1}\nworkload: {name: ddp-mlp, args: {steps: "
            "20}}\nfaults:\n  - {kind: host_loss, target: 1, at_step: 5, return_after: 10}\n")
    scenario = parse_scenario(text)
    assert scenario.faults[0].return_after == 10
    monkeypatch.setenv(slurm.AGENT_FILE_ENV, str(tmp_path / "absent.json"))
    problems = [c for c in unmet(scenario) if "host loss" in c.name]
    assert len(problems) == 1 and "needs root on it" in problems[0].detail
    with pytest.raises(ScenarioInvalid) as exc:
        parse_scenario(text.replace("runtime: slurm", "runtime: local"))
    assert any("host_loss" in str(e) and "slurm (where it has it)" in str(e) for e in exc.value.errors)


def test_slurm_lose_host_asks_the_agent_and_the_lost_host_is_never_a_spare(
        served: tuple[dict[str, Any], FakeDocker], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, docker = served
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(config))
    monkeypatch.setenv(slurm.AGENT_FILE_ENV, str(path))
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    rt = slurm.SlurmRuntime("20260101-000000-x-abcdef", tmp_path, slurm.SlurmOptions(spares=1))
    rt.alloc.host_of, rt.alloc.spares = {"node0": "c1", "node1": "c2"}, ["c3"]
    mechanism, facts = rt.lose_host("node1")
    assert mechanism.startswith("docker kill of tchaos-lab-c2 (host c2) by the cluster agent at 127.0.0.1:")
    assert facts["host"] == "c2" and facts["container"] == "tchaos-lab-c2" and facts["t_agent"] > 0
    assert rt.can_replace("node1") is None  # a spare is left
    assert rt.alloc.place("node1", started=True) == ("c3", True) and rt.alloc.spares == []  # c2 lost: never a spare
    assert rt.can_replace("node0") is None  # c1 is fine
    rt.alloc.host_of["node1"] = "c2"
    assert "no spare host left" in str(rt.can_replace("node1"))
    with pytest.raises(RuntimeError, match="no spare host is left"):
        rt.alloc.place("node1", started=True)
    assert rt.return_host("c2")["returned"] == "c2"
    assert docker.actions() == [("kill", "tchaos-lab-c2"), ("start", "tchaos-lab-c2")]
    rt2 = slurm.SlurmRuntime("20260101-000000-x-abcdeg", tmp_path, slurm.SlurmOptions())
    rt2.alloc.host_of = {"node0": "c1"}
    assert rt2.lose_host("node0")[1]["cleanup_record"] == str(slurm_commands.lost_hosts_dir() / f"{rt2.run_id}.json")
    assert rt2.teardown() == ["host c1 returned (docker start by the cluster agent)"]  # as the run found it
    assert not (slurm_commands.lost_hosts_dir() / f"{rt2.run_id}.json").exists()  # nothing left for cleanup


def test_cleanup_returns_the_hosts_of_an_engine_that_died(served: tuple[dict[str, Any], FakeDocker],
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine SIGKILLed after the agent lost a host: its owner file names the host, `chaos cleanup` has the
    agent start it again; a live engine's host is left to it."""
    config, docker = served
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(config))
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    owners = slurm_commands.lost_hosts_dir()
    owners.mkdir(parents=True)
    dead = {"run_id": "r-dead", "engine_pid": 999999999, "agent_file": str(path), "hosts": ["c2"]}
    alive = {"run_id": "r-alive", "engine_pid": os.getpid(), "agent_file": str(path), "hosts": ["c3"]}
    (owners / "r-dead.json").write_text(json.dumps(dead))
    (owners / "r-alive.json").write_text(json.dumps(alive))
    assert slurm_hosts.return_leftover_hosts(None, only_orphans=True) == [
        "host c2 returned (docker start by the cluster agent; run r-dead)"]
    assert docker.actions() == [("start", "tchaos-lab-c2")]
    assert not (owners / "r-dead.json").exists() and (owners / "r-alive.json").exists()


def test_the_no_agent_refusal_is_unsupported_not_a_traceback(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.runtimes.base import Unsupported

    monkeypatch.setenv(slurm.AGENT_FILE_ENV, str(tmp_path / "absent.json"))
    rt = slurm.SlurmRuntime("20260101-000000-x-abcdef", tmp_path, slurm.SlurmOptions())
    rt.alloc.host_of = {"node1": "c2"}
    with pytest.raises(Unsupported, match="needs root on it"):
        rt.lose_host("node1")


# --- the daemon's lifetime: found by its command line, stopped unless a cluster claims it ---------------------------


def fake_agent(tmp_path: Path, cluster: str, config: dict[str, Any]) -> Any:
    """A process whose command line is an agent's (``python -m chaos.cluster.agent CONFIG --cluster NAME``) but that
    only sleeps: a stand-in package on its PYTHONPATH, so no docker is needed."""
    import subprocess
    import sys
    import time

    fake = tmp_path / "fake"
    (fake / "chaos" / "cluster").mkdir(parents=True, exist_ok=True)
    (fake / "chaos" / "__init__.py").write_text("")
    (fake / "chaos" / "cluster" / "__init__.py").write_text("")
    (fake / "chaos" / "cluster" / "agent.py").write_text("import time\ntime.sleep(60)\n")
    path = tmp_path / "clusters" / f"{cluster}.agent.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cluster.agent", str(path), "--cluster", cluster],
                            env={"PYTHONPATH": str(fake), "PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 10
    from chaos.cluster import slurm as cluster_slurm

    while proc.pid not in [pid for pid, _, _ in cluster_slurm.running_agents()]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def test_an_agent_no_cluster_claims_is_stopped_by_cleanup_and_a_claimed_one_is_kept(tmp_path: Path) -> None:
    from chaos.cluster import slurm as cluster_slurm

    name = f"fake{os.getpid()}"
    state = tmp_path / "clusters" / f"{name}.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"id": "id1"}))
    proc = fake_agent(tmp_path, name, {"cluster": name, "cluster_id": "id1", "up_pid": 999999999,
                                       "state": str(state)})
    try:
        assert not any(name in line for line in cluster_slurm.stop_agents(name, only_orphans=True))
        assert proc.poll() is None  # its state file records its bring-up: kept
        state.write_text(json.dumps({"id": "another"}))  # the state file now names another bring-up
        assert cluster_slurm.stop_agents(name, only_orphans=True) == [f"cluster agent {proc.pid} ({name})"]
        assert proc.wait(timeout=10) is not None
        assert not (tmp_path / "clusters" / f"{name}.agent.json").exists()  # its config went with it
    finally:
        proc.kill()
        proc.wait()
