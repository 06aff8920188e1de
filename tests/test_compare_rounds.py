"""``chaos compare`` of federated runs (chaos.compare_rounds): Flower's own page, rounds instead of steps, built
from synthetic histories shaped like flower-mlp's (chaos.analysis.federated computes each run's figures), and the
routing that keeps rounds out of the step table when both kinds are compared. No Flower, no processes: fast."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chaos import compare, compare_rounds
from chaos.analysis.federated import federated_metrics
from chaos.compare_rounds import conclusions, measure_rounds, render_html, render_markdown, round_table, table
from chaos.loading import load_scenario, shipped_scenarios_dir
from tests.test_federated_metrics import _history, _round

SAMPLES = [["node1", "node2"], ["node2", "node3"], ["node1", "node3"], ["node2", "node3"], ["node2", "node3"],
           ["node3", "node2"]]


def _fed(fault: tuple[float, str] | None, slow: float = 0.0, failed: int | None = None,
         acc: float = 0.95, ended_at: int | None = None) -> dict[str, Any]:
    """A six-round run's federated section: a round a second, the fault (if any) right after round 2 at t 12.5,
    ``slow`` seconds added to round 3, round ``failed`` with one of its clients failing, training ended after
    round ``ended_at`` (a server lost for good)."""
    rows, t = [], 10.0
    for i, sampled in enumerate(SAMPLES, 1):
        if ended_at is not None and i > ended_at:
            break
        t += 1.0 + (slow if i == 3 else 0.0)
        bad = [sampled[0]] if i == failed else []
        rows.append(_round(t, i, 2 - len(bad), len(bad), sampled, bad, loss=1 - acc if i == 6 else 0.5,
                           acc=acc if i == 6 else 0.5))
    fed = federated_metrics(_history(rows, [fault] if fault else [],
                                     reason="completed" if ended_at is None else "failed"), planned_rounds=6)
    assert fed is not None
    return fed


def _analysis(name: str, fed: dict[str, Any], tmp: Path, verdict: str = "pass") -> Any:
    """What measure_rounds reads of a RunAnalysis: the scenario, result.json's model, the run's times."""
    scenario = load_scenario(shipped_scenarios_dir() / "compare" / f"flower-{name}.yaml")
    last = max(r["t"] for r in fed["rounds"])
    return SimpleNamespace(scenario=scenario, run_dir=tmp / name, t0=0.0, time_to_result_s=last,
                           model=SimpleNamespace(federated=fed, verdict=verdict, duration_s=last + 2))


def _page(tmp: Path) -> list[compare_rounds.RoundColumn]:
    runs = [("fault-free", _fed(None)), ("client-crash", _fed((12.5, "node1"))),
            ("client-straggler", _fed((12.5, "node2"), slow=4.0, failed=3, acc=0.93)),
            ("server-restart", _fed((12.5, "node0"), slow=7.0, acc=0.94))]
    return compare_rounds.with_short([measure_rounds(_analysis(n, f, tmp)) for n, f in runs])


def _row(rows: list[list[str]], name: str) -> list[str]:
    return next(r[1:] for r in rows if r[0] == name)


def test_each_row_is_a_round_figure_read_against_the_fault_free_column(tmp_path: Path) -> None:
    cols = _page(tmp_path)
    rows = table(cols)
    assert [c.tag for c in cols] == ["fault-free", "client-crash", "client-straggler", "server-restart"]
    assert _row(rows, "rounds completed / planned") == ["6 / 6"] * 4
    assert _row(rows, "client failures (in rounds)") == ["0 (in 0)", "0 (in 0)", "1 (in 1)", "0 (in 0)"]
    assert _row(rows, "fault → next completed round") == ["no fault", "0.50 s", "4.50 s", "7.50 s"]
    assert _row(rows, "accuracy vs fault-free") == ["reference", "+0.000", "-0.020", "-0.010"]
    assert _row(rows, "rounds lost (not completed + run again)") == ["0"] * 4
    assert _row(rows, "time to result (start → last round)") == ["16.0 s", "16.0 s", "20.0 s", "23.0 s"]
    assert not any("step" in r[0] for r in rows)  # rounds, never steps
    third = round_table(cols)[2]
    assert third[3] == "round 3: 1 ok / 1 failed (node1); sampled node1, node3"


def test_conclusions_are_the_figures_in_sentences(tmp_path: Path) -> None:
    said = conclusions(_page(tmp_path))
    assert said[0] == "fault-free (no fault) completed 6 of 6 rounds, a round every 1.00 s (median), in 16.0 s."
    straggler = next(s for s in said if s.startswith("client-straggler (crash of node2 after round 2)"))
    assert "the next round completed 4.50 s after the fault (4.5× the fault-free median round)" in straggler
    assert "its slowest round took 5.00 s (the fault-free run's 1.00 s)" in straggler
    assert "node2 was sampled in 3 later round(s) and failed in 0" in straggler
    assert ("client-straggler ended at eval accuracy 0.930 (-0.020 vs fault-free), eval loss 0.0700 (+0.0200)."
            in said)
    assert said[-2].endswith("against fault-free: client-crash +0.0 s, client-straggler +4.0 s, "
                             "server-restart +7.0 s.")
    assert said[-1] == "No column lost a round: every planned round completed once."


def test_a_server_lost_for_good_loses_the_rounds_it_never_ran(tmp_path: Path) -> None:
    gone = measure_rounds(_analysis("server-restart", _fed((13.5, "node0"), ended_at=3), tmp_path, "fail"))
    assert (gone.rounds_completed, gone.rounds_lost, gone.to_next_round_s) == (3, 3, None)
    said = conclusions([measure_rounds(_analysis("fault-free", _fed(None), tmp_path)), gone])
    gone_said = next(s for s in said if s.startswith("server-restart ("))
    assert "no round completed after the fault" in gone_said and gone_said.endswith("; 3 round(s) lost.")
    assert "Rounds lost in: server-restart (3)" in said[-1]


def test_a_planned_fault_that_never_happened_is_said_and_is_no_reference(tmp_path: Path) -> None:
    ref = measure_rounds(_analysis("fault-free", _fed(None), tmp_path))
    skipped = measure_rounds(_analysis("client-crash", _fed(None), tmp_path, "error"))
    cols = compare_rounds.with_short([ref, skipped])
    assert compare_rounds.reference(cols) is cols[0]
    assert _row(table(cols), "fault") == ["none (reference)", "1 planned, not injected"]
    said = conclusions(cols)
    assert "client-crash: its planned fault was never injected (verdict error)" in said[1]
    assert "Not a pass: client-crash (error)" in said[-2]


def test_without_a_fault_free_column_the_quality_is_not_checked(tmp_path: Path) -> None:
    cols = compare_rounds.with_short([measure_rounds(_analysis("client-crash", _fed((12.5, "node1")), tmp_path))])
    assert _row(table(cols), "accuracy vs fault-free") == ["not checked (no fault-free column)"]
    assert conclusions(cols)[0].startswith("No fault-free column")


def test_the_page_renders_in_html_and_markdown_with_the_shared_css(tmp_path: Path) -> None:
    cols = _page(tmp_path)
    html, md = render_html(cols, tmp_path), render_markdown(cols, tmp_path)
    assert "<table id=figures>" in html and "<table id=rounds>" in html and compare_rounds.CSS in html
    assert "## Rounds" in md and "| fault → next completed round | no fault | 0.50 s |" in md


def _no_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run's own report is chaos.reports' (tested there); these fakes have no history to draw it from, and
    are analyses already."""
    monkeypatch.setattr(compare, "analyze_run", lambda run: run)
    monkeypatch.setattr(compare_rounds, "write_report", lambda *a, **k: None)
    monkeypatch.setattr(compare, "write_report", lambda *a, **k: None)


def test_flower_runs_alone_get_the_round_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_reports(monkeypatch)
    runs = [_analysis("fault-free", _fed(None), tmp_path), _analysis("client-crash", _fed((12.5, "node1")), tmp_path)]
    monkeypatch.setattr(compare_rounds, "is_federated", lambda a: True)
    monkeypatch.setattr(compare, "is_federated", lambda a: True)
    paths = compare.write_comparison(runs, tmp_path / "out")
    page = json.loads(paths["json"].read_text())
    assert page["unit"] == "round" and [c["short"] for c in page["columns"]] == ["fault-free", "client-crash"]
    assert not (tmp_path / "out" / "flower").exists()


def test_mixed_with_steps_the_flower_runs_go_to_their_own_linked_page(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _no_reports(monkeypatch)
    flower = [_analysis("fault-free", _fed(None), tmp_path), _analysis("client-crash", _fed((12.5, "node1")), tmp_path)]
    steps = SimpleNamespace(kind="steps", run_dir=tmp_path / "central")
    step_column = compare.Column(label="central (centralized, 1×1)", scenario="central", run_dir=str(steps.run_dir),
                                 verdict="pass", mode="centralized", nodes=1, world_size=1, steps_per_s=100.0,
                                 samples_per_s=None, comm_share=None, time_to_first_step_s=1.0, recovery_s=2.0,
                                 lost_work_s=None, lost_steps=3, goodput=None, node_seconds_per_step=None,
                                 duration_s=10.0)
    seen: list[Any] = []
    monkeypatch.setattr(compare, "is_federated", lambda a: getattr(a, "kind", "") != "steps")
    monkeypatch.setattr(compare, "measure", lambda a: seen.append(a) or step_column)
    monkeypatch.setattr(compare, "figures", lambda columns, analyses: {})
    paths = compare.write_comparison([steps, *flower], tmp_path / "out")
    assert seen == [steps]  # a Flower run is never measured as a step column
    assert paths["rounds_html"] == tmp_path / "out" / "flower" / "compare.html" and paths["rounds_html"].exists()
    main = json.loads(paths["json"].read_text())
    assert [c["scenario"] for c in main["columns"]] == ["central"] and main["rounds_page"] == "flower/compare.html"
    assert main["recovery_models"][-1].endswith("they are on their own page, flower/compare.html.")
    assert not any(s.startswith("Not in this comparison: Flower") for s in main["recovery_models"])
    assert "<a href='flower/compare.html'>flower/compare.html</a>" in paths["html"].read_text()


def test_a_sweep_refuses_flower_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.cli import main

    central = str(shipped_scenarios_dir() / "compare" / "centralized.yaml")
    flower = str(shipped_scenarios_dir() / "compare" / "flower-client-crash.yaml")
    assert main(["compare", central, flower, "--sweep", "delay=0ms,5ms"]) == 2
    assert "count federated rounds, not steps: compare them without --sweep" in capsys.readouterr().err
