"""The cluster agent's ``net`` action without docker or root: the agent in-process with the fake engine of
tests/test_cluster_agent.py, whose "nsenter" only records. Every request outside the allowlist is refused and runs
nothing; the Slurm runtime's network faults go through it (an Impairment applied and healed against a fake
iptables), and where there is no agent they are refused with the reason, like host_loss.

Against a real cluster: tests/integration/test_slurm_runtime.py (slurm/partial-partition).
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from chaos.cluster import agent, netexec
from chaos.runtimes import slurm, slurm_network
from tests import test_cluster_agent
from tests.test_cluster_agent import TOKEN, FakeDocker, raw

served = test_cluster_agent.served  # the agent on 127.0.0.1 with a fake docker, as there
COMMENT = "torch-chaos:20260101-000000-s-abcdef:0"
RULE = ["-s", "172.30.0.12", "-m", "comment", "--comment", COMMENT, "-j", "DROP"]


ALLOWED = [
    ["iptables-save", "-t", "filter"],
    ["iptables", "-w", "-I", "INPUT", "1", *RULE],
    ["iptables", "-w", "-D", "INPUT", *RULE],
    ["iptables", "-w", "-D", "INPUT", "-s", "172.30.0.12/32", "-m", "comment", "--comment", COMMENT, "-j", "DROP"],
    ["iptables", "-w", "-I", "INPUT", "1", "-s", "172.30.0.11", "-p", "tcp", "--dport", "29400", "-m", "comment",
     "--comment", COMMENT, "-j", "DROP"],
    ["iptables", "-w", "-I", "INPUT", "1", "-i", "eth0", "-m", "statistic", "--mode", "random", "--probability",
     "0.100000", "-m", "comment", "--comment", COMMENT, "-j", "DROP"],
    ["tc", "qdisc", "show", "dev", "eth0"],
    ["tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "100ms", "10ms"],
    ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "10mbit", "burst", "32kbit", "latency", "400ms"],
    ["tc", "qdisc", "del", "dev", "eth0", "root"],
]


def test_net_runs_exactly_the_validated_argv_in_that_hosts_namespace(
        served: tuple[dict[str, Any], FakeDocker]) -> None:
    config, docker = served
    for argv in ALLOWED:
        answer = agent.ask(config, "net", "c2", argv=argv)
        assert answer["ok"] and answer["rc"] == 0 and answer["container"] == "tchaos-lab-c2", answer
        assert answer["stdout"] == f"ran {argv[0]}\n" and answer["done"] == f"nsenter --net {argv[0]}"
    assert docker.actions() == [("net", f"1002 {' '.join(a)}") for a in ALLOWED]  # c2's pid, nothing else
    assert "net" in agent.ask(config, "ping")["actions"]


def net(argv: Any, host: Any = "c2", **extra: Any) -> bytes:
    return json.dumps({"token": TOKEN, "action": "net", "host": host, "argv": argv, **extra}).encode() + b"\n"


@pytest.mark.parametrize(("payload", "why"), [
    # who and where
    (json.dumps({"token": "x" * 32, "action": "net", "host": "c2", "argv": ALLOWED[0]}).encode() + b"\n",
     "wrong token"),
    (json.dumps({"action": "net", "host": "c2", "argv": ALLOWED[0]}).encode() + b"\n", "wrong token"),
    (json.dumps({"token": TOKEN, "action": "net", "host": "c2"}).encode() + b"\n", "exactly the fields"),
    (json.dumps({"token": TOKEN, "action": "lose", "host": "c2", "argv": ALLOWED[0]}).encode() + b"\n",
     "exactly the fields"),
    (net(ALLOWED[0], shell=True), "exactly the fields"),
    (net(ALLOWED[0], host="ctl"), "compute node's name"),
    (net(ALLOWED[0], host="c2/../ctl"), "compute node's name"),
    (net(ALLOWED[0], host="c9"), "has no compute node c9"),
    # the argv's form
    (net("iptables-save -t filter"), "non-empty list of strings"),
    (net([]), "non-empty list of strings"),
    (net(["iptables-save", "-t", 5]), "non-empty list of strings"),
    (net(["iptables", "-w"] + ["-s", "10.0.0.1"] * 20), "more than 40 arguments"),
    (net(["iptables-save", "-t", "f" * 200]), "longer than"),
    (net(["iptables-save", "-t", ""]), "empty"),
    # tools and paths
    (net(["sh", "-c", "id"]), "tool must be one of"),
    (net(["sh", "-c", "reboot"]), "tool must be one of"),
    (net(["/usr/sbin/iptables", "-L"]), "characters"),
    (net(["../../bin/sh"]), "characters"),
    (net(["ip", "netns", "exec", "x", "sh"]), "tool must be one of"),
    (net(["nsenter", "-t", "1", "-a"]), "tool must be one of"),
    (net(["iptables-restore"]), "tool must be one of"),
    (net(["python3", "-m", "chaos.net.delayer"]), "tool must be one of"),
    # iptables beyond torch-chaos's own DROP rules
    (net(["iptables-save"]), "exactly -t filter"),
    (net(["iptables-save", "-t", "filter", "-f", "x"]), "exactly -t filter"),
    (net(["iptables-save", "-M", "touch"]), "exactly -t filter"),
    (net(["iptables", "-w", "--modprobe=touch", "-L"]), "-I CHAIN 1"),
    (net(["iptables", "-L"]), "start with -w"),
    (net(["iptables", "-w", "-F"]), "-I CHAIN 1"),
    (net(["iptables", "-w", "-t", "nat", "-A", "POSTROUTING", *RULE]), "-I CHAIN 1"),
    (net(["iptables", "-w", "-I", "DOCKER", "1", *RULE]), "-I CHAIN 1"),
    (net(["iptables", "-w", "-I", "INPUT", "1", "-s", "172.30.0.12", "-j", "DROP"]), "torch-chaos comment"),
    (net(["iptables", "-w", "-D", "INPUT", "1"]), "not one the agent passes on"),
    (net(["iptables", "-w", "-I", "INPUT", "1", *RULE[:-1], "ACCEPT"]), "not one the agent passes on"),
    (net(["iptables", "-w", "-I", "INPUT", "1", *RULE, "--modprobe=touch"]), "not one the agent passes on"),
    (net(["iptables", "-w", "-I", "INPUT", "1", "-m", "bpf", *RULE]), "not one the agent passes on"),
    (net(["iptables", "-w", "-I", "INPUT", "1", "-s", "300.1.1.1", *RULE[2:]]), "not one the agent passes on"),
    (net(["iptables", "-w", "-I", "INPUT", "1", "-m", "comment", "--comment", "someone-elses", "-j", "DROP"]),
     "not one the agent passes on"),
    (net(["iptables", "-w", "-I", "INPUT", "1", "-m", "comment", "--comment", "torch-chaos:a b:0", "-j", "DROP"]),
     "characters"),
    (net(["iptables", "-w", "-I", "INPUT", "1", "-m", "comment", "--comment", 'torch-chaos:"x":0', "-j", "DROP"]),
     "characters"),
    (net(["iptables", "-w", "-I", "INPUT", "1", "-s", "10.0.0.1;reboot", *RULE[2:]]), "characters"),
    (net(["iptables", "-w", "-I", "INPUT", "1", "-s", "10.0.0.1\n", *RULE[2:]]), "characters"),
    # tc beyond qdisc show/add/del with numbers
    (net(["tc", "-batch", "x"]), "tc takes qdisc"),
    (net(["tc", "exec", "bpf", "import", "x", "run", "sh"]), "tc takes qdisc"),
    (net(["tc", "-n", "other", "qdisc", "show", "dev", "eth0"]), "tc takes qdisc"),
    (net(["tc", "qdisc", "show", "dev", "eth0", "extra"]), "tc takes qdisc"),
    (net(["tc", "filter", "add", "dev", "eth0", "bpf", "obj", "x"]), "tc takes qdisc"),
    (net(["tc", "qdisc", "add", "dev", "eth0", "root", "netem", "slot", "distribution", "x"]), "tc takes qdisc"),
    (net(["tc", "qdisc", "add", "dev", "eth0", "root", "fq_codel"]), "tc takes qdisc"),
    (net(["tc", "qdisc", "del", "dev", "eth0", "ingress"]), "tc takes qdisc"),
])
def test_every_other_net_request_is_refused_and_runs_nothing(served: tuple[dict[str, Any], FakeDocker],
                                                             payload: bytes, why: str) -> None:
    config, docker = served
    answer = raw(config, payload)
    assert answer["ok"] is False and why in answer["error"], answer
    assert docker.actions() == []


def test_a_container_that_is_not_running_or_changed_is_refused_and_runs_nothing() -> None:
    class Stopped(FakeDocker):
        def pid(self, container: str) -> int | None:
            return None

    stopped = Stopped()
    answer = agent.handle(net(ALLOWED[0]), token=TOKEN, cluster="lab", cluster_id="abcd", docker=stopped,
                          runner=stopped.run)
    assert answer == {"ok": False, "error": "tchaos-lab-c2 is not running"} and stopped.actions() == []

    class Restarted(FakeDocker):
        pids = iter([1002, 2002])

        def pid(self, container: str) -> int | None:
            return next(self.pids)

    ran: list[list[str]] = []

    def pinned(pid: int, argv: list[str], pid_now: Any) -> tuple[int, str, str]:
        if pid_now() != pid:  # what netexec.nsenter_run does after pinning the namespace
            return 1, "", "the container's process changed"
        ran.append(argv)
        return 0, "", ""

    answer = agent.handle(net(ALLOWED[0]), token=TOKEN, cluster="lab", cluster_id="abcd", docker=Restarted(),
                          runner=pinned)
    assert answer["ok"] and answer["rc"] == 1 and "changed" in answer["stderr"] and ran == []


def test_validate_is_the_allowlist() -> None:
    for argv in ALLOWED:
        assert netexec.validate(list(argv)) == argv
    with pytest.raises(netexec.Refused):
        netexec.validate(("iptables-save", "-t", "filter"))  # a tuple is not what JSON gives


# --- the slurm runtime's side ---------------------------------------------------------------------------------------


class FakeIptables:
    """One namespace's filter table and qdisc, as iptables-save and tc print them: enough for an Impairment."""

    def __init__(self) -> None:
        self.rules: list[str] = ["-A INPUT -s 10.9.9.9/32 -j ACCEPT"]  # someone else's rule: left alone

    def __call__(self, pid: int, argv: list[str], pid_now: Any) -> tuple[int, str, str]:
        if argv[0] == "iptables-save":
            return 0, "# generated\n*filter\n:INPUT ACCEPT [3:180]\n" + "".join(f"{r}\n" for r in self.rules) + \
                "COMMIT\n", ""
        if argv[0] == "tc":
            return 0, "qdisc noqueue 0: root refcnt 2\n", ""
        verb, chain, spec = argv[2], argv[3], argv[5:] if argv[2] == "-I" else argv[4:]
        spec = [f"{a}/32" if re.match(r"^\d+\.\d+\.\d+\.\d+$", a) else a for a in spec]
        line = " ".join(["-A", chain, *(f'"{a}"' if a.startswith("torch-chaos:") else a for a in spec)])
        if verb == "-I":
            self.rules.insert(0, line)
            return 0, "", ""
        if line in self.rules:
            self.rules.remove(line)
            return 0, "", ""
        return 1, "", "iptables: Bad rule (does a matching rule exist in that chain?).\n"


def test_slurm_network_faults_go_through_the_agent_and_heal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.net.impair import Impairment, NetCommandFailed

    table = FakeIptables()
    server = agent.AgentServer(("127.0.0.1", 0), token=TOKEN, cluster="lab", cluster_id="abcd", docker=FakeDocker(),
                               runner=table)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        path = tmp_path / "agent.json"
        path.write_text(json.dumps({"address": "127.0.0.1", "port": server.server_address[1], "token": TOKEN}))
        monkeypatch.setenv(slurm.AGENT_FILE_ENV, str(path))
        monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
        assert slurm.SlurmRuntime.capability_check("node_network").ok
        rt = slurm.SlurmRuntime("20260101-000000-s-abcdef", tmp_path, slurm.SlurmOptions())
        rt.alloc.host_of = {"node1": "c1", "node2": "c2"}
        enter = rt.net_enter("node2")
        assert enter[-5:] == ["--config", str(path), "--host", "c2", "--"]
        imp = Impairment(enter, rt.interface("node2"), COMMENT)
        imp.begin()
        imp.add_rule("INPUT", ["-s", "172.30.0.11", "-j", "DROP"])
        assert table.rules[0] == f'-A INPUT -s 172.30.0.11/32 -m comment --comment "{COMMENT}" -j DROP'
        assert imp.heal() == {"restored": True}
        assert table.rules == ["-A INPUT -s 10.9.9.9/32 -j ACCEPT"]
        with pytest.raises(NetCommandFailed, match="refused net c2: argv refused: rule option '-j'"):
            imp.add_rule("INPUT", ["-s", "172.30.0.11", "-j", "ACCEPT"])  # the agent's refusal, said as such
        assert table.rules == ["-A INPUT -s 10.9.9.9/32 -j ACCEPT"]
    finally:
        server.shutdown()
        server.server_close()


def test_slurm_network_faults_are_refused_on_a_real_cluster_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.doctor import unmet
    from chaos.loading import parse_scenario
    from chaos.runtimes.base import Unsupported

    monkeypatch.setenv(slurm.AGENT_FILE_ENV, str(tmp_path / "absent.json"))
    check = slurm.SlurmRuntime.capability_check("node_network")
    assert not check.ok and check.required and check.detail == slurm.NO_ROOT_NET
    scenario = parse_scenario("name: s\ncluster: {runtime: slurm, nodes: 3, min_nodes: 2}\nworkload: {name: ddp-mlp}"
                              "\nfaults:\n  - {kind: partition, groups: [[1], [2]], at_step: 5}\n")
    problems = unmet(scenario)
    # refused for the agent it lacks, not for root/iptables on the login node (the engine never runs them there)
    assert [p.name for p in problems if "network" in p.name or "root" in p.name] == \
        ["slurm: node network (a cluster agent)"], problems
    rt = slurm.SlurmRuntime("20260101-000000-s-abcdef", tmp_path, slurm.SlurmOptions())
    rt.alloc.host_of = {"node2": "c2"}
    with pytest.raises(Unsupported, match="needs root on it"):
        rt.net_enter("node2")


def test_an_agent_from_before_net_is_no_node_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Old(agent.AgentServer):
        pass

    server = Old(("127.0.0.1", 0), token=TOKEN, cluster="lab", cluster_id="abcd", docker=FakeDocker())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        path = tmp_path / "agent.json"
        path.write_text(json.dumps({"address": "127.0.0.1", "port": server.server_address[1], "token": TOKEN}))
        monkeypatch.setenv(slurm.AGENT_FILE_ENV, str(path))
        monkeypatch.setattr(agent, "ACTIONS", ("lose", "return", "ping"))  # what an older agent's ping says
        check = slurm.SlurmRuntime.capability_check("node_network")
        assert not check.ok and "predates the net action" in check.detail, check
        assert slurm.SlurmRuntime.capability_check("host_loss").ok
    finally:
        server.shutdown()
        server.server_close()


def test_cleanup_removes_the_rules_of_runs_whose_allocation_is_gone(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    gone, live = "torch-chaos:20260101-000000-gone-abcdef:0", "torch-chaos:20260101-000000-live-abcdef:1"
    table = FakeIptables()
    table.rules[:0] = [f'-A INPUT -s 172.30.0.12/32 -m comment --comment "{gone}" -j DROP',
                       f'-A INPUT -s 172.30.0.13/32 -m comment --comment "{live}" -j DROP']
    assert [r for r, _ in netexec.leftover_rules("*filter\n" + "\n".join(table.rules) + "\nCOMMIT\n")] == \
        ["20260101-000000-gone-abcdef", "20260101-000000-live-abcdef"]  # someone else's rule is not ours
    server = agent.AgentServer(("127.0.0.1", 0), token=TOKEN, cluster="lab", cluster_id="abcd", docker=FakeDocker(),
                               runner=table)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    said = {"sinfo": "c1 idle\nc2 alloc\n", "squeue": "7|torch-chaos-20260101-000000-live-abcdef|engine=x:1\n"}

    def fake_run(argv: list[str], timeout: float = 30.0, env: Any = None) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, said[argv[0]], "")

    try:
        path = tmp_path / "agent.json"
        path.write_text(json.dumps({"address": "127.0.0.1", "port": server.server_address[1], "token": TOKEN}))
        monkeypatch.setenv(slurm.AGENT_FILE_ENV, str(path))
        monkeypatch.setattr(slurm_network, "run_slurm", fake_run)
        removed = slurm_network.cleanup_rules(None)
        # one namespace serves both fake hosts: the rule is removed once, the live run's kept, the other's kept
        assert removed == [f"iptables rule of 20260101-000000-gone-abcdef on c1 (INPUT -s 172.30.0.12/32 -m comment "
                           f"--comment {gone} -j DROP)"], removed
        assert table.rules == [f'-A INPUT -s 172.30.0.13/32 -m comment --comment "{live}" -j DROP',
                               "-A INPUT -s 10.9.9.9/32 -j ACCEPT"]
        said["squeue"] = ""
        assert len(slurm_network.cleanup_rules("20260101-000000-other-abcdef")) == 0  # another run's: kept
        assert len(slurm_network.cleanup_rules(None)) == 1
        assert table.rules == ["-A INPUT -s 10.9.9.9/32 -j ACCEPT"]
    finally:
        server.shutdown()
        server.server_close()
    monkeypatch.setenv(slurm.AGENT_FILE_ENV, str(tmp_path / "absent.json"))
    assert slurm_network.cleanup_rules(None) == []  # a real cluster: no agent, no rules of ours
