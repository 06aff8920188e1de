"""Every figure analysis computes, for checking that a change to how analysis stores a history changes no figure.

``figures(events)`` runs each metric, verdict and series function on one history and returns their outputs as
JSON values (an exception becomes ``{"error": its type}``). ``tests/data/analysis/corpus.json.gz`` holds the
histories the fast tier's analysis tests build by hand plus synthetic soaks (``benchmarks/report_scale.py``), and
the figures the code on main computed for each before analysis moved to a column-per-field step table; the test
(tests/test_analysis_equivalence.py) recomputes them. Re-record (only when a figure's definition changes on
purpose) with ``python -m tests.analysis_corpus`` (``--refigure``: recompute the figures of the stored histories;
``--recorded``: the recorded real runs only).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).parent / "data" / "analysis" / "corpus.json.gz"
Event = dict[str, Any]


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _digest(value: Any) -> Any:
    """A long list as its length and a hash (the corpus stays small; any difference still shows)."""
    if isinstance(value, list) and len(value) > 20:
        return {"n": len(value), "sha256": hashlib.sha256(json.dumps(value).encode()).hexdigest()}
    return value


def _try(compute: Callable[[], Any]) -> Any:
    try:
        return _json(compute())
    except Exception as exc:  # a figure that raises on a history must still raise the same way
        return {"error": type(exc).__name__}


def figures(events: list[Event]) -> dict[str, Any]:
    """Every figure of one history (a plain list, or a ``History`` from ``load_events``)."""
    from chaos.analysis import checkpoints as ck
    from chaos.analysis import metrics as m
    from chaos.analysis.breakdown import recovery_breakdowns
    from chaos.analysis.interval import save_cost_s
    from chaos.analysis.series import lineage_losses, progress_by_node, worker_round_starts

    out: dict[str, Any] = {}
    out["faults"] = faults = _try(lambda: [f.to_dict() for f in m.fault_metrics(events)])
    out["goodput"] = gp = _try(lambda: m.goodput(events))
    out["median"] = _try(lambda: m.median_step_time(events))
    out["intervals"] = _digest(_try(lambda: m.step_intervals(events)))
    out["completion_times"] = _digest(_try(lambda: sorted(m.step_completion_times(events).items())))
    out["restarts"] = _try(lambda: m.worker_restarts(events))
    out["restarts_after"] = _try(lambda: m.restarts_after_completion(events))
    out["golden_summary"] = golden = _try(lambda: ck.golden_summary(events))
    golden_ok = {**golden, "completed": True} if isinstance(golden, dict) and "error" not in golden else None
    out["verdicts"] = _try(lambda: _spelled(ck.checkpoint_verdicts(events, None, 0.01)))
    out["verdicts_self_golden"] = _try(lambda: _spelled(ck.checkpoint_verdicts(events, golden_ok, 0.01)))
    out["lineage"] = _try(lambda: _lineage(events))
    out["losses"] = _try(lambda: lineage_losses(events) if hasattr(ck, "worker_steps")  # else: main's older API
                         else lineage_losses(ck.lineage(events)[0]))
    if isinstance(faults, list):
        out["breakdowns"] = _try(lambda: [_breakdown(b) for b in recovery_breakdowns(events, faults)])
        if isinstance(gp, dict) and "error" not in gp:
            result = {"median_step_s": gp["median_step_s"], "faults": faults, "duration_s": 100.0,
                      "steps_completed": gp["steps_completed"]}
            out["throughput"] = _try(lambda: _throughput(events, result))
    out["save_cost"] = _try(lambda: save_cost_s(events))
    t0 = _first_t(events)
    out["progress"] = _try(lambda: progress_by_node(events, t0, max_points=50))
    out["worker_starts"] = _try(lambda: worker_round_starts(events, t0))
    return out


def _throughput(events: list[Event], result: dict[str, Any]) -> Any:
    """The throughput figures as the corpus recorded them (a dict; main's older code took and gave dicts)."""
    from dataclasses import asdict

    from chaos.analysis.throughput import throughput

    try:
        from chaos.analysis.result_model import ResultModel
    except ImportError:
        return throughput(events, result, 3)
    return asdict(throughput(events, ResultModel.from_dict({"verdict": "pass", **result}), 3))  # type: ignore[call-overload]


def _breakdown(b: Any) -> Any:
    """A breakdown as the corpus recorded it (main's older code returned the dict)."""
    return b.to_dict() if hasattr(b, "to_dict") else b


def _spelled(verdicts: dict[str, Any]) -> dict[str, Any]:
    """Verdicts as result.json spells them (objects with ``to_dict``; main's older code returned the dicts)."""
    return {name: v.to_dict() if hasattr(v, "to_dict") else v for name, v in verdicts.items()}


def _first_t(events: list[Event]) -> float:
    """The history's first ``t`` (a loaded history keeps its steps apart; main's older code kept them in the list)."""
    try:
        from chaos.analysis.load import first_t
    except ImportError:
        return events[0]["t"] if events else 0.0  # type: ignore[no-any-return]
    return first_t(events)


def _lineage(events: list[Event]) -> Any:
    """The lineage with each segment's steps as (step, rank, t), whatever analysis keeps them as."""
    from chaos.analysis import checkpoints as ck

    chain, problem = ck.lineage(events)
    if not hasattr(ck, "worker_steps"):  # main's older code: segments held their step events
        return [{**{k: v for k, v in s.items() if k != "events"},
                 "events": _digest(_json([(e["step"], e.get("rank"), e.get("t")) for e in s["events"]]))}
                for s in chain], problem
    table = ck.worker_steps(events)
    step_no, ranks, times = table.values("step"), table.values("rank"), table.values("t")
    return [{**{k: v for k, v in s.items() if k != "rows"},
             "events": _digest(_json([(step_no[r], ranks[r], times[r]) for r in s["rows"]]))} for s in chain], problem


def loaded(events: list[Event]) -> list[Event]:
    """The history as ``chaos report`` reads it: written to a file and loaded back by ``load_events``."""
    from chaos.analysis.load import load_events

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        path.write_text("".join(json.dumps(e, default=str) + "\n" for e in events))
        return load_events(path)


def recorded_figures(run_dir: Path) -> dict[str, Any]:
    """A recorded real run's figures (its history read as a plain list and as loaded) and its result.json content."""
    from chaos.analysis.load import load_events
    from chaos.analysis.run import analyze
    from chaos.history import read_history

    return {"figures": figures(read_history(run_dir / "events.jsonl")),
            "figures_loaded": figures(load_events(run_dir / "events.jsonl")), "result": _json(analyze(run_dir))}


def recorded_history_figures(run_dir: Path) -> dict[str, Any]:
    """``recorded_figures`` without the result (which also needs the run's scenario.yaml to load)."""
    from chaos.analysis.load import load_events
    from chaos.history import read_history

    return {"figures": figures(read_history(run_dir / "events.jsonl")),
            "figures_loaded": figures(load_events(run_dir / "events.jsonl"))}


def load_corpus() -> list[dict[str, Any]]:
    """[{"name", "events", "figures" (of the plain list), "figures_loaded" (loaded from a file)}]; a recorded run
    (tests/data/histories) has "recorded" (its name) instead of "events", and "result" (result.json's content)."""
    return json.loads(gzip.decompress(CORPUS.read_bytes()))  # type: ignore[no-any-return]


def _captured_histories() -> list[list[Event]]:
    """The event lists the fast tier's analysis tests hand to analysis (captured by wrapping ``of_kind``)."""
    import pytest

    from chaos.analysis import load

    seen: dict[str, list[Event]] = {}
    original = load.of_kind, load.memo, load.of_kinds

    def keep(events: list[Event]) -> None:
        if isinstance(events, list) and not isinstance(events, load.History):
            key = json.dumps(events, default=str, sort_keys=True)
            seen.setdefault(key, _json(events))

    def of_kind(events: list[Event], kind: Any) -> list[Event]:
        keep(events)
        return original[0](events, kind)

    def memo(events: list[Event], key: str, compute: Callable[[], Any]) -> Any:
        keep(events)
        return original[1](events, key, compute)

    def of_kinds(events: list[Event], *kinds: Any) -> list[Event]:
        keep(events)
        return original[2](events, *kinds)

    class Capture:
        def pytest_runtest_setup(self) -> None:
            load.of_kind, load.memo, load.of_kinds = of_kind, memo, of_kinds
            import chaos.analysis.breakdown as b
            import chaos.analysis.checkpoints as c
            import chaos.analysis.interval as i
            import chaos.analysis.metrics as m
            import chaos.analysis.result_json as r
            import chaos.analysis.series as s
            import chaos.analysis.throughput as t
            for mod in (b, c, i, m, r, s, t):
                for name, fn in (("of_kind", of_kind), ("memo", memo), ("of_kinds", of_kinds)):
                    if hasattr(mod, name):
                        setattr(mod, name, fn)

    tests = Path(__file__).parent
    pytest.main(["-q", "-p", "no:cacheprovider", "-n", "0", "-m", "not integration",
                 *(str(tests / f) for f in ("test_metrics.py", "test_checkpoint_verdicts.py",
                                            "test_report_analysis.py"))], plugins=[Capture()])
    return list(seen.values())


def _soaks() -> list[tuple[str, list[Event]]]:
    """Small synthetic soaks (crashes, resumes, checkpoints, sample ids) from the benchmark's generator."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from report_scale import synthesise

    out = []
    for n, seed, every in ((1500, 0, 100), (3000, 1, 50), (1200, 2, 30)):
        with tempfile.TemporaryDirectory() as tmp:
            synthesise(Path(tmp), n, every=every, seed=seed)
            lines = (Path(tmp) / "events.jsonl").read_text().splitlines()
        out.append((f"soak-{n}-{seed}", [json.loads(line) for line in lines]))
    return out


def _recorded() -> list[dict[str, Any]]:
    from tests.data.recorded import expand, recorded_names

    with tempfile.TemporaryDirectory() as tmp:
        return [{"name": f"recorded-{name}", "recorded": name, **recorded_figures(expand(name, Path(tmp)))}
                for name in recorded_names()]


def add_recorded() -> None:
    """Add (or refresh) only the recorded real runs' entries, keeping the rest of the corpus as it is."""
    corpus = [h for h in load_corpus() if "recorded" not in h] + _recorded()
    CORPUS.write_bytes(gzip.compress(json.dumps(corpus).encode(), mtime=0))
    print(f"{len(corpus)} histories in {CORPUS} ({CORPUS.stat().st_size} bytes)")


def refigure() -> None:
    """Recompute every entry's figures with this code, keeping the histories (after a definition changed)."""
    corpus = [h for h in load_corpus() if "recorded" not in h]
    for h in corpus:
        h["figures"], h["figures_loaded"] = figures(h["events"]), figures(loaded(h["events"]))
    corpus += _recorded()
    CORPUS.write_bytes(gzip.compress(json.dumps(corpus).encode(), mtime=0))
    print(f"{len(corpus)} histories in {CORPUS} ({CORPUS.stat().st_size} bytes)")


def record() -> None:
    # A test's own long synthetic soak is left out: the soaks below come from the same generator, smaller.
    hand_built = [h for h in _captured_histories() if len(h) < 10_000]
    histories = [(f"hand-built-{i}", h) for i, h in enumerate(hand_built)] + _soaks()
    corpus = []
    for name, events in histories:
        corpus.append({"name": name, "events": events, "figures": figures(events),
                       "figures_loaded": figures(loaded(events))})
    corpus += _recorded()
    CORPUS.parent.mkdir(parents=True, exist_ok=True)
    CORPUS.write_bytes(gzip.compress(json.dumps(corpus).encode(), mtime=0))
    print(f"recorded {len(corpus)} histories into {CORPUS} ({CORPUS.stat().st_size} bytes)")


if __name__ == "__main__":
    {"--recorded": add_recorded, "--refigure": refigure}.get(" ".join(sys.argv[1:]), record)()
