"""``chaos compare`` of federated runs (``launcher: flower``): a page of its own, with rounds instead of steps.

A federated job's progress is a round (the server's FedAvg aggregation of the sampled clients' results), not an
optimizer step, and its recovery from a lost client is to drop it from the next sample: the step-based table of
:mod:`chaos.compare` (steps per second, steps trained again, recovery to the first new step) has nothing to say
about it. Every figure here comes from a run's ``federated`` section (:mod:`chaos.analysis.federated`, computed
from the server's ``fl_round`` events); the final evaluation of each faulted run is read against the comparison's
fault-free column (the same workload with no fault), and the conclusions are sentences computed from the figures.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, replace
from html import escape
from itertools import pairwise
from pathlib import Path
from typing import Any

from chaos.analysis.run import RunAnalysis
from chaos.compare_names import run_report_name, short_names, where
from chaos.paths import write_output
from chaos.reports import write_report
from chaos.reports.html import CSS

# where a mixed comparison writes its federated runs' page, under its own output directory
ROUNDS_SUBDIR = "flower"


def is_federated(analysis: RunAnalysis) -> bool:
    """Whether a run counts rounds (its server recorded them, or its launcher is one that does)."""
    return analysis.model.federated is not None or analysis.scenario.cluster.mode == "federated"


@dataclass
class RoundColumn:
    """One federated run's round figures (None: not measured, and the page says so)."""

    label: str
    scenario: str
    run_dir: str
    verdict: str
    faults: list[str]  # "crash of node1 after round 2", as injected
    planned_faults: int  # faults the scenario planned (one that was never injected leaves faults short)
    rounds_planned: int | None
    rounds_completed: int
    rounds_failed: int
    round_executions: int
    rounds_redone: int
    rounds_lost: int | None  # planned rounds never completed, plus rounds run again
    client_failures: int
    rounds_with_failures: int
    to_next_round_s: float | None  # the slowest fault → next completed round
    median_round_s: float | None  # between consecutive completed rounds
    slowest_round_s: float | None
    final_loss: float | None
    final_accuracy: float | None
    time_to_result_s: float | None  # run start → the last round first completed
    duration_s: float | None
    node_restart: bool
    # per executed round: (round, results, failures, sampled clients, failed clients, aggregated)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    # per fault on a client: (target, rounds after the fault that sampled it, rounds it failed in)
    client_hits: list[tuple[str, int, int]] = field(default_factory=list)
    short: str = ""

    @property
    def tag(self) -> str:
        return self.short or self.label

    @property
    def fault_free(self) -> bool:
        """Planned without a fault: the reference (a planned fault that never happened does not make one)."""
        return not self.planned_faults


def _round_gaps(rows: list[dict[str, Any]]) -> list[float]:
    done = [r["t"] for r in rows if r["aggregated"]]
    return [b - a for a, b in pairwise(done)]


def measure_rounds(analysis: RunAnalysis) -> RoundColumn:
    """A federated run's column, from result.json's ``federated`` section (chaos.analysis.federated)."""
    scenario, result = analysis.scenario, analysis.model
    fed = dict(result.federated or {})
    rows = list(fed.get("rounds") or [])
    c = scenario.cluster
    restart = c.node_restart.policy != "never"
    planned = fed.get("rounds_planned")
    completed = int(fed.get("rounds_completed") or 0)
    redone = int(fed.get("rounds_redone") or 0)
    faults = [f"{f.get('kind')} of {f.get('target')} after round {f.get('round_before')}" for f in fed.get("faults")
              or []]
    nexts = [f.get("to_next_round_s") for f in fed.get("faults") or []]
    hits = []
    for f in fed.get("faults") or []:
        if f.get("server"):
            continue
        after = [r for r in rows if r["round"] > (f.get("round_before") or 0)]
        target = str(f.get("target"))
        hits.append((target, sum(target in (r.get("sampled") or []) for r in after),
                     sum(target in (r.get("failed_clients") or []) for r in after)))
    gaps = _round_gaps(rows)
    final = (fed.get("quality") or {}).get("final") or {}
    t_last = max((r["t"] for r in rows if r["aggregated"]), default=None)
    ttr = analysis.time_to_result_s
    if ttr is None and t_last is not None:
        ttr = t_last - analysis.t0
    return RoundColumn(
        label=f"{scenario.name} (flower, server + {c.nodes - 1} clients"
              + (f", {planned} rounds" if planned else "") + (", node_restart" if restart else "") + ")",
        scenario=scenario.name, run_dir=str(analysis.run_dir), verdict=result.verdict, faults=faults,
        planned_faults=len(scenario.faults),
        rounds_planned=planned, rounds_completed=completed, rounds_failed=int(fed.get("rounds_failed") or 0),
        round_executions=int(fed.get("round_executions") or 0), rounds_redone=redone,
        rounds_lost=(max(planned - completed, 0) + redone) if planned else None,
        client_failures=int(fed.get("client_failures") or 0),
        rounds_with_failures=int(fed.get("rounds_with_failures") or 0),
        to_next_round_s=None if not nexts or any(v is None for v in nexts) else max(nexts),
        median_round_s=statistics.median(gaps) if gaps else None, slowest_round_s=max(gaps) if gaps else None,
        final_loss=_num(final.get("eval_loss")), final_accuracy=_num(final.get("eval_accuracy")),
        time_to_result_s=ttr, duration_s=result.duration_s, node_restart=restart,
        rounds=[{k: r.get(k) for k in ("round", "results", "failures", "sampled", "failed_clients", "aggregated")}
                for r in rows], client_hits=hits)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def with_short(columns: list[RoundColumn]) -> list[RoundColumn]:
    """Short names as the step page makes them (a shared scenario prefix dropped, letters when they clash)."""
    return [c if c.short else replace(c, short=n) for c, n in zip(columns, short_names(columns), strict=True)]


def reference(columns: list[RoundColumn]) -> RoundColumn | None:
    """The fault-free column every faulted run is read against (the first one without a fault), if any."""
    return next((c for c in columns if c.fault_free), None)


def _f(v: float | None, fmt: str = ".1f", unit: str = "") -> str:
    return "not measured" if v is None else f"{v:{fmt}}{unit}"


def _delta(v: float | None, ref: RoundColumn | None, attr: str, fmt: str) -> str:
    if ref is None:
        return "not checked (no fault-free column)"
    base = getattr(ref, attr)
    if base is None:
        return "not checked (the fault-free column did not measure it)"
    return "not measured" if v is None else f"{v - base:+{fmt}}"


def table(columns: list[RoundColumn]) -> list[list[str]]:
    """The summary rows: a label, then one cell per column."""
    ref = reference(columns)
    rows: list[tuple[str, list[str]]] = [
        ("fault", [_faults_text(c) for c in columns]),
        ("rounds completed / planned", [f"{c.rounds_completed} / {c.rounds_planned or '?'}" for c in columns]),
        ("rounds failed (nothing aggregated)", [str(c.rounds_failed) for c in columns]),
        ("rounds executed (incl. run again)", [f"{c.round_executions} ({c.rounds_redone} again)" for c in columns]),
        ("rounds lost (not completed + run again)", [_f(c.rounds_lost, "d") if c.rounds_lost is not None
                                                     else "not measured (rounds planned unknown)" for c in columns]),
        ("client failures (in rounds)", [f"{c.client_failures} (in {c.rounds_with_failures})" for c in columns]),
        ("fault → next completed round", [_f(c.to_next_round_s, ".2f", " s") if c.faults else "no fault"
                                          for c in columns]),
        ("round time, median / slowest", [f"{_f(c.median_round_s, '.2f', ' s')} / {_f(c.slowest_round_s, '.2f', ' s')}"
                                          for c in columns]),
        ("final eval loss", [_f(c.final_loss, ".4f") for c in columns]),
        ("final eval accuracy", [_f(c.final_accuracy, ".3f") for c in columns]),
        ("loss vs fault-free", ["reference" if c is ref else _delta(c.final_loss, ref, "final_loss", ".4f")
                                for c in columns]),
        ("accuracy vs fault-free", ["reference" if c is ref else _delta(c.final_accuracy, ref, "final_accuracy",
                                                                         ".3f") for c in columns]),
        ("time to result (start → last round)", [_f(c.time_to_result_s, ".1f", " s") for c in columns]),
        ("run duration", [_f(c.duration_s, ".1f", " s") for c in columns]),
        ("verdict", [c.verdict for c in columns]),
    ]
    return [[name, *cells] for name, cells in rows]


def _faults_text(c: RoundColumn) -> str:
    if c.fault_free:
        return "none (reference)"
    missing = c.planned_faults - len(c.faults)
    return ", ".join(c.faults + ([f"{missing} planned, not injected"] if missing > 0 else []))


def _round_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    text = f"{r['results']} ok / {r['failures']} failed"
    if r.get("failed_clients"):
        text += f" ({', '.join(r['failed_clients'])})"
    if not r.get("aggregated"):
        text += ", nothing aggregated"
    return text + f"; sampled {', '.join(r.get('sampled') or []) or '-'}"


def round_table(columns: list[RoundColumn]) -> list[list[str]]:
    """Per round executed (a round run again gets a row of its own): results, failures, sampled clients."""
    depth = max((len(c.rounds) for c in columns), default=0)
    rows = []
    for i in range(depth):
        cells = []
        for c in columns:
            r = c.rounds[i] if i < len(c.rounds) else None
            cells.append(("" if r is None else f"round {r['round']}: ") + _round_cell(r))
        rows.append([f"#{i + 1}", *cells])
    return rows


def conclusions(columns: list[RoundColumn]) -> list[str]:
    """Sentences computed from the figures of the table, nothing else."""
    columns = with_short(columns)
    ref = reference(columns)
    out = []
    if ref is None:
        out.append("No fault-free column: the final evaluations are not checked against a run without faults "
                   "(add one with the same workload arguments).")
    elif ref.median_round_s is not None:
        out.append(f"{ref.tag} (no fault) completed {ref.rounds_completed} of {ref.rounds_planned or '?'} rounds, "
                   f"a round every {ref.median_round_s:.2f} s (median), in {_f(ref.time_to_result_s, '.1f', ' s')}.")
    for c in columns:
        if c.fault_free:
            continue
        if not c.faults:
            out.append(f"{c.tag}: its planned fault was never injected (verdict {c.verdict}), so its figures are "
                       "not those of a run with a fault.")
            continue
        text = f"{c.tag} ({'; '.join(c.faults)}): {c.rounds_completed} of {c.rounds_planned or '?'} rounds completed"
        text += (f", {c.rounds_failed} failed, {c.client_failures} client failure(s) in "
                 f"{c.rounds_with_failures} round(s)")
        if c.to_next_round_s is not None:
            text += f"; the next round completed {c.to_next_round_s:.2f} s after the fault"
            if ref is not None and ref.median_round_s:
                text += f" ({c.to_next_round_s / ref.median_round_s:.1f}× the fault-free median round)"
        else:
            text += "; no round completed after the fault"
        if c.slowest_round_s is not None:
            text += f"; its slowest round took {c.slowest_round_s:.2f} s" + (
                f" (the fault-free run's {ref.slowest_round_s:.2f} s)" if ref is not None and ref.slowest_round_s
                is not None else "")
        for target, sampled, failed in c.client_hits:
            text += f"; {target} was sampled in {sampled} later round(s) and failed in {failed}"
        if c.rounds_lost is not None:
            text += f"; {c.rounds_lost} round(s) lost" + (f" ({c.rounds_redone} run again)" if c.rounds_redone else "")
        out.append(text + ".")
    if ref is not None:
        for c in columns:
            if c is ref or c.final_accuracy is None or ref.final_accuracy is None:
                continue
            d_acc = c.final_accuracy - ref.final_accuracy
            d_loss = (c.final_loss - ref.final_loss if c.final_loss is not None and ref.final_loss is not None
                      else None)
            out.append(f"{c.tag} ended at eval accuracy {c.final_accuracy:.3f} ({d_acc:+.3f} vs {ref.tag})"
                       + (f", eval loss {c.final_loss:.4f} ({d_loss:+.4f})" if d_loss is not None else "") + ".")
    timed = sorted((c for c in columns if c.time_to_result_s is not None), key=lambda c: c.time_to_result_s or 0)
    if len(timed) >= 2:
        text = "Ranked by time to result (start → last round): " + ", ".join(
            f"{c.tag} {c.time_to_result_s:.1f} s" for c in timed)
        if ref is not None and ref.time_to_result_s is not None:
            text += "; against " + ref.tag + ": " + ", ".join(
                f"{c.tag} {(c.time_to_result_s or 0) - ref.time_to_result_s:+.1f} s" for c in timed if c is not ref)
        out.append(text + ".")
    failing = [c for c in columns if c.verdict != "pass"]
    if failing:
        out.append("Not a pass: " + ", ".join(f"{c.tag} ({c.verdict})" for c in failing)
                   + "; its report says why, and its figures are read with that in mind.")
    lost = [c for c in columns if c.rounds_lost]
    if lost:
        out.append("Rounds lost in: " + ", ".join(f"{c.tag} ({c.rounds_lost})" for c in lost)
                   + "; every other column completed each planned round once.")
    elif any(c.rounds_lost is not None for c in columns):
        out.append("No column lost a round: every planned round completed once.")
    return out


TITLE = "torch-chaos comparison: federated runs (rounds, not steps)"
INTRO = ("Flower runs side by side, each figure measured from the rounds its server recorded "
         "(chaos.analysis.federated); the final evaluation is read against the fault-free column.")
LEGEND_HEADER = ("column", "run", "verdict", "report", "run directory")


def _legend(columns: list[RoundColumn], base: Path | None) -> list[list[str]]:
    return [[c.tag, c.label, c.verdict, run_report_name(c.run_dir), where(c.run_dir, base)] for c in columns]


def render_markdown(columns: list[RoundColumn], base: Path | None = None) -> str:
    columns = with_short(columns)
    head = ["", *[c.tag for c in columns]]
    lines = [f"# {TITLE}", "", INTRO, "", "| " + " | ".join(LEGEND_HEADER) + " |", "|" + "---|" * len(LEGEND_HEADER)]
    lines += [f"| {t} | {label} | {v} | [{rep}]({rep}) | `{run}` |" for t, label, v, rep, run in _legend(columns, base)]
    lines += ["", "## Conclusions", "", *[f"- {s}" for s in conclusions(columns)], ""]
    for name, rows in (("Figures", table(columns)), ("Rounds", round_table(columns))):
        lines += [f"## {name}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows] + [""]
    return "\n".join(lines)


def _html_table(ident: str, head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(x)}</td>" for x in row) + "</tr>" for row in rows)
    return f"<table id={ident}><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def render_html(columns: list[RoundColumn], base: Path | None = None) -> str:
    columns = with_short(columns)
    head = ["", *[c.tag for c in columns]]
    legend = "".join(f"<tr><td><b>{escape(t)}</b></td><td>{escape(label)}</td><td>{escape(v)}</td>"
                     f"<td><a href='{escape(rep)}'>{escape(rep)}</a></td><td><code>{escape(run)}</code></td></tr>"
                     for t, label, v, rep, run in _legend(columns, base))
    items = "".join(f"<li>{escape(s)}</li>" for s in conclusions(columns))
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>torch-chaos federated comparison</title>"
            f"<style>{CSS}</style></head><body><h1>{escape(TITLE)}</h1><p>{escape(INTRO)}</p>"
            f"<table id=legend><thead><tr>{''.join(f'<th>{escape(h)}</th>' for h in LEGEND_HEADER)}</tr></thead>"
            f"<tbody>{legend}</tbody></table><h2>Conclusions</h2><ul>{items}</ul>"
            f"<h2>Figures</h2>{_html_table('figures', head, table(columns))}"
            f"<h2>Rounds</h2>{_html_table('rounds', head, round_table(columns))}</body></html>\n")


def write_round_comparison(analyses: list[RunAnalysis], output: Path) -> dict[str, Path]:
    """The federated page (HTML, Markdown, JSON) plus each run's own report beside it."""
    columns = with_short([measure_rounds(a) for a in analyses])
    output.mkdir(parents=True, exist_ok=True)
    for analysis in analyses:
        write_report(analysis, "html", output / run_report_name(analysis.run_dir), out_named_by_user=False)
    paths = {"md": output / "compare.md", "html": output / "compare.html", "json": output / "compare.json"}
    write_output(paths["md"], render_markdown(columns, output))
    write_output(paths["html"], render_html(columns, output))
    write_output(paths["json"], json.dumps({
        "unit": "round", "columns": [asdict(c) | {"run_dir": where(c.run_dir, output)} for c in columns],
        "legend": {c.tag: c.label for c in columns}, "conclusions": conclusions(columns)}, indent=2) + "\n")
    return paths
