"""The golden comparison against the measured noise of a clean resume (chaos.analysis.noise), on synthetic
histories of a print-only job: bitwise, within_noise, diverged (against the band and beyond the ceiling), and
"not checked" with its reason when the control run is missing or untrusted. Each checker is shown passing a
correct history and failing the broken one beside it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaos.analysis.checkpoints import control_request, first_resume_step, matches_golden
from chaos.analysis.noise import BAND_CEILING, BAND_FACTOR, BAND_FLOOR, band
from chaos.analysis.result_json import RESULT_SCHEMA_VERSION
from chaos.analysis.run import analyze
from chaos.events import EndReason, Ev, Source
from tests.conftest import RECORDED_REPORTS_GROUP
from tests.data.recorded import expand

N, RESUMED = 60, 40  # 60 steps; node crashed after step 45, resumed from the checkpoint of step 40


def loss(step: int) -> float:
    return 1.0 / step


def noisy(rel: float) -> dict[int, float]:
    """A clean resume's noise: nothing at the first resumed step, then growing to ``rel`` relative."""
    return {s: loss(s) * (1 + rel * min(1.0, (s - RESUMED - 1) / 10)) for s in range(RESUMED + 1, N + 1)}


def history(after_resume: dict[int, float] | None = None, restart: bool = True) -> list[dict[str, Any]]:
    """What the engine writes for a print-only job: scraped steps, a new process after the crash."""
    events: list[dict[str, Any]] = []
    t = 0.0

    def ev(event: str, **fields: Any) -> None:
        nonlocal t
        t += 1
        events.append({"t": t, "event": event, **fields})

    ev(Ev.PROCESS_STARTED, source=Source.PROGRESS, node="node0", pid="node0:1")
    last = 45 if restart else N
    for s in range(1, last + 1):
        ev(Ev.STEP_COMPLETED, source=Source.PROGRESS, node="node0", pid="node0:1", step=s,
           loss=(after_resume or {}).get(s, loss(s)) if not restart else loss(s))
    if restart:
        ev(Ev.FAULT_INJECTED, source=Source.ENGINE, fault_id=0, kind="crash", target="node1", disruptive=True)
        ev(Ev.PROCESS_STARTED, source=Source.PROGRESS, node="node0", pid="node0:2")
        for s in range(RESUMED + 1, N + 1):
            ev(Ev.STEP_COMPLETED, source=Source.PROGRESS, node="node0", pid="node0:2", step=s,
               loss=(after_resume or {}).get(s, loss(s)))
    ev(Ev.RUN_ENDED, source=Source.ENGINE, reason=EndReason.COMPLETED)
    return events


def golden() -> dict[str, Any]:
    return {"losses": {str(s): loss(s) for s in range(1, N + 1)}, "world_sizes": [1], "steps": N,
            "completed": True, "trusted": True, "state_sha256": None, "run_dir": "golden"}


def control(rel: float, **extra: Any) -> dict[str, Any]:
    losses = {s: loss(s) for s in range(1, N + 1)} | noisy(rel)
    return {"losses": {str(s): v for s, v in losses.items()}, "world_sizes": [1], "steps": N, "completed": True,
            "trusted": True, "run_dir": "control", "resumed_from": RESUMED, "resume_step": RESUMED, **extra}


def test_the_band_is_k_times_the_floor_between_its_floor_and_ceiling() -> None:
    assert band(0.0) == BAND_FLOOR
    assert band(1e-6) == pytest.approx(BAND_FACTOR * 1e-6)
    assert band(1.0) == BAND_CEILING
    assert BAND_FLOOR < BAND_CEILING


def test_bitwise_needs_no_control_run() -> None:
    events = history()
    v = matches_golden(events, golden())
    assert v.ok and v.get("mode") == "bitwise"
    assert control_request(events, golden(), None) is None  # the reference workload never pays for a control


def test_a_clean_resume_within_the_measured_noise_passes() -> None:
    events = history(noisy(1e-6))
    assert first_resume_step(events) == RESUMED
    assert control_request(events, golden(), None) == RESUMED  # not bitwise, below the ceiling: measure
    v = matches_golden(events, golden(), control=control(1e-6))
    assert v.ok and v.get("mode") == "within_noise", v
    assert v.get("noise_floor_rel") == pytest.approx(1e-6)
    assert v.get("band_rel") == pytest.approx(BAND_FACTOR * 1e-6) and v.get("tolerance_source") == "measured"
    assert v.get("times_noise_floor") == pytest.approx(1.0)
    assert v.get("first_differing_step") == RESUMED + 2 and v.get("control_resumed_from") == RESUMED
    assert "within the band 1e-05" in v.why and "noise floor 1e-06" in v.why


def test_a_small_real_bug_beyond_the_band_fails_with_its_size_in_floors() -> None:
    bug = noisy(1e-6) | {s: loss(s) * (1 + 2e-4) for s in range(50, N + 1)}  # e.g. a learning rate restored wrong
    v = matches_golden(history(bug), golden(), control=control(1e-6))
    assert v.ok is False and v.get("mode") == "diverged", v
    assert v.get("first_divergent_step") == 50
    assert v.get("times_noise_floor") == pytest.approx(200, rel=1e-3)
    assert "beyond the noise band at step 50" in v.why and "200x the noise floor" in v.why


def test_a_bug_beyond_the_ceiling_fails_without_a_control_run() -> None:
    bug = {s: loss(s) * 1.05 for s in range(RESUMED + 2, N + 1)}  # optimizer state not restored: ~1e-2 and more
    events = history(bug)
    assert control_request(events, golden(), None) is None
    v = matches_golden(events, golden())
    assert v.ok is False and v.get("mode") == "diverged" and v.get("first_divergent_step") == RESUMED + 2
    assert "beyond any resume noise" in v.why and v.get("tolerance_rel") == BAND_CEILING


def test_a_control_that_stayed_bitwise_leaves_the_band_floor() -> None:
    assert matches_golden(history(noisy(5e-7)), golden(), control=control(0.0)).get("mode") == "within_noise"
    v = matches_golden(history(noisy(5e-6)), golden(), control=control(0.0))
    assert v.get("mode") == "diverged" and v.get("band_rel") == BAND_FLOOR and v.get("times_noise_floor") is None
    assert "measured bitwise" in v.why


def test_without_a_trusted_control_the_comparison_is_not_checked_and_says_why() -> None:
    events = history(noisy(1e-6))
    missing = matches_golden(events, golden())
    assert missing.ok is None and missing.get("mode") == "not_checked"
    assert "no control run measured" in missing.why
    untrusted = matches_golden(events, golden(), control=control(
        1e-6, trusted=False, untrusted_why="the control run restarted 2 time(s) during training and 0 after it"))
    assert untrusted.ok is None and "cannot be trusted: the control run restarted 2" in untrusted.why


def test_a_pinned_tolerance_replaces_the_measurement() -> None:
    events = history(noisy(1e-6))
    assert control_request(events, golden(), 1e-5) is None
    v = matches_golden(events, golden(), rtol=1e-5)
    assert v.ok and v.get("mode") == "within_tolerance" and v.get("tolerance_source") == "checks.loss_rtol"
    assert matches_golden(events, golden(), rtol=1e-7).get("mode") == "diverged"


def test_a_difference_without_any_restart_is_not_resume_noise() -> None:
    events = history(noisy(1e-6), restart=False)
    assert first_resume_step(events) is None and control_request(events, golden(), None) is None
    v = matches_golden(events, golden(), control=control(1e-6))
    assert v.ok is False and "no worker restarted" in v.why


# ---------------------------------------------------------------- on recorded real runs (tests/data/histories)

@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    into = tmp_path_factory.mktemp("noise")
    return {name: expand(name, into) for name in ("plain-ddp-crash", "plain-ddp-no-optimizer-state")}


def test_recorded_stock_ddp_crash_is_within_the_measured_noise(recorded: dict[str, Path]) -> None:
    """A real node crash of tests/byo/plain_ddp.py: not bitwise, equal to its control run's divergence."""
    result = analyze(recorded["plain-ddp-crash"])
    v = result["checkpoint"]["matches_golden"]
    assert result["verdict"] == "pass" and v["mode"] == "within_noise", v
    assert 1e-8 < v["noise_floor_rel"] < 1e-5 and v["band_rel"] == pytest.approx(BAND_FACTOR * v["noise_floor_rel"])
    assert v["times_noise_floor"] == pytest.approx(1.0)  # a clean resume from the same checkpoint is deterministic
    assert v["faulted_resumed_from"] == v["control_resumed_from"] == 100
    assert result["control_run"] and result["schema_version"] == RESULT_SCHEMA_VERSION


def test_recorded_stock_ddp_crash_without_its_control_is_not_checked(recorded: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    run_dir = shutil.copytree(recorded["plain-ddp-crash"], tmp_path / "no-control")
    (run_dir / "control.json").unlink()
    v = analyze(run_dir)["checkpoint"]["matches_golden"]
    assert v["ok"] is None and "no control run measured" in v["why"]
    control = json.loads((recorded["plain-ddp-crash"] / "control.json").read_text())
    (run_dir / "control.json").write_text(json.dumps({**control, "trusted": False,
                                                      "untrusted_why": "the control run restarted 2 time(s)"}))
    v = analyze(run_dir)["checkpoint"]["matches_golden"]
    assert v["ok"] is None and "cannot be trusted: the control run restarted 2 time(s)" in v["why"]


def test_recorded_run_with_a_small_planted_drift_is_diverged_in_floors(recorded: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    """The checker can fail on the same real run: a drift of 1e-4 from step 130 on (a bug far smaller than any
    measured) is beyond the band; a control 100 times quieter still leaves the band's floor (1e-6)."""
    run_dir = shutil.copytree(recorded["plain-ddp-crash"], tmp_path / "drift")
    lines = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["event"] == Ev.STEP_COMPLETED and e["step"] >= 130 and e.get("loss") is not None:
            e["loss"] *= 1 + 1e-4
        lines.append(json.dumps(e))
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
    v = analyze(run_dir)["checkpoint"]["matches_golden"]
    assert v["ok"] is False and v["mode"] == "diverged" and v["first_divergent_step"] == 130, v
    assert v["times_noise_floor"] > 100 and "x the noise floor" in v["why"]

    quiet = shutil.copytree(recorded["plain-ddp-crash"], tmp_path / "quiet")
    control = json.loads((quiet / "control.json").read_text())
    gold = json.loads((quiet / "golden.json").read_text())["losses"]
    control["losses"] = {s: gold[s] + (v - gold[s]) / 100 for s, v in control["losses"].items()}
    (quiet / "control.json").write_text(json.dumps(control))
    v = analyze(quiet)["checkpoint"]["matches_golden"]
    assert v["mode"] == "within_noise" and v["band_rel"] == BAND_FLOOR, v


@pytest.mark.xdist_group(RECORDED_REPORTS_GROUP)  # the worker that draws these reports for test_report_views too
def test_recorded_planted_bug_is_diverged_and_every_report_says_which(
        recorded: dict[str, Path], recorded_report: Callable[[str, str], Path]) -> None:
    result = analyze(recorded["plain-ddp-no-optimizer-state"])
    v = result["checkpoint"]["matches_golden"]
    assert result["verdict"] == "fail" and v["mode"] == "diverged" and v["first_divergent_step"] == 102
    assert v["max_rel_loss_diff"] > 100 * BAND_CEILING and result["control_run"] is None
    for name, mode in (("plain-ddp-crash", "ok (within_noise)"), ("plain-ddp-no-optimizer-state",
                                                                  "FAILED (diverged)")):
        md = recorded_report(name, "md").read_text()
        assert mode in md, md
        assert mode.split(" ")[1] in recorded_report(name, "html").read_text()


@pytest.mark.usefixtures("no_leftovers")
def test_the_engine_asks_for_a_control_run_only_when_needed_and_keeps_it(tmp_path: Path) -> None:
    """A real toy job (print-only, crashed once, re-run from scratch by the engine) against stand-in golden
    summaries: bitwise asks for no control run; a 1e-7 difference asks for one at the resume step, keeps its
    summary in control.json, and the verdict comes out within_noise from the run directory alone."""
    from chaos.engine import Engine
    from chaos.loading import parse_scenario

    script = Path(__file__).resolve().parent / "broken" / "print_steps.py"
    scenario = parse_scenario(f"""\
name: toy-noise
cluster: {{mode: centralized, nodes: 1, node_restart: {{policy: on-failure, delay_s: 0.2}}}}
workload:
  command: [python, {script}, '20']
  progress_regex: 'step (?P<step>\\d+) \\| loss (?P<loss>[0-9.]+)'
faults: [{{kind: crash, target: 0, at_step: 3}}]
""")
    printed = {s: float(f"{1.0 / s:.4f}") for s in range(1, 21)}

    def summary(scale: float) -> dict[str, Any]:
        return {"losses": {str(s): v * scale for s, v in printed.items()}, "world_sizes": [1], "steps": 20,
                "completed": True, "trusted": True, "state_sha256": None, "run_dir": f"x{scale}", "cached": True,
                "resumed_from": 0}

    asked: list[int] = []
    bitwise = Engine(scenario, out_dir=tmp_path, html_report=False, golden=lambda s: summary(1.0),
                     control=lambda s, step: asked.append(step) or summary(1.0)).run()
    # printed with 4 decimals: equal as printed, never called bitwise (issue 32); still no control run
    assert bitwise["checkpoint"]["matches_golden"]["mode"] == "equal_as_printed" and asked == []

    engine = Engine(scenario, out_dir=tmp_path, html_report=False, golden=lambda s: summary(1 + 1e-7),
                    control=lambda s, step: asked.append(step) or summary(1 + 2e-7))
    result = engine.run()
    assert asked == [0]  # re-run from scratch: the control resumes from step 0 too
    v = result["checkpoint"]["matches_golden"]
    assert v["mode"] == "within_noise" and v["noise_floor_rel"] == pytest.approx(1e-7, rel=0.01), v
    assert json.loads((engine.run_dir / "control.json").read_text())["run_dir"] == f"x{1 + 2e-7}"
    assert analyze(engine.run_dir)["checkpoint"]["matches_golden"] == v
