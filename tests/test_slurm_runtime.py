"""The slurm runtime without a cluster: parsing Slurm's output, the scenario's ``cluster.slurm`` options, the dry run's
salloc/srun lines, capability refusals, and the helper step's process finding on this machine's real processes.

The runtime against a real Slurm (the container cluster) is tests/integration/test_slurm_runtime.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from chaos.cli import main
from chaos.loading import ScenarioInvalid, parse_scenario, resolve_scenario_path
from chaos.runtimes import slurm, slurm_helper, slurm_hosts
from chaos.runtimes.slurm_commands import channel_bind, host_lost, parse_steps
from chaos.runtimes.slurm_network import channel_addresses

SCENARIO = """\
name: s
cluster:
  runtime: slurm
  nodes: 2
  min_nodes: 2
  slurm: {spares: 1, partition: gpu, account: proj, extra_args: [--exclusive]}
workload: {name: ddp-mlp, args: {steps: 20}}
faults:
  - {kind: crash, target: 1, at_step: 5}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(ScenarioInvalid) as exc:
        parse_scenario(text, "s.yaml")
    return [str(e) for e in exc.value.errors]


def test_job_id_from_salloc_output() -> None:
    assert slurm.parse_job_id("salloc: Granted job allocation 12\n") == "12"
    assert slurm.parse_job_id("salloc: Pending job allocation 7\nsalloc: job 7 queued and waiting for resources\n"
                              "salloc: job 7 has been allocated resources\nsalloc: Granted job allocation 7\n") == "7"
    with pytest.raises(RuntimeError, match=r"(?s)no job id.*Invalid partition"):
        slurm.parse_job_id("salloc: error: invalid partition specified: x\nsalloc: error: Invalid partition name\n")


def test_node_states_steps_and_jobs() -> None:
    assert slurm.parse_node_states("c1 alloc\nc2 down*\nc3 idle\nc1 alloc\n\n") == {"c1": "alloc", "c2": "down*",
                                                                                     "c3": "idle"}
    steps = parse_steps("12.0 abc123-node0-1\n12.1 abc123-node1-1\n13.0 other\n12.extern extern\n", "12")
    assert steps == {"abc123-node0-1": "12.0", "abc123-node1-1": "12.1", "extern": "12.extern"}
    jobs = slurm.parse_jobs("12|torch-chaos-run1|engine=h:1\n13|bash|\n14|torch-chaos-run2|(null)\n")
    assert jobs == [("12", "torch-chaos-run1", "engine=h:1"), ("14", "torch-chaos-run2", "(null)")]


def test_orphan_judged_by_the_engine_named_in_the_comment() -> None:
    import socket

    host = socket.gethostname()
    assert not slurm.comment_orphaned(f"engine={host}:{os.getpid()}")
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert slurm.comment_orphaned(f"engine={host}:{dead.pid}")
    assert not slurm.comment_orphaned("engine=some-other-login-node:1")  # cannot tell: not an orphan
    assert not slurm.comment_orphaned("(null)")


def test_placeholders_are_substituted() -> None:
    hosts = {"node0": "c1", "node1": "c3"}
    assert slurm.substitute("--rdzv-endpoint={slurm-host:node0}:29400", hosts, "10.0.0.2") == \
        "--rdzv-endpoint=c1:29400"
    assert slurm.substitute("{slurm-channel}:4000", hosts, "10.0.0.2") == "10.0.0.2:4000"


def test_options_are_validated_with_the_field_named() -> None:
    bad_time = errors_of(SCENARIO.replace("spares: 1,", "spares: 1, time: soon,"))
    assert len(bad_time) == 1 and "cluster.slurm.time" in bad_time[0] and "HH:MM:SS" in bad_time[0]
    own = errors_of(SCENARIO.replace("[--exclusive]", "[--nodes=4]"))
    assert "cluster.slurm.extra_args" in own[0] and "sets --nodes itself" in own[0]
    assert "sets -N itself" in errors_of(SCENARIO.replace("[--exclusive]", "[-N4]"))[0]
    assert "sets --immediate itself" in errors_of(SCENARIO.replace("[--exclusive]", "[--immediate=5]"))[0]
    # getopt_long takes unambiguous prefixes, and short options cluster: the same flags in those spellings
    assert "sets --job-name itself" in errors_of(SCENARIO.replace("[--exclusive]", "[--job-n=x]"))[0]
    assert "sets --comment itself" in errors_of(SCENARIO.replace("[--exclusive]", "[--comm=x]"))[0]
    assert "sets -N itself" in errors_of(SCENARIO.replace("[--exclusive]", "[-vN4]"))[0]
    for fine in ("[-pkilo]", "[--exclusive, -v, --mem=0]", "[--no-requeue]"):  # a value, other flags
        assert parse_scenario(SCENARIO.replace("[--exclusive]", fine)).cluster.slurm is not None, fine
    assert "cluster.slurm.spares" in errors_of(SCENARIO.replace("spares: 1", "spares: -1"))[0]
    assert "cluster.slurm.queue" in errors_of(SCENARIO.replace("spares: 1", "queue: x"))[0]
    s = parse_scenario(SCENARIO)
    assert s.cluster.slurm.spares == 1 and s.cluster.slurm.time == "00:30:00"


def test_an_allocation_shorter_than_the_run_is_refused() -> None:
    """Slurm would cancel the steps at the allocation's end, which reads as lost nodes: the limit must cover
    limits.deadline_s and teardown. Slurm's time formats, a lone number being minutes."""
    assert [slurm.time_limit_s(t) for t in ("5", "5:30", "01:02:03", "1-2", "1-02:03", "1-02:03:04", "UNLIMITED")] \
        == [300, 330, 3723, 93600, 93780, 93784, None]
    short = errors_of(SCENARIO.replace("spares: 1,", "spares: 1, time: '00:04:00',")
                      + "limits: {deadline_s: 240}\n")
    assert len(short) == 1 and "cluster.slurm.time" in short[0] and "shorter than limits.deadline_s (240 s)" in \
        short[0] and 'at least "00:05:00"' in short[0], short
    assert "cluster.slurm.time" in errors_of(SCENARIO.replace("spares: 1,", "spares: 1, time: '5',")
                                             + "limits: {deadline_s: 300}\n")[0]
    for fine in ("'00:05:00'", "'1-0'", "UNLIMITED"):
        assert parse_scenario(SCENARIO.replace("spares: 1,", f"spares: 1, time: {fine},")
                              + "limits: {deadline_s: 240}\n").cluster.slurm is not None, fine
    assert parse_scenario(SCENARIO + "storage: {layer: fuse}\n").storage.layer == "fuse"  # on the nodes' hosts


def test_faults_slurm_cannot_do_are_refused_by_capability() -> None:
    errs = errors_of(SCENARIO.replace("{kind: crash, target: 1, at_step: 5}",
                                      "{kind: delay, target: 1, at_step: 5, delay: 50ms}"))
    assert any("faults[0].kind" in e and "delay on slurm: only isolate and partition go through the cluster agent"
               in e for e in errs), errs
    errs = errors_of(SCENARIO.replace("{kind: crash, target: 1, at_step: 5}",
                                      "{kind: memory_pressure, target: 1, at_step: 5, size: 100MB, duration: 2}"))
    assert any("memory cgroup" in e and "; the slurm runtime does not: set cluster.runtime:" in e for e in errs), errs
    parse_scenario(SCENARIO.replace("{kind: crash, target: 1, at_step: 5}",  # where an agent answers (the run asks)
                                    "{kind: partition, groups: [[0], [1]], at_step: 5}"))
    errs = errors_of(SCENARIO.replace("{kind: crash, target: 1, at_step: 5}",
                                      "{kind: lost_writes, target: 1, at_step: 5}"))
    assert any("lost_writes needs a runtime that keeps the storage layer, which holds a node's writes not yet synced, "
               "alive through a crash" in e and "; the slurm runtime does not" in e for e in errs), errs
    parse_scenario(SCENARIO.replace("{kind: crash, target: 1, at_step: 5}", "{kind: disk_full, at_step: 5}"))
    for kind in ("crash", "kill_worker", "freeze"):
        extra = ", duration: 2" if kind == "freeze" else ""
        parse_scenario(SCENARIO.replace("kind: crash", f"kind: {kind}").replace("at_step: 5}", f"at_step: 5{extra}}}"))


def test_dry_run_prints_the_salloc_and_srun_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    assert main(["run", str(path), "--dry-run", "--json", "--out", str(tmp_path / "runs")]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert not (tmp_path / "runs").exists(), "a dry run creates nothing"
    salloc, *rest = shown["commands"]
    assert salloc.startswith("salloc --no-shell --no-kill --nodes=3 --job-name=torch-chaos-")
    assert "--partition=gpu --account=proj --exclusive" in salloc and "--comment=engine=" in salloc
    bounded = slurm.salloc_argv(slurm.SlurmOptions(wait_s=60), 3, "r", "engine=h:1")
    assert "--immediate=60" in bounded and "--no-kill" in bounded
    sruns = [line for line in rest if line.startswith("srun ")]
    assert len(sruns) == 2
    for i, line in enumerate(sruns):
        assert line.startswith("srun --overlap --jobid=J --nodes=1 --ntasks=1 '--nodelist={slurm-host:node" + f"{i}}}'")
        assert "'--rdzv-endpoint={slurm-host:node0}:29400'" in line
    assert shown["nodes"][0]["env"]["CHAOS_CHANNEL"].startswith("{slurm-channel}:")


def test_shipped_slurm_scenarios_are_valid() -> None:
    from chaos.loading import load_scenario

    s = load_scenario(resolve_scenario_path("slurm/node-crash"))
    assert s.cluster.runtime == "slurm" and s.cluster.slurm.spares == 1
    shipped = sorted(resolve_scenario_path("slurm/node-crash").parent.glob("*.yaml"))
    assert len(shipped) >= 8
    for path in shipped:
        assert load_scenario(path).cluster.runtime == "slurm", path


def test_cleanup_without_slurm_tools_finds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert slurm.SlurmRuntime.cleanup(None, only_orphans=False) == []
    checks = slurm.SlurmRuntime.machine_checks()
    assert not checks[0].ok and "salloc" in checks[0].detail
    assert not checks[0].required  # plain `chaos doctor`: a machine off a Slurm cluster is not broken
    assert slurm.SlurmRuntime.machine_checks(slurm.SlurmOptions())[0].required  # a Slurm scenario needs them


def test_a_slurm_run_off_a_slurm_cluster_stops_before_anything_starts(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 2
    assert not (tmp_path / "runs").exists()


def test_helper_finds_signals_and_spares_the_agent(tmp_path: Path) -> None:
    """The helper on this machine's real processes: a marked 'agent' with a marked 'worker' child."""
    mark = f"test-{os.getpid()}/node1"
    code = ("import subprocess, sys, time; "
            "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
            "env={**__import__('os').environ, 'LOCAL_RANK': '0'}); time.sleep(60)")
    from chaos.marks import ENGINE_VAR, engine_mark

    # this test is their engine: with no engine mark they would be orphans to every other test's leftover check
    # (two stopped processes failed a test beside this one: tests/conftest.py, no_leftovers)
    agent = subprocess.Popen([sys.executable, "-c", code],
                             env={**os.environ, slurm_helper.TREE_VAR: mark, ENGINE_VAR: engine_mark()})
    try:
        deadline = time.monotonic() + 10
        while len(slurm_helper.marked(mark)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        procs = slurm_helper.marked(mark)
        assert len(procs) == 2 and slurm_helper.roots(procs) == [agent.pid]
        answer = slurm_helper.act("signal-all", mark, int(signal.SIGSTOP), None)
        assert sorted(answer["signalled"]) == sorted(procs)
        time.sleep(0.1)
        assert set(slurm_helper.act("state", mark, 0, None)["processes"].values()) == {"T"}
        slurm_helper.act("signal-all", mark, int(signal.SIGCONT), None)
        assert slurm_helper.act("kill-workers", mark, int(signal.SIGKILL), 3)["signalled"] == []
        answer = slurm_helper.act("kill-workers", mark, int(signal.SIGKILL), None)
        worker = [p for p in procs if p != agent.pid]
        assert answer["signalled"] == worker and answer["agents"] == [agent.pid]
        assert agent.poll() is None  # the agent stays
    finally:
        for pid in slurm_helper.marked(mark):  # the worker too, when a check failed before it was killed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        agent.wait()


def test_scheduler_part_of_the_recovery_breakdown() -> None:
    """Slurm's own part beside the phases: its detection of a lost host, the replacement's srun and step start."""
    from chaos.analysis.breakdown import RecoveryBreakdown, breakdown_for_result, scheduler_part

    fault = {"id": 0, "t_injected": 100.0, "target": "node1"}
    events = [
        {"t": 50.0, "event": "slurm_allocated", "job_id": "7", "hosts": ["c1", "c2", "c3"],
         "nodes": {"node0": "c1", "node1": "c2"}, "spares": ["c3"]},
        {"t": 90.0, "event": "slurm_node_state", "host": "c2", "state": "down*", "previous": "alloc"},  # before
        {"t": 100.5, "event": "slurm_step_started", "node": "node1", "host": "c3", "step": "7.3", "after_s": 0.2,
         "replacement": True},
        {"t": 101.0, "event": "slurm_step_started", "node": "node0", "host": "c1", "step": "7.4", "after_s": 0.2,
         "replacement": True},  # another node's replacement: not this fault's
        {"t": 105.0, "event": "slurm_node_state", "host": "c1", "state": "alloc*", "previous": "alloc"},  # other host
        {"t": 110.0, "event": "slurm_node_state", "host": "c1", "state": "down*", "previous": "alloc*"},  # other host
        {"t": 111.0, "event": "slurm_node_state", "host": "c2", "state": "alloc*", "previous": "alloc"},
        {"t": 117.0, "event": "slurm_node_state", "host": "c2", "state": "down*", "previous": "alloc*"},
        {"t": 130.0, "event": "slurm_node_state", "host": "c2", "state": "idle", "previous": "down*"},
    ]
    part = scheduler_part(events, fault)
    assert part is not None
    assert part["host_down"] == "c2" and part["host_down_after_s"] == pytest.approx(17.0)
    assert part["host_not_responding_after_s"] == pytest.approx(11.0)  # Slurm's first sign
    assert part["replacement_host"] == "c3" and part["replacement_step_s"] == pytest.approx(0.2)
    assert part["replacement_srun_after_s"] == pytest.approx(0.3)
    # a later disruptive fault at 115 s: what Slurm did after it is that fault's
    later = scheduler_part(events, fault, until=115.0)
    assert later is not None and "host_down" not in later and later["replacement_host"] == "c3"
    assert scheduler_part([], fault) is None
    shown = breakdown_for_result(RecoveryBreakdown(0, "crash", 20.0, [], scheduler=part))
    assert shown["scheduler"] == part
    assert "scheduler" not in breakdown_for_result(RecoveryBreakdown(0, "crash", 20.0, []))


def test_a_host_is_lost_when_slurm_says_it_does_not_respond() -> None:
    assert host_lost("mix*") and host_lost("down*") and host_lost("down")
    assert host_lost("drain") and host_lost("fail")
    assert not host_lost("alloc") and not host_lost("mix") and not host_lost("idle")
    assert not host_lost("")


def test_a_replacement_goes_to_a_free_spare_and_never_back_to_a_lost_host() -> None:
    hosts = slurm_hosts.Hosts("20260101-000000-x-abcdef", lambda event: None)
    hosts.host_of, hosts.spares = {"node0": "c1", "node1": "c2"}, ["c3"]
    assert hosts.place("node1", started=False) == ("c2", False)  # the first start: its own host
    # started once: the next start is a replacement
    assert hosts.place("node1", started=True) == ("c3", True) and hosts.spares == ["c2"]  # c2 is healthy: a spare
    hosts.states["c3"] = "down*"
    assert hosts.place("node1", started=True) == ("c2", True) and hosts.spares == []  # c3 is lost: not a spare
    assert hosts.place("node1", started=True) == ("c2", True)  # no spare left: the same host again


def test_the_golden_run_runs_on_the_cluster_by_default_never_beside_a_login_node(tmp_path: Path) -> None:
    """On Slurm the engine is on a login node, so a golden run of local processes beside it is no reference (it would
    train the whole job there). By default (`checks.golden: true`) the fault-free run is a run of the same job on
    the cluster itself, same runtime and allocation shape, its run directory under the faulted run's --out (shared
    with the hosts; the golden cache is the login node's own), and its cache key says where it ran. Asked for
    explicitly beside the engine, it is not made and matches_golden says why and what to write instead."""
    from chaos.golden import GoldenCache, golden_key, golden_scenario, golden_where, no_golden_why, wants_golden

    scenario = parse_scenario(SCENARIO)
    assert golden_where(scenario) == "cluster" and wants_golden(scenario) and no_golden_why(scenario) is None
    reference = golden_scenario(scenario)
    assert reference.cluster.runtime == "slurm" and reference.faults == []
    assert reference.cluster.slurm == scenario.cluster.slurm  # type: ignore[attr-defined]
    assert reference.cluster.node_restart.policy == "never"
    text = "\n".join(line for line in SCENARIO.splitlines() if not line.startswith("  slurm:"))
    local = parse_scenario(text.replace("runtime: slurm", "runtime: local"))
    assert golden_where(local) == "beside" and golden_scenario(local).cluster.runtime == "local"
    assert golden_key(local) != golden_key(scenario)  # a reference made elsewhere is not this one

    beside = parse_scenario(SCENARIO.replace("faults:", "checks: {golden: beside}\nfaults:"))
    assert golden_where(beside) == "beside" and not wants_golden(beside)
    why = no_golden_why(beside)
    assert why is not None and "login node" in why and "checks.golden: cluster" in why
    off = parse_scenario(SCENARIO.replace("faults:", "checks: {golden: false}\nfaults:"))
    assert golden_where(off) is None and not wants_golden(off)

    homes: list[Path] = []

    def runner(s: Any, home: Path) -> Path:
        homes.append(home)
        (home / "g").mkdir(parents=True)
        (home / "g" / "events.jsonl").write_text("")
        return home / "g"

    cache = GoldenCache(runner, directory=tmp_path / "cache", cluster_out=tmp_path / "shared-runs")
    cache(scenario)
    assert homes == [tmp_path / "shared-runs"]  # on the cluster: under the faulted run's --out
    cache(local)
    assert homes[1].parent == tmp_path / "cache"  # beside the engine: in the cache, as before


def test_an_outer_job_s_slurm_variables_do_not_shape_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine started inside an allocation inherits its SLURM_* defaults; the steps must not take them."""
    monkeypatch.setenv("SLURM_JOB_NODELIST", "outer[1-8]")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "64")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    env = slurm.slurm_environ()
    assert "SLURM_JOB_NODELIST" not in env and "SLURM_CPUS_PER_TASK" not in env
    assert env["SLURM_CONF"] == "/etc/slurm/slurm.conf" and env["PATH"] == os.environ["PATH"]


def test_a_host_without_fuse_stops_a_run_that_needs_the_layer_before_any_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check step asks every host (`python -m chaos.storage check-host`); a host's "no /dev/fuse" stops the
    run with the host's words and the way around. Without the layer, the same step only looks for the file."""
    calls: list[list[str]] = []

    def srun(argv: list[str], timeout: float = 30.0, env: dict[str, str] | None = None) -> Any:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 1, "", "c2: /dev/fuse is missing (a container without --device "
                                           "/dev/fuse, or no fuse module)\n")

    monkeypatch.setattr(slurm, "_run", srun)
    rt = slurm.SlurmRuntime("20260101-000000-x-abcdef", tmp_path, slurm.SlurmOptions(python="/opt/py"))
    rt.alloc.job_id, rt.alloc.hosts = "7", ["c1", "c2"]
    rt.storage_layer = object()
    with pytest.raises(RuntimeError, match=r"storage layer cannot run on every allocated host .* c2: /dev/fuse is "
                       r"missing .* set storage.layer: inotify"):
        rt._check_shared_run_dir()
    assert calls[0][-6:-2] == ["/opt/py", "-m", "chaos.storage", "check-host"] and "--ntasks=2" in calls[0]
    rt.storage_layer = None
    with pytest.raises(RuntimeError, match="is not visible on every allocated host"):
        rt._check_shared_run_dir()
    assert calls[1][-3:-1] == ["test", "-e"]


def test_channel_host_is_an_address_of_this_host_and_never_every_interface_unasked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``cluster.slurm.channel_host`` became the channel's bind address unchecked: 0.0.0.0 listened on every
    interface of a login node shared with other users. Now 0.0.0.0 and :: (in any spelling) need
    ``allow_any_address: true``, anything else must be an address or a host name, and the machine check (and the
    runtime, again, at the allocation) wants an address of this host."""
    def with_host(value: str, extra: str = "") -> str:
        return SCENARIO.replace("spares: 1,", f"spares: 1, channel_host: '{value}',{extra}")

    for every in ("0.0.0.0", "::", "::ffff:0.0.0.0", "0:0:0:0:0:0:0:0"):
        (why,) = errors_of(with_host(every))
        assert "cluster.slurm.channel_host" in why and "every interface" in why and "allow_any_address" in why, why
        assert parse_scenario(with_host(every, " allow_any_address: true,")).cluster.slurm.channel_host == every
    for odd in ("0", "0x0", "127.1", "", "host name", "224.0.0.1", "255.255.255.255"):
        (why,) = errors_of(with_host(odd))
        assert "cluster.slurm.channel_host" in why, why
    for fine in ("10.0.0.2", "fd00::2", "login1", "login1.cluster.example"):
        assert parse_scenario(with_host(fine)).cluster.slurm.channel_host == fine

    path = tmp_path / "s.yaml"
    path.write_text(with_host("0.0.0.0"))
    assert main(["validate", "--no-machine", str(path)]) == 2
    said = capsys.readouterr()
    assert "cluster.slurm.channel_host: 0.0.0.0 is every interface of this host" in said.out + said.err

    assert channel_bind("127.0.0.1", False) == ("127.0.0.1", None)
    with pytest.raises(ValueError, match=r"203\.0\.113\.7' is not an address of this host"):
        channel_bind("203.0.113.7", False)  # TEST-NET-3: never a local address
    bind, warning = channel_bind("0.0.0.0", True)
    assert bind == "0.0.0.0" and warning is not None and "every interface" in warning
    checks = slurm.SlurmRuntime.machine_checks(slurm.SlurmOptions(channel_host="203.0.113.7"))
    assert [c.ok for c in checks if c.name == "slurm channel_host"] == [False]


def test_the_channel_is_given_to_the_nodes_at_a_reachable_address_and_checked_again_at_the_allocation() -> None:
    """Once the hosts are known: no channel_host, the engine's route towards the first host, listened on alone; an
    every-interface bind still gives the nodes that routed address (0.0.0.0 reaches no one), with its warning; a
    channel_host judged on another machine and not this host's stops the run, not a traceback."""
    assert channel_addresses(slurm.SlurmOptions(), "127.0.0.1") == ("127.0.0.1", "127.0.0.1", None)
    given = slurm.SlurmOptions(channel_host="127.0.0.1")
    assert channel_addresses(given, "127.0.0.1") == ("127.0.0.1", "127.0.0.1", None)
    every = slurm.SlurmOptions(channel_host="0.0.0.0", allow_any_address=True)
    host, bind, warning = channel_addresses(every, "127.0.0.1")
    assert (host, bind) == ("127.0.0.1", "0.0.0.0") and warning is not None and "every interface" in warning
    with pytest.raises(RuntimeError, match=r"203\.0\.113\.7' is not an address of this host"):
        channel_addresses(slurm.SlurmOptions(channel_host="203.0.113.7"), "127.0.0.1")


def test_the_refusal_off_a_cluster_gives_the_container_clusters_docker_exec_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`runtime: slurm` on a host without Slurm's tools is refused; when `chaos cluster up` left a cluster with the
    engine installed, the fix is the exact line that runs the scenario on its login node, not just advice."""
    import json

    from chaos.cluster.spec import STATE_DIR_ENV
    from chaos.runtimes.slurm import SlurmRuntime

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    [plain] = [c for c in SlurmRuntime.machine_checks() if c.name == "slurm client tools"]
    assert not plain.ok and "docker exec" not in plain.fix
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "slurm.json").write_text(json.dumps({
        "name": "slurm", "exec": ["docker", "exec", "-u", "chaos", "-w", "/shared", "tchaos-slurm-controller"],
        "python": "/usr/bin/python3", "shared": {"path": "/shared"}, "repo": {"path": "/work/main"},
        "engine": {"installed": True, "pythonpath": "/work/main:/shared/engine-site"}}))
    [check] = [c for c in SlurmRuntime.machine_checks() if c.name == "slurm client tools"]
    assert ("docker exec -u chaos -w /shared -e PYTHONPATH=/work/main:/shared/engine-site tchaos-slurm-controller "
            "/usr/bin/python3 -m chaos run /work/main/SCENARIO.yaml --out /shared/runs") in check.fix, check.fix
