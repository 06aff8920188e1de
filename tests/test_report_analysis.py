"""`chaos report` analyses once, from a streamed history; the compact path computes what the plain one does."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import chaos.analysis.run as run_module
from chaos.analysis.load import History, load_events
from chaos.analysis.result_json import RESULT_SCHEMA_VERSION, build_result, evaluate_expectations
from chaos.analysis.run import analyze_run
from chaos.analysis.series import MAX_POINTS, downsample
from chaos.events import Ev
from chaos.history import iter_history, read_history
from chaos.loading import load_scenario, parse_scenario
from tests.histories import H

_spec = importlib.util.spec_from_file_location("report_scale", Path(__file__).parents[1] / "benchmarks" /
                                               "report_scale.py")
assert _spec and _spec.loader
report_scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report_scale)


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic soak (benchmarks/report_scale.py): 3 ranks, checkpoints, crashes and resumes.

    9,000 events (3,000 steps a rank): more steps than a plot series keeps (``MAX_POINTS``, checked in
    ``test_plot_series_are_bounded_and_keep_a_restart_drop``), so downsampling is exercised; 15,000 took the four
    tests ~11 s here and proved nothing more (the scale itself is benchmarks/report_scale.py's job)."""
    run_dir = tmp_path_factory.mktemp("soak") / "run"
    report_scale.synthesise(run_dir, 9_000, every=50, n_faults=3)
    return run_dir


def test_torn_and_invalid_lines_are_skipped_whatever_the_parser(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    good = [{"t": float(i), "event": Ev.STEP_COMPLETED, "step": i} for i in range(3)]
    path.write_text(json.dumps(good[0]) + "\n" + '{"t": 1.5, "ev' + json.dumps(good[1]) + "\n\n"
                    + json.dumps(good[2]) + "\n" + '{"t": 9, "event": "torn')
    # the torn fragment swallowed good[1] (a writer killed mid-line, then others appended): both are unreadable
    assert [e["step"] for e in iter_history(path)] == [0, 2]


def test_compact_indexed_history_gives_the_same_result_as_plain_events(soak: Path) -> None:
    scenario = load_scenario(soak / "scenario.yaml")
    compact = load_events(soak / "events.jsonl")
    plain = read_history(soak / "events.jsonl")
    assert isinstance(compact, History) and not isinstance(plain, History)
    assert compact.n_events == len(plain)
    assert build_result(soak, scenario, compact, None) == build_result(soak, scenario, plain, None)


def test_the_soak_is_analysed_as_built(soak: Path) -> None:
    result = analyze_run(soak).result
    assert result["verdict"] == "pass", result["why"]
    assert [f["restarted"] for f in result["faults"]] == [True] * 3
    assert all(0 <= f["lost_steps"] < 50 for f in result["faults"])
    assert result["checkpoint"]["exactly_once"]["ok"] is True
    assert result["checkpoint"]["resumed_from_newest_valid"]["ok"] is True


def test_chaos_report_parses_and_analyses_the_history_once(soak: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.cli import main

    calls: list[Path] = []
    real = run_module.load_events

    def counting(path: Path) -> History:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(run_module, "load_events", counting)
    (soak / "result.json").unlink(missing_ok=True)
    assert main(["report", str(soak), "--format", "json", "-o", str(soak / "r.json")]) == 0
    assert len(calls) == 1
    written = json.loads((soak / "result.json").read_text())
    assert json.loads((soak / "r.json").read_text())["result"] == written
    assert written["schema_version"] == RESULT_SCHEMA_VERSION


def test_plot_series_are_bounded_and_keep_a_restart_drop(soak: Path) -> None:
    analysis = analyze_run(soak)
    steps = sum(e.get("event") == Ev.STEP_COMPLETED for e in read_history(soak / "events.jsonl"))
    assert steps > 3 * MAX_POINTS  # every rank's series had to be cut down
    assert analysis.progress and all(len(p) <= MAX_POINTS for p in analysis.progress.values())
    points = [(float(i), float(i % 1000)) for i in range(10_000)]  # steps falling back every 1000 points
    small = downsample(points, 100)
    assert len(small) <= 100
    assert min(y for _, y in small) == 0.0 and max(y for _, y in small) == 999.0
    assert small == sorted(small)


def test_disruptive_comes_from_the_event_not_the_kind_name() -> None:
    h = H().start().steps(1, 30).fault(0, kind="whatever", disruptive=False).steps(31, 33).fault(1, kind="other")
    h.start(at=h.t + 2, load=20).steps(21, 40)
    events = h.end()
    del events[[e.get("fault_id") for e in events].index(1)]["disruptive"]  # an old history: no field
    scenario = parse_scenario("name: x\nworkload: {name: ddp-mlp}\nexpect: {recovery_s: {max: 60}}\n")
    result = build_result(Path("run"), scenario, events, None)
    assert [f["disruptive"] for f in result["faults"]] == [False, True]
    [recovery] = [x for x in evaluate_expectations(scenario, {"completed": True, "goodput": 1, "restarts": 1},
                                                   result["faults"]) if x["name"] == "recovery_s"]
    assert recovery["value"] == result["faults"][1]["recovery_s"] is not None


def test_breakdown_phases_add_up_to_the_recovery_and_skip_non_disruptive_faults() -> None:
    from chaos.analysis.breakdown import recovery_breakdowns
    from chaos.analysis.metrics import fault_metrics

    h = H(dt=0.1).start().steps(1, 30).fault(0, kind="damage", disruptive=False).steps(31, 33).fault(1)
    h.start(at=h.t + 3, load=30).steps(31, 40)
    events = h.end()
    faults = [m.to_dict() for m in fault_metrics(events)]
    [b] = recovery_breakdowns(events, faults)
    assert b["fault"] == 1
    assert [name for name, _ in b["phases"]] == ["detection + rendezvous + worker start",
                                                 "worker init (imports, process group) + checkpoint load", "first step"]
    assert sum(v for _, v in b["phases"]) == pytest.approx(faults[1]["recovery_s"])


def test_throughput_figures_come_from_the_fault_free_steps() -> None:
    from chaos.analysis.throughput import throughput

    h = H(dt=0.1).start(ranks=2).steps(1, 30).fault(0)
    h.start(ranks=2, at=h.t + 3, load=30).steps(31, 40)
    events = h.end()
    result = build_result(Path("run"), parse_scenario("name: x\nworkload: {name: ddp-mlp}\n"), events, None)
    figures = throughput(events, result, nodes=2)
    assert figures["steps_per_s"] == pytest.approx(10.0)
    assert figures["recovery_s"] == result["faults"][0]["recovery_s"] > 3
    assert figures["node_seconds_per_step"] == pytest.approx(2 * result["duration_s"] / 40)


def test_the_documented_result_schema_version_is_the_written_one() -> None:
    """README's contract line and docs/result-json.md name the version the code writes, and the version history
    has its row (they had drifted to 8 and 10 while the code wrote 11)."""
    root = Path(__file__).parents[1]
    readme, reference = (root / "README.md").read_text(), (root / "docs" / "result-json.md").read_text()
    assert f"The public contract CI users parse (`schema_version` {RESULT_SCHEMA_VERSION})" in readme
    assert f"`schema_version`: **{RESULT_SCHEMA_VERSION}**." in reference.replace("\n", " ")
    assert f"| `schema_version` | int | {RESULT_SCHEMA_VERSION} |" in reference
    assert f"\n| {RESULT_SCHEMA_VERSION} | " in reference
