"""Projection for reviewers (issue 35 item 5): inputs labelled by origin, a team's incident CSV, GPU-hours and cost,
sensitivity, recovery's growth fitted from runs at several node counts, and an interval from the inputs' uncertainty.
Fast: recorded real runs (tests/data/histories/) and hand-computed synthetic inputs, no cluster."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from chaos.analysis.projection import (
    ASSUMED,
    DAY,
    EXTRAPOLATED,
    HOUR,
    MEASURED,
    SUPPLIED,
    FailureModel,
    Measured,
    ProjectionError,
    daly_wall_s,
    failure_model,
    measured_inputs,
    project,
    project_run,
)
from chaos.analysis.projection_incidents import IncidentError, read_incidents
from chaos.analysis.projection_scaling import fit_growth
from chaos.analysis.projection_uncertainty import FACTORS, _mtbf_draws
from chaos.analysis.run import RunAnalysis, analyze_run
from chaos.cli import main
from chaos.reports.projection import input_rows, render_text
from tests.data.recorded import expand

# 100 nodes for 10 days, then 200 nodes for 5 + 5 days: 1000 + 1000 + 1000 = 3000 node-days = 72,000 node-hours over
# 3 counted failures (the first row opens the window): node MTBF 24,000 h. Downtimes 600 s and 1200 s: mean 900 s.
INCIDENTS = """timestamp,nodes,downtime
2026-01-01T00:00:00Z,100,
2026-01-11T00:00:00Z,100,600
2026-01-16T00:00:00Z,200,20m
2026-01-21T00:00:00Z,200,
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    into = tmp_path_factory.mktemp("recorded")
    return {name: expand(name, into) for name in ("quickstart", "centralized-crash", "corrupt-latest-checkpoint")}


@pytest.fixture()
def incidents(tmp_path: Path) -> Path:
    path = tmp_path / "incidents.csv"
    path.write_text(INCIDENTS)
    return path


def _measured(c: float, r: float, interval: float | None = None, **kw: object) -> Measured:
    return Measured(run_dir="synthetic", run_nodes=1, recovery_s=r, recovery_source="given", checkpoint_cost_s=c,
                    checkpoint_cost_source="given", step_s=None, interval_s=interval, interval_source="given",
                    **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------------ incidents


def test_incident_history_hand_computed(incidents: Path) -> None:
    h = read_incidents(incidents)
    assert (h.rows, h.failures_counted) == (4, 3)
    assert h.exposure_node_s / HOUR == pytest.approx(72_000)
    assert h.node_mtbf_s / HOUR == pytest.approx(24_000)
    assert h.downtimes_s == (600.0, 1200.0) and h.mean_downtime_s == 900.0
    model = failure_model(1000, incidents=h)
    assert model.origin == SUPPLIED and model.failures_counted == 3
    assert model.job_mtbf_s / HOUR == pytest.approx(24.0)


def test_incident_history_without_a_nodes_column(tmp_path: Path) -> None:
    path = tmp_path / "inc.csv"
    path.write_text("\ufeffTimestamp\n0\n3600\n10800\n", encoding="utf-8")  # a spreadsheet's export: BOM, capital
    with pytest.raises(IncidentError, match=r"inc.csv:1: no 'nodes' column.*--incidents-nodes"):
        read_incidents(path)
    h = read_incidents(path, default_nodes=10)  # 3 h × 10 nodes over 2 failures
    assert h.node_mtbf_s == pytest.approx(15 * HOUR)


@pytest.mark.parametrize(("text", "message"), [
    ("", r"inc.csv:1: empty"),
    ("when,nodes\n0,1\n", r"inc.csv:1: no 'timestamp' column"),
    ("timestamp,nodes\n0,4\nyesterday,4\n", r"inc.csv:3: column 1 \(timestamp\): expected an ISO 8601 time"),
    ("timestamp,nodes\n2026-01-01T00:00:00,4\n", r"inc.csv:2: column 1 \(timestamp\).*'2026-01-01T00:00:00'"),
    ("timestamp,nodes\n0,4\n60,four\n", r"inc.csv:3: column 2 \(nodes\): expected a whole number of nodes"),
    ("timestamp,nodes\n0,4\n60,\n", r"inc.csv:3: column 2 \(nodes\) is empty"),
    ("timestamp,nodes,downtime\n0,4,1m\n60,4,soon\n", r"inc.csv:3: column 3 \(downtime\): expected seconds"),
    ("timestamp,nodes\n0,4\n", r"1 failure row\(s\); a rate needs at least 2"),
    ("timestamp,nodes\n5,4\n5,4\n", r"same timestamp"),
])
def test_bad_incident_csv_names_file_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "inc.csv"
    path.write_text(text)
    with pytest.raises(IncidentError, match=message):
        read_incidents(path)


def test_bad_incident_csv_on_the_command_line(runs: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "inc.csv"
    path.write_text("timestamp,nodes\n0,4\n60,x\n")
    run = str(runs["quickstart"])
    assert main(["project", run, "--nodes", "64", "--incidents", str(path)]) == 2
    err = capsys.readouterr().err
    assert "inc.csv:3: column 2 (nodes)" in err and "Traceback" not in err
    assert main(["project", run, "--nodes", "64", "--incidents", str(tmp_path / "missing.csv")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    assert main(["project", run, "--nodes", "64", "--incidents", str(path), "--mtbf-node", "10h"]) == 2
    assert "exactly one failure rate" in capsys.readouterr().err


def test_incidents_give_the_mtbf_and_the_recovery(runs: dict[str, Path], incidents: Path) -> None:
    p = project_run(analyze_run(runs["quickstart"]), 1000, incidents=str(incidents), trials=50)
    assert p.model.node_mtbf_s / HOUR == pytest.approx(24_000)
    assert p.measured.recovery_s == 900.0 and p.measured.recovery_origin == SUPPLIED
    assert p.measured.recovery_samples == (600.0, 1200.0)
    text = render_text(p)
    assert "mean downtime of 2 failure(s) in --incidents" in text and "3 inter-failure intervals" in text


# ---------------------------------------------------------------------------------------------- origins of inputs


def _rows(p: object) -> dict[str, tuple[str, ...]]:
    return {row[0]: row for row in input_rows(p)}  # type: ignore[arg-type]


def test_each_input_is_labelled_measured_supplied_or_assumed(runs: dict[str, Path]) -> None:
    analysis = analyze_run(runs["quickstart"])
    measured = _rows(project_run(analysis, 1024, mtbf_node="10000h", trials=50))
    assert measured["recovery R"][2] == MEASURED and measured["checkpoint cost C"][2] == MEASURED
    assert measured["step time"][2] == MEASURED and measured["checkpoint interval τ"][2] == MEASURED
    assert measured["per-node MTBF"][2] == SUPPLIED and measured["job length"][2] == ASSUMED
    assert measured["GPUs per node"][2] == ASSUMED

    p = project_run(analysis, 1024, preset="llama3", recovery="10m", checkpoint_cost="30s", step="2s",
                    gpus_per_node=4, price_per_gpu_hour=2.0, job_days=20, trials=50)
    supplied = _rows(p)
    for name in ("recovery R", "checkpoint cost C", "step time", "checkpoint interval τ", "job length",
                 "GPUs per node", "price per GPU-hour"):
        assert supplied[name][2] == SUPPLIED, name
    assert supplied["per-node MTBF"][2] == ASSUMED  # a published preset, not the team's figure
    assert p.measured.recovery_s == 600 and p.measured.checkpoint_cost_s == 30 and p.measured.step_s == 2
    assert p.measured.interval_s == pytest.approx(50 * 2)  # the run's checkpoint_every 50 × the supplied step
    assert "measured here" in supplied["recovery R"][3]  # what the run measured stays visible beside the override


def test_bad_new_options(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run = str(runs["quickstart"])
    base = ["project", run, "--nodes", "8", "--mtbf-node", "10h", "--trials", "20"]
    for extra, message in ((["--step-s", "fast"], "--step-s"), (["--recovery-s", "-1"], "--recovery-s"),
                           (["--gpus-per-node", "0"], "--gpus-per-node"),
                           (["--price-per-gpu-hour", "nan"], "--price-per-gpu-hour"),
                           (["--incidents-nodes", "4"], "--incidents-nodes")):
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


# ----------------------------------------------------------------------------------------- GPU-hours, sensitivity


def test_gpu_hours_and_cost() -> None:
    model = FailureModel(nodes=512, node_mtbf_s=5000 * HOUR, source="synthetic")
    p = project(_measured(60, 600, interval=HOUR), model, job_days=10, trials=100, gpus_per_node=4,
                price_per_gpu_hour=2.5)
    h = p.headline
    assert h is not None and h.which == "the current interval"
    work = 10 * DAY
    expected = (daly_wall_s(work, HOUR, 60, 600, model.job_mtbf_s) - work) / HOUR
    assert h.lost_hours == pytest.approx(expected, rel=1e-9)
    assert h.gpu_hours == pytest.approx(expected * 512 * 4, rel=1e-9)
    assert h.cost == pytest.approx(h.gpu_hours * 2.5, rel=1e-12)
    text = render_text(p)
    assert f"Lost GPU-hours per job: {h.gpu_hours:,.0f}" in text and f"their cost: {h.cost:,.0f}" in text


def test_sensitivity_is_the_closed_form_with_one_input_scaled() -> None:
    c, r, m_node, n, tau = 60.0, 600.0, 5000 * HOUR, 512, HOUR
    model = FailureModel(nodes=n, node_mtbf_s=m_node, source="synthetic")
    p = project(_measured(c, r, interval=tau), model, job_days=10, trials=50)
    work = 10 * DAY
    rows = {row.input: row for row in p.sensitivity}

    def lost(c: float = c, r: float = r, m: float = m_node / n, tau: float = tau) -> float:
        return (daly_wall_s(work, tau, c, r, m) - work) / HOUR

    for i, f in enumerate(FACTORS):
        assert rows["recovery R"].lost_hours[i] == pytest.approx(lost(r=r * f), rel=1e-9)
        assert rows["checkpoint cost C"].lost_hours[i] == pytest.approx(lost(c=c * f), rel=1e-9)
        assert rows["node MTBF"].lost_hours[i] == pytest.approx(lost(m=m_node * f / n), rel=1e-9)
        assert rows["checkpoint interval τ"].lost_hours[i] == pytest.approx(lost(tau=tau * f), rel=1e-9)
        assert rows["nodes N"].lost_hours[i] == pytest.approx(lost(m=m_node / (n * f)), rel=1e-9)
    # the directions a reviewer expects: a slower recovery or a shorter MTBF loses more
    assert rows["recovery R"].lost_hours[0] < p.headline.lost_hours < rows["recovery R"].lost_hours[1]
    assert rows["node MTBF"].lost_hours[0] > p.headline.lost_hours > rows["node MTBF"].lost_hours[1]
    assert "Sensitivity" in render_text(p)


# --------------------------------------------------------------------------------------------- growth with N


def test_fit_picks_ln_n_for_logarithmic_growth() -> None:
    wobble = [0.02, -0.02, 0.01, -0.01, 0.0, 0.015]
    points = [(n, 2 + 3 * math.log(n) + w) for n, w in zip([2, 4, 8, 16, 2, 8], wobble, strict=True)]
    fit = fit_growth("recovery", points)
    assert fit is not None and fit.law == "a + b·ln N" and not fit.tie
    assert fit.a == pytest.approx(2, abs=0.05) and fit.b == pytest.approx(3, abs=0.05)
    assert fit.residual_s is not None and fit.residual_s < 0.03 < (fit.other_residual_s or 0)
    assert fit.at(1024) == pytest.approx(2 + 3 * math.log(1024), abs=0.5)
    se = fit.mean_se(1024)
    assert se is not None and se > fit.mean_se(4)  # the farther from the runs, the less the fit knows
    assert "EXTRAPOLATION" in fit.describe(1024) and "fitted worse" in fit.describe(1024)


def test_fit_picks_linear_growth() -> None:
    fit = fit_growth("recovery", [(2, 2.0), (4, 3.01), (8, 4.99), (16, 9.0)])
    assert fit is not None and fit.law == "a + b·N"
    assert fit.b == pytest.approx(0.5, abs=0.01)


def test_fit_with_two_node_counts_says_the_data_do_not_choose() -> None:
    fit = fit_growth("recovery", [(2, 5.0), (8, 7.0)])
    assert fit is not None and fit.tie and fit.residual_s is None and fit.mean_se(1024) is None
    text = fit.describe(1024)
    assert "do not choose" in text and "no residual" in text
    assert fit.other_at(1024) == pytest.approx(5 + (7 - 5) / 6 * (1024 - 2))
    assert fit_growth("recovery", [(3, 5.0), (3, 6.0)]) is None


def test_runs_at_several_node_counts_on_the_command_line(runs: dict[str, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The recorded quickstart and corrupt-latest-checkpoint (3 nodes) and centralized-crash (1 node)."""
    three, one, three_again = (str(runs[n]) for n in ("quickstart", "centralized-crash", "corrupt-latest-checkpoint"))
    assert main(["project", three, one, three_again, "--nodes", "1024", "--mtbf-node", "10000h",
                 "--trials", "50"]) == 0
    text = capsys.readouterr().out
    assert EXTRAPOLATED in text and "EXTRAPOLATION" in text and "fitted on N = 1, 3" in text
    assert "do not choose" in text  # two node counts only
    assert "WARNING: the runs are not the same job (modes centralized and elastic" in text
    assert "recovery R: the fit's standard error at N = 1,024" in text  # its residual feeds the interval
    # the same job at one node count only: nothing to fit
    assert main(["project", three, three_again, "--nodes", "1024", "--mtbf-node", "10000h"]) == 2
    assert "two node counts at least" in capsys.readouterr().err


def test_one_run_flags_recovery_taken_at_its_own_size(runs: dict[str, Path]) -> None:
    p = project_run(analyze_run(runs["quickstart"]), 1024, mtbf_node="10000h", trials=50)
    assert p.measured.recovery_origin == MEASURED and p.measured.scaling_note.startswith("FLAG")
    text = render_text(p)
    assert "FLAG: recovery is taken as measured at the run's own size (3 node(s)), not at 1,024" in text
    assert "FLAG: taken as measured on this 3-node run, not at 1,024 nodes: recovery R (6.23 s)" in text


# ---------------------------------------------------------------------------------------------- the interval


def test_mtbf_draws_follow_the_chi_square_interval() -> None:
    """k = 10 failures: 2k·MTBF_hat/MTBF is χ²(20), whose 2.5% and 97.5% points are 9.591 and 34.170 (tables), so
    the MTBF lies within [20/34.170, 20/9.591] = [0.585, 2.085] × the estimate."""
    model = FailureModel(nodes=1, node_mtbf_s=1000.0, source="synthetic", failures_counted=10)
    draws, cover = _mtbf_draws(model, np.random.default_rng(0))
    lo, hi = np.percentile(draws / 1000.0, [2.5, 97.5])
    assert lo == pytest.approx(20 / 34.170, rel=0.06) and hi == pytest.approx(20 / 9.591, rel=0.06)
    assert cover is not None and "10 counted failures" in cover


def test_interval_is_real_and_says_what_it_covers(runs: dict[str, Path], incidents: Path) -> None:
    analysis = analyze_run(runs["quickstart"])
    p = project_run(analysis, 2048, preset="llama3", trials=50)
    h = p.headline
    assert h is not None
    lo, hi = h.lost_hours_95
    assert lo < h.lost_hours < hi and hi - lo > 0.02 * h.lost_hours
    assert any("419 counted failures" in c for c in h.covers)
    assert any("bootstrap of the median over" in c for c in h.covers)  # the run's saves
    assert any("recovery R (one value" in e for e in h.exact)  # one restart: its spread is not known, and said so
    # three failures say far less than 419: the interval widens
    few = project_run(analysis, 2048, incidents=str(incidents), trials=50).headline
    assert few is not None
    assert (few.lost_hours_95[1] - few.lost_hours_95[0]) / few.lost_hours > (hi - lo) / h.lost_hours


def test_no_uncertainty_known_no_interval_pretended(runs: dict[str, Path]) -> None:
    p = project_run(analyze_run(runs["quickstart"]), 1024, mtbf_node="10000h", recovery="5m", checkpoint_cost="20s",
                    trials=50)
    assert p.headline is not None and not p.headline.covers
    text = render_text(p)
    first = next(line for line in text.splitlines() if line.startswith("- At the current interval"))
    assert "95% interval" not in first and "No interval on the expected value" in text
    assert "95% of them lose" in text  # single jobs still spread: their failures are random


def test_json_and_report_carry_the_new_sections(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run = runs["quickstart"]
    assert main(["project", str(run), "--nodes", "512", "--preset", "llama3", "--format", "json", "--trials", "50",
                 "--price-per-gpu-hour", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["headline"]["price_per_gpu_hour"] == 3 and len(data["sensitivity"]) == 5
    md = run / "proj.md"
    assert main(["report", str(run), "--project-nodes", "512", "--preset", "llama3", "--trials", "50",
                 "--format", "md", "-o", str(md)]) == 0
    text = md.read_text()
    assert "### Headline" in text and "### Sensitivity" in text and "### Growth with node count" in text


def test_synthetic_recovery_spread_bootstraps_the_mean() -> None:
    model = FailureModel(nodes=256, node_mtbf_s=2000 * HOUR, source="synthetic")
    m = _measured(30, 100, interval=1800, recovery_origin=MEASURED, recovery_samples=(60.0, 100.0, 140.0))
    p = project(m, model, job_days=10, trials=50)
    assert p.headline is not None and any("bootstrap of the mean over 3" in c for c in p.headline.covers)
    lo, hi = p.headline.lost_hours_95
    assert lo < p.headline.lost_hours < hi



def _at_nodes(analysis: RunAnalysis, nodes: int, recovery_s: float, rendezvous_s: float) -> RunAnalysis:
    """The recorded quickstart as if its one restart had been measured at ``nodes`` nodes (synthetic: the numbers
    are chosen by the test, so the fit has a known answer)."""
    [fault] = [f for f in analysis.model.faults if f.restarted]
    breakdown = {"phases": [{"phase": "rendezvous", "seconds": rendezvous_s}]}
    synthetic = dataclasses.replace(fault, recovery_s=recovery_s,
                                    extra={**fault.extra, "recovery_breakdown": breakdown})
    cluster = analysis.scenario.cluster.model_copy(update={"nodes": nodes})
    return dataclasses.replace(analysis, scenario=analysis.scenario.model_copy(update={"cluster": cluster}),
                               model=dataclasses.replace(analysis.model, faults=(synthetic,)))


def test_recovery_and_rendezvous_fitted_from_runs_at_2_4_8_nodes(runs: dict[str, Path]) -> None:
    """Recovery 4 + 2·ln N and rendezvous 1 + 1.5·ln N, slightly off the law: ln N is chosen for both, the value at
    1,024 nodes is the fit's, labelled an extrapolation, and the nodes row of the sensitivity moves R with N."""
    base = analyze_run(runs["quickstart"])
    wobble = {2: 0.05, 4: -0.05, 8: 0.03}
    scaled = tuple(_at_nodes(base, n, 4 + 2 * math.log(n) + w, 1 + 1.5 * math.log(n) - w) for n, w in wobble.items())
    m = measured_inputs(scaled[0], scaling=scaled, nodes=1024)
    assert m.recovery_origin == EXTRAPOLATED and m.recovery_fit is not None and m.rendezvous_fit is not None
    assert m.recovery_fit.law == m.rendezvous_fit.law == "a + b·ln N" and not m.recovery_fit.tie
    assert m.recovery_s == pytest.approx(m.recovery_fit.at(1024)) and m.recovery_s == pytest.approx(
        4 + 2 * math.log(1024), abs=0.5)
    assert m.rendezvous_fit.at(1024) == pytest.approx(1 + 1.5 * math.log(1024), abs=0.5)
    p = project(m, failure_model(1024, mtbf_node="10000h"), trials=50)
    nodes_row = next(r for r in p.sensitivity if r.input.startswith("nodes N"))
    assert "R follows the fit" in nodes_row.input
    text = render_text(p)
    assert "rendezvous_s(N) = " in text and "Recovery R is extrapolated by a fit on runs at N = 2, 4, 8" in text


def test_a_fit_falling_to_zero_at_the_projected_size_is_refused(runs: dict[str, Path]) -> None:
    base = analyze_run(runs["quickstart"])
    shrinking = tuple(_at_nodes(base, n, 10 - n, 1.0) for n in (2, 4, 8))  # 8, 6, 2 s: linear, 0 at N = 10
    with pytest.raises(ProjectionError, match=r"falls to .* at 1,024 nodes.*--recovery-s"):
        measured_inputs(shrinking[0], scaling=shrinking, nodes=1024)
