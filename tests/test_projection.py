"""Projection to scale (chaos/analysis/projection.py, `chaos project`): the Monte Carlo against Daly's exact closed
form and Young's first order, hand-computed cases, the Llama 3 preset's derivation, and the command on recorded
real runs (tests/data/histories/). Fast: no cluster, a few hundred Monte Carlo jobs per interval."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from chaos.analysis.interval import young
from chaos.analysis.projection import (
    DAY,
    HOUR,
    PRESETS,
    FailureModel,
    Measured,
    ProjectionError,
    daly_wall_s,
    failure_model,
    measured_inputs,
    parse_duration_s,
    project,
    simulate,
    young_ratio,
)
from chaos.analysis.run import analyze_run
from chaos.cli import main
from tests.data.recorded import expand


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    into = tmp_path_factory.mktemp("recorded")
    return {name: expand(name, into) for name in ("quickstart", "elastic-rendezvous-host-crash", "plain-ddp-crash")}


def _measured(c: float, r: float, interval: float | None = None) -> Measured:
    return Measured(run_dir="synthetic", run_nodes=1, recovery_s=r, recovery_source="given", checkpoint_cost_s=c,
                    checkpoint_cost_source="given", step_s=None, interval_s=interval, interval_source="given")


def _mc_mean_and_se(work: float, tau: float, c: float, r: float, m: float, trials: int = 2000) -> tuple[float, float]:
    sim = simulate(work, tau, c, r, m, trials, np.random.default_rng(1))
    return float(sim.wall.mean()), float(sim.wall.std(ddof=1)) / math.sqrt(trials)


def test_hand_computed_case() -> None:
    """M = 1000 s, τ = 100 s, C = 10 s, R = 50 s, 1000 s of work: 10 segments of 110 s, each expected to take
    M·e^{R/M}·(e^{(τ+C)/M} − 1) = 1000 · e^0.05 · (e^0.11 − 1) = 1000 · 1.0512711 · 0.1162781 = 122.239 s."""
    expected_wall = 10 * 1000 * 1.0512711 * 0.1162781
    assert daly_wall_s(1000, 100, 10, 50, 1000) == pytest.approx(expected_wall, rel=1e-6)
    mean, se = _mc_mean_and_se(1000, 100, 10, 50, 1000, trials=20000)
    assert abs(mean - expected_wall) < 4 * se, (mean, expected_wall, se)


def test_without_failures_the_wall_time_is_work_plus_saves() -> None:
    """An MTBF of 10^12 s: 3700 s of work with τ = 600 s is 6 full segments and one of 100 s, 7 saves of 6 s."""
    sim = simulate(3700, 600, 6, 30, 1e12, 50, np.random.default_rng(0))
    assert np.allclose(sim.wall, 3700 + 7 * 6) and sim.failures.sum() == 0
    assert daly_wall_s(3700, 600, 6, 30, 1e12) == pytest.approx(3742, rel=1e-6)


@pytest.mark.parametrize(("tau", "c", "r", "m"), [
    (600, 30, 300, 10 * HOUR),  # C, R ≪ M: Young's regime
    (2 * HOUR, 120, 1200, 5 * HOUR),  # τ close to M: beyond the first order, the exact form still holds
    (60, 5, 20, 300),  # failures every few segments, restarts interrupted often
])
def test_monte_carlo_matches_the_exact_closed_form(tau: float, c: float, r: float, m: float) -> None:
    work = 5 * DAY
    mean, se = _mc_mean_and_se(work, tau, c, r, m)
    assert abs(mean - daly_wall_s(work, tau, c, r, m)) < 4 * se


def test_failures_arrive_at_the_job_rate() -> None:
    """Every failure is counted (in work, saves and restarts): their mean is the wall time over M."""
    m = 2 * HOUR
    sim = simulate(10 * DAY, 1800, 60, 900, m, 2000, np.random.default_rng(2))
    assert sim.failures.mean() == pytest.approx(sim.wall.mean() / m, rel=0.02)


def test_young_regime_best_interval_and_first_order() -> None:
    """C = 60 s, R = 300 s, M = 100 h: first order applies; the swept optimum is Young's √(2CM) within the flat
    range, and Young's 1 − C/τ − (τ+C)/2M − R/M agrees with the Monte Carlo there."""
    model = FailureModel(nodes=100, node_mtbf_s=100 * 100 * HOUR, source="given")
    p = project(_measured(60, 300), model, job_days=30, trials=400)
    y = young(60, 100 * HOUR)
    assert p.young_s == pytest.approx(y)
    assert p.near_best[0] <= y <= p.near_best[1]
    at_young = p.at(p.young_s)
    assert at_young is not None and at_young.first_order_applies
    lo, hi = at_young.ettr_ci95
    assert abs(at_young.ettr - at_young.ettr_closed_form) < hi - lo  # about 4 standard errors
    # first order: exact up to terms in the square of the waste (here ≈ 0.019² ≈ 4e-4)
    assert at_young.ettr == pytest.approx(young_ratio(y, 60, 300, 100 * HOUR), abs=1e-3)
    assert abs(p.best.ettr - at_young.ettr) < 1e-3
    assert p.check["closed_form_inside_ci95"] >= 0.8 * p.check["intervals"]
    assert p.check["max_abs_difference"] < 5e-3  # long intervals spread most; the CI check above is the strict one


def test_current_interval_is_projected_and_compared() -> None:
    model = FailureModel(nodes=1000, node_mtbf_s=5000 * HOUR, source="given")  # M = 5 h
    p = project(_measured(30, 120, interval=4 * HOUR), model, job_days=10, trials=300)
    assert p.current is not None and p.current.interval_s == 4 * HOUR
    assert p.best.ettr > p.current.ettr  # 4 h against √(2·30·5 h) ≈ 17 min: the closed form agrees
    assert p.current.ettr_closed_form < p.best.ettr_closed_form
    parts = (p.current.checkpoint_hours + p.current.rework_hours + p.current.wasted_save_hours
             + p.current.recovery_hours)
    assert parts == pytest.approx(p.current.lost_hours, rel=1e-9)


def test_llama3_preset_derivation() -> None:
    """419 interruptions in 54 days on 16,384 GPUs: per GPU 54·24·16384/419 = 50,677 h; per 8-GPU node 6,335 h;
    so a 2,048-node job (16,384 GPUs) sees one every 54·24/419 = 3.093 h."""
    p = PRESETS["llama3"]
    assert p.gpu_mtbf_s / HOUR == pytest.approx(54 * 24 * 16384 / 419)
    assert p.node_mtbf_s / HOUR == pytest.approx(6334.6, abs=0.1)
    model = failure_model(2048, preset="llama3")
    assert model.job_mtbf_s / HOUR == pytest.approx(54 * 24 / 419)
    assert any("Llama 3 Herd of Models" in line for line in model.derivation)


@pytest.mark.parametrize(("kwargs", "names"), [
    ({"nodes": 0, "mtbf_node": "10h"}, "--nodes"),
    ({"nodes": 8}, "--mtbf-node"),
    ({"nodes": 8, "mtbf_node": "10h", "preset": "llama3"}, "--preset"),
    ({"nodes": 8, "preset": "nope"}, "--preset"),
    ({"nodes": 8, "mtbf_node": "10 years"}, "--mtbf-node"),
    ({"nodes": 8, "mtbf_node": "0h"}, "--mtbf-node"),
])
def test_bad_failure_model_input_names_the_option(kwargs: dict, names: str) -> None:
    with pytest.raises(ProjectionError, match=names):
        failure_model(**kwargs)


def test_durations() -> None:
    assert parse_duration_s("10000h", "x") == 36e6 and parse_duration_s("2d", "x") == 2 * DAY
    assert parse_duration_s("500ms", "x") == 0.5 and parse_duration_s("45", "x") == 45


def test_measured_inputs_of_a_recorded_run(runs: dict[str, Path]) -> None:
    analysis = analyze_run(runs["quickstart"])
    m = measured_inputs(analysis)
    [fault] = [f for f in analysis.result["faults"] if f["restarted"]]
    assert m.recovery_s == fault["recovery_s"] and m.checkpoint_cost_s == analysis.save_cost_s
    assert m.interval_s == pytest.approx(50 * analysis.result["median_step_s"])
    assert "consistent with resuming from the newest checkpoint" in m.lost_check
    assert measured_inputs(analysis, checkpoint_interval="200steps").interval_s == pytest.approx(
        200 * analysis.result["median_step_s"])


def test_project_command_on_a_recorded_run(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run = str(runs["quickstart"])
    assert main(["project", run, "--nodes", "1024", "--mtbf-node", "10000h", "--trials", "200"]) == 0
    text = capsys.readouterr().out
    for needle in ("Inputs", "Projection", "Conclusions", "Assumptions", "job MTBF = 10,000 h / 1,024 nodes = 9.77 h",
                   "current", "best in sweep", "Young √(2CM)", "Check against the closed form"):
        assert needle in text, needle
    assert main(["project", run, "--nodes", "2048", "--preset", "llama3", "--format", "json", "--trials", "200"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["job_mtbf_s"] == pytest.approx(54 * DAY / 419)
    assert data["best"]["ettr"] >= data["current"]["ettr"] - 1e-3
    # `md` and `markdown` name the same format in `project` and `report` alike
    for spelling in ("markdown", "md"):
        assert main(["project", run, "--nodes", "64", "--mtbf-node", "5000h", "--format", spelling,
                     "--trials", "200"]) == 0
        assert "# Projection to scale" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--nodes", "8", "--mtbf-node", "10000x"], "--mtbf-node: expected a duration"),
    (["--nodes", "8"], "give exactly one failure rate"),
    (["--nodes", "8", "--mtbf-node", "10h", "--checkpoint-interval", "soon"], "--checkpoint-interval"),
    (["--nodes", "8", "--mtbf-node", "10h", "--job-days", "0"], "--job-days"),
    (["--nodes", "8", "--mtbf-node", "10h", "--job-days", "nan"], "--job-days"),
    (["--nodes", "8", "--mtbf-node", "10h", "--trials", "1"], "--trials"),
    (["--nodes", "8", "--mtbf-node", "10h", "--seed", "-1"], "--seed"),
    (["--nodes", "-3", "--mtbf-node", "10h"], "--nodes"),
])
def test_project_command_bad_input(runs: dict[str, Path], capsys: pytest.CaptureFixture[str], args: list[str],
                                   message: str) -> None:
    assert main(["project", str(runs["quickstart"]), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_project_command_without_a_run_or_a_recovery(runs: dict[str, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["project", str(tmp_path / "missing"), "--nodes", "8", "--mtbf-node", "10h"]) == 2
    assert "not a run directory" in capsys.readouterr().err
    # the rendezvous host's crash ended the job: no restart, so no measured recovery
    assert main(["project", str(runs["elastic-rendezvous-host-crash"]), "--nodes", "8", "--mtbf-node", "10h"]) == 2
    assert "measured no recovery" in capsys.readouterr().err


def test_checkpoint_cost_not_measured(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """plain-ddp-crash saves with torch.save, unseen: the cost is not measured and the interval not known."""
    run = str(runs["plain-ddp-crash"])
    assert main(["project", run, "--nodes", "8", "--mtbf-node", "10h"]) == 2
    assert "checkpoint cost not measured" in capsys.readouterr().err
    assert main(["project", run, "--nodes", "8", "--mtbf-node", "10h", "--checkpoint-cost", "2s",
                 "--trials", "100"]) == 0
    text = capsys.readouterr().out
    assert "--save-s 2s" in text and "give --checkpoint-interval" in text


def test_report_section(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run = runs["quickstart"]
    md, html = run / "proj.md", run / "proj.html"
    base = ["report", str(run), "--project-nodes", "1024", "--mtbf-node", "10000h", "--trials", "100"]
    assert main([*base, "--format", "markdown", "-o", str(md)]) == 0  # report takes project's spelling too
    assert main([*base, "--format", "html", "-o", str(html)]) == 0
    text = md.read_text()
    assert "## Projection to scale" in text and "### Assumptions" in text and "9.77 h" in text
    assert ">Projection to scale<" in html.read_text()
    assert main(["report", str(run), "--format", "md", "-o", str(md), "--mtbf-node", "10h"]) == 2
    assert "--project-nodes" in capsys.readouterr().err


def test_a_recovery_longer_than_the_job_mtbf_is_named_as_the_reason() -> None:
    """Not 'give fewer --trials': no trial count makes a job progress whose recovery outlasts its MTBF."""
    model = failure_model(1000, mtbf_node="10000h")  # job MTBF 10 h
    with pytest.raises(ProjectionError, match=r"recovery R .* not far below the job's MTBF .*check the recovery"):
        project(_measured(30, 1000 * DAY), model, job_days=30, trials=100)
