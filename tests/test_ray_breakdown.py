"""Recovery under Ray in Ray's terms: Ray Train's controller lines (read from the driver's output by
chaos.launchers.ray_node) become ray_* events, and the analysis cuts detection, worker-group restart, checkpoint
restore and first step from them, naming the Ray settings that bound each."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from chaos.analysis.breakdown import DETECTION, FIRST_STEP, RAY_RESTART, RAY_RESTORE, recovery_breakdowns
from chaos.events import Ev, Source
from chaos.launchers.ray import Ray
from chaos.launchers.ray_node import ControllerLines, relay

# As the driver prints them (Ray 2.60, log_to_driver: colour codes around the actor's prefix).
PREFIX = "\x1b[36m(TrainController pid=254)\x1b[0m "
FAILURE = [PREFIX + "[FailurePolicy] RETRY\n", PREFIX + "  Source: worker group\n",
           PREFIX + "  Error count: 1 (max allowed: 3)\n", PREFIX + "Error: Training failed due to worker errors:\n"]
STARTING = (PREFIX + "Attempting to start training worker group of size 2 with the following resources: "
            "[{'CPU': 1.0}] * 2\n")
STARTED = PREFIX + "Started training worker group of size 2: \n"


def collect() -> tuple[ControllerLines, list[tuple[Ev, float, dict[str, Any]]]]:
    got: list[tuple[Ev, float, dict[str, Any]]] = []
    return ControllerLines(lambda event, t, fields: got.append((event, t, fields))), got


def test_the_controllers_lines_become_events_with_the_failure_count_and_its_limit() -> None:
    lines, got = collect()
    for i, line in enumerate(["epoch=3 loss=0.1\n", *FAILURE, STARTING, STARTED]):
        lines.feed(line, float(i))
    lines.flush()
    assert got == [(Ev.RAY_FAILURE_DETECTED, 1.0, {"decision": "RETRY", "error_count": 1, "max_failures": 3}),
                   (Ev.RAY_WORKER_GROUP_STARTING, 5.0, {"size": 2}),
                   (Ev.RAY_WORKER_GROUP_STARTED, 6.0, {"size": 2})]


def test_a_failure_line_without_its_count_is_still_written_stamped_when_it_was_read() -> None:
    lines, got = collect()
    lines.feed(PREFIX + "[FailurePolicy] RAISE\n", 7.0)
    for i in range(6):
        lines.feed("unrelated\n", 8.0 + i)
    assert got == [(Ev.RAY_FAILURE_DETECTED, 7.0, {"decision": "RAISE"})]


def test_the_relay_passes_every_line_on_unchanged(tmp_path: Path) -> None:
    lines, got = collect()
    text = "".join(["a\n", *FAILURE, STARTED, "last line without newline"]).encode()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out = (tmp_path / "out").open("wb")
    thread = threading.Thread(target=relay, args=(proc.stdout, out, lines, threading.Lock()))
    thread.start()
    assert proc.stdin is not None
    proc.stdin.write(text)
    proc.stdin.close()
    proc.wait(10)
    thread.join(5)
    out.close()
    assert (tmp_path / "out").read_bytes() == text
    assert [g[0] for g in got] == [Ev.RAY_FAILURE_DETECTED, Ev.RAY_WORKER_GROUP_STARTED]


def test_the_installed_ray_still_prints_these_lines() -> None:
    """The patterns follow Ray Train V2's texts: a Ray that rewords them must fail here, not in a run."""
    import importlib.util

    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("Ray is not installed (the [ray] extra)")
    base = Path(next(iter(spec.submodule_search_locations))) / "train" / "v2" / "_internal" / "execution"
    policy = (base / "failure_handling" / "default.py").read_text()
    group = (base / "worker_group" / "worker_group.py").read_text()
    assert "[FailurePolicy] {decision.value}" in policy and "Error count: " in policy
    assert "Attempting to start training worker group of size" in group
    assert "Started training worker group of size" in group


def history(t_f: float, *, probe: bool = True, ray_lines: bool = True) -> list[dict[str, Any]]:
    """A worker crash under Ray at ``t_f`` as the engine records it (times from a real run of ray/worker-crash)."""
    env = {"mode": "ray", "orchestrator": Ray.orchestrator, "levers": Ray.levers_in_force({})}
    ev: list[dict[str, Any]] = [{"t": t_f - 60, "event": Ev.RUN_STARTED, "source": Source.ENGINE, "environment": env}]
    if ray_lines:
        ev += [{"t": t_f + 2.4, "event": Ev.RAY_FAILURE_DETECTED, "source": Source.RAY, "node": "node0", "pid": 9,
                "decision": "RETRY", "error_count": 1, "max_failures": 3},
               {"t": t_f + 5.0, "event": Ev.RAY_WORKER_GROUP_STARTING, "source": Source.RAY, "node": "node0",
                "pid": 9, "size": 2},
               {"t": t_f + 8.5, "event": Ev.RAY_WORKER_GROUP_STARTED, "source": Source.RAY, "node": "node0",
                "pid": 9, "size": 2}]
    if probe:
        for rank, node in ((0, "node2"), (1, "node1")):
            common = {"source": Source.WORKLOAD, "node": node, "pid": 100 + rank, "rank": rank}
            ev += [{"t": t_f + 8.68, "event": Ev.PROCESS_STARTED, **common},
                   {"t": t_f + 8.72, "event": Ev.CHECKPOINT_LOAD_STARTED, "step": 75, "path": "/c/75", **common},
                   {"t": t_f + 8.75, "event": Ev.CHECKPOINT_LOADED, "step": 75, "path": "/c/75", "sha256": "x",
                    **common}]
    return sorted(ev, key=lambda e: e["t"])


def fault(t_f: float) -> dict[str, Any]:
    return {"id": 0, "kind": "kill_worker", "target": "node1", "disruptive": True, "t_injected": t_f,
            "restarted": True, "resumed_from": 75, "recovery_s": 8.83, "lost_steps": 35, "injected": True}


def test_a_ray_recovery_splits_into_rays_phases_that_add_up() -> None:
    t_f = 1000.0
    [b] = recovery_breakdowns(history(t_f), [fault(t_f)])
    names = [name for name, _ in b.phases]
    assert names == [DETECTION, RAY_RESTART, RAY_RESTORE, FIRST_STEP], b.phases
    assert abs(sum(s for _, s in b.phases) - 8.83) < 1e-6
    assert b.not_measured == []
    # the largest part is the worker group's restart, named with Ray's settings and this run's failure count
    assert b.largest is not None and b.largest["phase"] == RAY_RESTART
    assert b.advice is not None and "FailureConfig(max_failures)" in b.advice and "failure 1 of at most 3" in b.advice
    assert "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S (60.0 s)" in b.advice
    json.dumps(b.to_dict())


def test_detection_names_the_controllers_poll_and_the_gcs_health_checks_in_force() -> None:
    levers = Ray.levers_in_force({"RAY_health_check_period_ms": "1000"})
    assert "1000 ms x 5" in levers[DETECTION] and "(2.0 s)" in levers[DETECTION]


def test_a_plain_script_without_the_probe_says_the_restore_is_not_measured_and_why() -> None:
    t_f = 1000.0
    [b] = recovery_breakdowns(history(t_f, probe=False), [fault(t_f)])
    assert [name for name, _ in b.phases] == [DETECTION, RAY_RESTART, f"{RAY_RESTORE} + {FIRST_STEP}"], b.phases
    assert [m["phase"] for m in b.not_measured] == [RAY_RESTORE]
    assert "no probe" in b.not_measured[0]["why"]


def test_a_ray_history_without_the_controllers_lines_is_one_span_and_says_why() -> None:
    t_f = 1000.0
    [b] = recovery_breakdowns(history(t_f, ray_lines=False), [fault(t_f)])
    assert b.phases[0][0].startswith(f"{DETECTION} + restart"), b.phases
    assert "no ray_* event" in b.not_measured[0]["why"]

