"""The tf-multiworker launcher's plans, without TensorFlow or a cluster: TF_CONFIG, ports, refusals, doctor."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.launchers import tf as tfl
from chaos.launchers.base import LaunchContext
from chaos.plan import Addressing


def _ctx(addresses: dict[str, str], port: int = 29400, nodes: int = 2,
         script: list[str] | None = None) -> LaunchContext:
    cluster = SimpleNamespace(nodes=nodes, procs_per_node=1)
    return LaunchContext(scenario=SimpleNamespace(cluster=cluster), run_id="r-abc123", run_dir=Path("/tmp/run"),
                         net=Addressing(addresses, port, python="/venv/bin/python"),
                         base_env={"CHAOS_RUN_ID": "r-abc123", "PYTHONPATH": "/user"},
                         script=script or ["/repo/workloads/tf_train.py", "--epochs", "3"], settings={})


def test_tf_config_names_every_worker_and_the_task() -> None:
    cfg = json.loads(tfl.tf_config(["10.0.0.1:29400", "10.0.0.2:29400"], 1))
    assert cfg == {"cluster": {"worker": ["10.0.0.1:29400", "10.0.0.2:29400"]},
                   "task": {"type": "worker", "index": 1}}


def test_shared_address_gets_one_port_per_node() -> None:
    ports = iter([5001, 5001, 5002])  # a repeated free port is skipped
    got = tfl.worker_addresses(["127.0.0.1"] * 3, 5000, port_for=lambda: next(ports))
    assert got == ["127.0.0.1:5000", "127.0.0.1:5001", "127.0.0.1:5002"]


def test_own_addresses_share_the_port() -> None:
    assert tfl.worker_addresses(["10.0.0.1", "10.0.0.2"], 29400) == ["10.0.0.1:29400", "10.0.0.2:29400"]


def test_node_plans_write_each_nodes_tf_config() -> None:
    launch = tfl.TfMultiWorker().node_plans(_ctx({"node0": "10.0.0.1", "node1": "10.0.0.2"}))
    assert [n.name for n in launch.nodes] == ["node0", "node1"] and launch.store is None and not launch.servers
    for i, node in enumerate(launch.nodes):
        cfg = json.loads(node.env["TF_CONFIG"])
        assert cfg["cluster"]["worker"] == ["10.0.0.1:29400", "10.0.0.2:29400"]
        assert cfg["task"] == {"type": "worker", "index": i}
        assert node.env["TF_USE_LEGACY_KERAS"] == "1"
        assert (node.env["RANK"], node.env["WORLD_SIZE"], node.env["CHAOS_NODE"]) == (str(i), "2", f"node{i}")
        assert node.env["PYTHONPATH"].endswith(":/user")  # the user's path kept, the repository's first
        assert node.argv == ["/venv/bin/python", "/repo/workloads/tf_train.py", "--epochs", "3"]


def test_local_nodes_get_distinct_ports() -> None:
    launch = tfl.TfMultiWorker().node_plans(_ctx({"node0": "127.0.0.1", "node1": "127.0.0.1"}, port=5000))
    workers = json.loads(launch.nodes[0].env["TF_CONFIG"])["cluster"]["worker"]
    assert workers[0] == "127.0.0.1:5000" and len(set(workers)) == 2
    assert json.loads(launch.nodes[1].env["TF_CONFIG"])["cluster"]["worker"] == workers  # one cluster for all


@pytest.mark.parametrize("script,argv", [
    (["python", "my_tf.py", "--x"], ["/venv/bin/python", "my_tf.py", "--x"]),  # the nodes' interpreter
    (["bash", "run.sh"], ["bash", "run.sh"]),
])
def test_user_commands(script: list[str], argv: list[str]) -> None:
    launch = tfl.TfMultiWorker().node_plans(_ctx({"node0": "a", "node1": "b"}, script=script))
    assert launch.nodes[0].argv == argv


def test_refusals_say_what_to_use_instead() -> None:
    refused = tfl.TfMultiWorker.refused_faults
    assert set(refused) == {"kill_worker", "oom_kill", "hang"}
    assert "crash" in refused["kill_worker"] and "freeze" in refused["hang"]
    assert tfl.TfMultiWorker().select_workers([], 1) == []  # the node's process is the worker


def test_scenario_problems() -> None:
    scenario = SimpleNamespace(cluster=SimpleNamespace(procs_per_node=2), workload=SimpleNamespace(name="ddp-mlp"))
    problems = tfl.TfMultiWorker.scenario_problems(scenario)  # type: ignore[arg-type]
    assert [p.split(":")[0] for p in problems] == ["cluster.procs_per_node", "workload.name"]


def test_image_packages_pin_tf_keras_with_tensorflow() -> None:
    assert tfl.TfMultiWorker.image_packages() == ("tensorflow==2.21.0", "tf-keras==2.21.0")


@pytest.mark.parametrize("versions,ok", [
    ({"tensorflow": "2.21.0", "tf-keras": "2.21.0"}, True),
    ({"tensorflow": "2.21.0", "tf-keras": "2.19.0"}, False),
])
def test_doctor_check(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str], ok: bool) -> None:
    monkeypatch.setattr(tfl, "tf_versions", lambda: (versions, ""))
    (check,) = tfl.TfMultiWorker.machine_checks()
    assert check.ok is ok and "tensorflow 2.21.0" in check.detail


def test_doctor_check_without_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tfl, "tf_versions", lambda: (None, "ModuleNotFoundError: No module named 'tensorflow'"))
    (check,) = tfl.TfMultiWorker.machine_checks()
    assert not check.ok and "No module named" in check.detail and "torch-chaos[tf]" in check.fix


# --------------------------------------------------------------------------- what the verdicts and breakdown read

def test_worker_sample_ids_are_each_workers_slice_of_the_global_batch() -> None:
    """The layout measured with TF 2.21 (DATA auto-sharding after the rebatch): worker i gets the i-th slice."""
    from workloads.tf_train import worker_sample_ids

    assert worker_sample_ids(0, 4, 2, 0) == [0, 1] and worker_sample_ids(0, 4, 2, 1) == [2, 3]
    assert worker_sample_ids(3, 4, 2, 1) == [14, 15]
    # every sample of an epoch exactly once across the workers
    epoch = sorted(i for b in range(5) for w in range(2) for i in worker_sample_ids(b, 64, 2, w))
    assert epoch == list(range(5 * 64))


def test_the_golden_key_of_a_tf_job_names_tensorflows_version_and_others_do_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos import golden
    from chaos.loading import parse_scenario

    tf_job = parse_scenario("name: t\ncluster: {launcher: tf-multiworker, nodes: 2}\nworkload: {name: tf-mlp}\n")
    torch_job = parse_scenario("name: c\ncluster: {mode: centralized, nodes: 1}\nworkload: {name: ddp-mlp}\n")
    before = golden.golden_key(tf_job), golden.golden_key(torch_job)
    real = golden._installed
    monkeypatch.setattr(golden, "_installed", lambda dist: "9.9.9" if dist == "tensorflow" else real(dist))
    assert golden.golden_key(tf_job) != before[0]
    assert golden.golden_key(torch_job) == before[1]


def _tf_crash_history() -> tuple[list[dict], dict]:
    """Worker 1 crashes at t_f; worker 0 exits 1 at +3 s (its collective failed); the engine relaunches node1 at
    +1 s and node0 at +4 s; their process_started at +1.2 and +4.2 s, the restore begins at +11 s and ends at
    +11.2 s; the first step 0.5 s later."""
    from chaos.analysis.metrics import fault_metrics
    from chaos.events import Ev, Source
    from tests.histories import H

    h = H(dt=0.1).start(ranks=2).steps(1, 110).fault(0)
    h.events[0]["environment"] = {"mode": "tf-multiworker", "levers": tfl.TfMultiWorker.levers}
    t_f = h.t
    for node, dt, code in (("node1", 0.05, -9), ("node0", 3.0, 1)):
        h.events.append({"t": t_f + dt, "source": Source.ENGINE, "event": Ev.NODE_EXITED, "node": node,
                         "code": code, "will_replace": True})
        h.events.append({"t": t_f + dt + 1.0, "source": Source.ENGINE, "event": Ev.NODE_STARTED, "node": node,
                         "argv": [], "replacement": True})
    h.t = t_f + 1.2
    h.start(ranks=1)
    h.pid += 5
    h.events.append({"t": t_f + 4.2, "source": Source.WORKLOAD, "event": Ev.PROCESS_STARTED, "node": "node0",
                     "pid": h.pid, "rank": 0, "world_size": 2})
    for rank, pid in ((0, h.pid), (1, h.pid - 5)):
        h.events.append({"t": t_f + 11.0, "source": Source.WORKLOAD, "event": Ev.CHECKPOINT_LOAD_STARTED,
                         "node": f"node{rank}", "pid": pid, "rank": rank, "step": 100, "path": "ckpt-5"})
        h.events.append({"t": t_f + 11.1 + 0.1 * rank, "source": Source.WORKLOAD, "event": Ev.CHECKPOINT_LOADED,
                         "node": f"node{rank}", "pid": pid, "rank": rank, "step": 100, "path": "ckpt-5",
                         "sha256": "x"})
    h.t = t_f + 11.6
    h.steps(101, 110)
    events = sorted(h.end(), key=lambda e: e["t"])
    [fault] = [m.to_dict() for m in fault_metrics(events)]
    return events, fault


def test_a_tf_recovery_splits_into_detection_relaunch_init_restore_and_first_step() -> None:
    from chaos.analysis.breakdown import (
        FIRST_STEP,
        TF_DETECTION,
        TF_INIT,
        TF_RELAUNCH,
        TF_RESTORE,
        phase_costs,
        phase_settings,
        recovery_breakdowns,
    )

    events, fault = _tf_crash_history()
    [b] = recovery_breakdowns(events, [fault])
    phases = dict(b.phases)
    assert list(phases) == [TF_DETECTION, TF_RELAUNCH, TF_INIT, TF_RESTORE, FIRST_STEP]
    assert phases == pytest.approx({TF_DETECTION: 3.0, TF_RELAUNCH: 1.2, TF_INIT: 6.8, TF_RESTORE: 0.2,
                                    FIRST_STEP: fault["recovery_s"] - 11.2}, abs=1e-3)
    assert b.not_measured == [] and b.largest["phase"] == TF_INIT
    assert "importing TensorFlow" in b.advice
    assert phase_settings(TF_RELAUNCH, "tf-multiworker") == ["node_restart.delay_s"]
    assert phase_settings(TF_INIT, "tf-multiworker") == []  # not torchrun's process-group timeout
    assert phase_costs(TF_INIT) and phase_costs(TF_DETECTION)


def test_a_tf_recovery_without_the_restore_marks_merges_and_says_why() -> None:
    from chaos.analysis.breakdown import FIRST_STEP, TF_INIT, TF_RESTORE, recovery_breakdowns
    from chaos.events import Ev

    events, fault = _tf_crash_history()
    events = [e for e in events if e["event"] not in (Ev.CHECKPOINT_LOAD_STARTED, Ev.CHECKPOINT_LOADED)]
    [b] = recovery_breakdowns(events, [fault])
    assert b.phases[-1][0] == f"{TF_INIT} + {TF_RESTORE} + {FIRST_STEP}"
    assert [x["phase"] for x in b.not_measured] == [TF_INIT, TF_RESTORE]
    assert sum(s for _, s in b.phases) == pytest.approx(fault["recovery_s"])


def test_a_print_only_tf_recovery_uses_the_storage_layers_first_read_and_marks_no_start() -> None:
    """Without the probe: process_started is inferred at the first printed step (no start to mark), and the
    storage layer's first read of the backup is where the restore began."""
    from chaos.analysis.breakdown import FIRST_STEP, TF_DETECTION, TF_INIT, TF_RELAUNCH, TF_RESTORE, recovery_breakdowns
    from chaos.events import Ev, Source

    events, fault = _tf_crash_history()
    t_f = fault["t_injected"]
    events = [e if e.get("source") != Source.WORKLOAD or e["event"] == Ev.STEP_COMPLETED else
              {**e, "source": Source.PROGRESS} for e in events
              if e["event"] not in (Ev.CHECKPOINT_LOAD_STARTED, Ev.CHECKPOINT_LOADED)]
    events.append({"t": t_f + 11.0, "source": Source.STORAGE, "event": Ev.CHECKPOINT_LOADED, "node": "node0",
                   "pid": 99, "path": "ckpt-5.index", "step": 100, "sha256": "x"})
    [b] = recovery_breakdowns(sorted(events, key=lambda e: e["t"]), [fault])
    assert [name for name, _ in b.phases] == [TF_DETECTION, f"{TF_RELAUNCH} + {TF_INIT}",
                                                 f"{TF_RESTORE} + {FIRST_STEP}"]
    assert dict(b.phases)[f"{TF_RELAUNCH} + {TF_INIT}"] == pytest.approx(8.0)
    assert "no probe" in b.not_measured[0]["why"] and "first read" in b.not_measured[-1]["why"]
