"""``chaos compare``: the distributed-vs-centralized table, with measured figures instead of adjectives.

Each column is one run of the same workload under the same fault plan in another cluster shape (centralized,
elastic with tuned settings, elastic with torchrun's defaults ...). Every figure is computed by ``chaos.analysis``
from that run's history (this module only lays them out); the conclusions under the table are sentences
computed from those figures, nothing else.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from html import escape
from pathlib import Path
from typing import Any

from chaos.analysis.run import RunAnalysis, analyze_run


@dataclass
class Column:
    label: str
    scenario: str
    run_dir: str
    verdict: str
    mode: str
    nodes: int
    world_size: int
    steps_per_s: float | None
    samples_per_s: float | None
    comm_share: float | None
    time_to_first_step_s: float | None
    recovery_s: float | None
    lost_work_s: float | None
    lost_steps: int | None
    goodput: float | None
    node_seconds_per_step: float | None
    duration_s: float | None
    machine: str = ""
    # the first disruptive fault's recovery, split (chaos.analysis.breakdown): [(phase, seconds)], largest part
    recovery_phases: list[tuple[str, float | None]] | None = None
    recovery_largest: str | None = None


def measure(run: Path | RunAnalysis) -> Column:
    """One column: the run's figures as ``chaos.analysis`` computed them (see ``chaos.analysis.throughput``)."""
    analysis = run if isinstance(run, RunAnalysis) else analyze_run(run)
    scenario, result, figures = analysis.scenario, analysis.result, analysis.throughput
    c = scenario.cluster
    return Column(
        label=f"{scenario.name} ({c.mode}, {c.nodes}×{c.procs_per_node}"
              + (f", {c.preset}" if c.mode == "elastic" else "") + ")",
        scenario=scenario.name, run_dir=str(analysis.run_dir), verdict=result["verdict"], mode=c.mode,
        nodes=c.nodes, world_size=c.nodes * c.procs_per_node,
        steps_per_s=figures["steps_per_s"], samples_per_s=figures["samples_per_s"],
        comm_share=figures["comm_share"], time_to_first_step_s=figures["time_to_first_step_s"],
        recovery_s=figures["recovery_s"], lost_work_s=figures["lost_work_s"], lost_steps=figures["lost_steps"],
        goodput=result["goodput"], node_seconds_per_step=figures["node_seconds_per_step"],
        duration_s=result["duration_s"], machine=_machine(result.get("environment", {})),
        **_first_breakdown(analysis.breakdowns),
    )


def _first_breakdown(breakdowns: list[dict[str, Any]]) -> dict[str, Any]:
    """The first disruptive fault's phases and its largest part, as the column shows them."""
    for b in breakdowns:
        if b.get("largest"):
            big = b["largest"]
            return {"recovery_phases": [tuple(p) for p in b["phases"]],
                    "recovery_largest": f"{big['phase']}: {big['seconds']:.1f} s"}
    return {}


def _machine(env: dict[str, Any]) -> str:
    return (f"{env.get('cpus', '?')} CPU cores, {env.get('platform', '?')}, torch {env.get('torch', '?')}, "
            f"Python {env.get('python', '?')}")


ROWS = [("throughput (steps/s, fault-free median)", "steps_per_s", "{:.1f}"),
        ("throughput (samples/s)", "samples_per_s", "{:.0f}"),
        ("communication share of a step (median)", "comm_share", "{:.0%}"),
        ("start → first step", "time_to_first_step_s", "{:.1f} s"),
        ("recovery time (first fault)", "recovery_s", "{:.1f} s"),
        ("recovery, largest part", "recovery_largest", "{}"),
        ("lost work (first fault)", "lost_work_s", "{:.2f} s"),
        ("lost steps (first fault)", "lost_steps", "{}"),
        ("goodput under the fault plan", "goodput", "{:.2f}"),
        ("cost (node-seconds per useful step)", "node_seconds_per_step", "{:.3f}"),
        ("verdict", "verdict", "{}")]


def table(columns: list[Column]) -> list[list[str]]:
    rows = []
    for title, attr, pattern in ROWS:
        row = [title]
        for col in columns:
            value = getattr(col, attr)
            row.append("—" if value is None else pattern.format(value))
        rows.append(row)
    return rows


def conclusions(columns: list[Column]) -> list[str]:
    """Sentences derived from the measured figures only."""
    out: list[str] = []
    fast = [c for c in columns if c.steps_per_s]
    if len(fast) >= 2:
        best = max(fast, key=lambda c: c.steps_per_s or 0)
        worst = min(fast, key=lambda c: c.steps_per_s or 0)
        out.append(f"{best.label} is the fastest: {best.steps_per_s:.1f} steps/s, "
                   f"{(best.steps_per_s or 0) / (worst.steps_per_s or 1):.1f}× {worst.label}.")
        central = [c for c in fast if c.mode == "centralized"]
        dist = [c for c in fast if c.mode == "elastic" and c.comm_share is not None]
        if central and dist:
            c0, d0 = central[0], max(dist, key=lambda c: c.steps_per_s or 0)
            if (c0.steps_per_s or 0) > (d0.steps_per_s or 0):
                out.append(f"For this model size one node is faster ({c0.steps_per_s:.1f} against "
                           f"{d0.steps_per_s:.1f} steps/s): communication alone is {d0.comm_share:.0%} of a "
                           f"distributed step on {d0.world_size} workers.")
            else:
                out.append(f"Distributing pays off: {d0.world_size} workers reach {d0.steps_per_s:.1f} steps/s "
                           f"against {c0.steps_per_s:.1f}, with communication at {d0.comm_share:.0%} of a step.")
    rec = [c for c in columns if c.recovery_s is not None]
    if len(rec) >= 2:
        quick = min(rec, key=lambda c: c.recovery_s or 0)
        slow = max(rec, key=lambda c: c.recovery_s or 0)
        ratio = (slow.recovery_s or 0) / (quick.recovery_s or 1)
        out.append(f"Recovery from the fault took {quick.recovery_s:.1f} s on {quick.label} and "
                   f"{slow.recovery_s:.1f} s on {slow.label} ({ratio:.1f}×).")
        if (phase := _widest_gap(quick, slow)) is not None:
            name, q, w = phase
            out.append(f"The recovery phase that differs most is {name}: {q:.1f} s on {quick.label}, {w:.1f} s on "
                       f"{slow.label} ({w - q:.1f} s of the {(slow.recovery_s or 0) - (quick.recovery_s or 0):.1f} s "
                       f"difference).")
    gp = [c for c in columns if c.goodput is not None]
    if len(gp) >= 2:
        best = max(gp, key=lambda c: c.goodput or 0)
        out.append(f"Goodput under this fault plan is highest on {best.label} ({best.goodput:.2f}).")
    cost = [c for c in columns if c.node_seconds_per_step is not None]
    if len(cost) >= 2:
        cheap = min(cost, key=lambda c: c.node_seconds_per_step or 0)
        dear = max(cost, key=lambda c: c.node_seconds_per_step or 0)
        out.append(f"Per useful step, {cheap.label} costs {cheap.node_seconds_per_step:.3f} node-seconds, "
                   f"{(dear.node_seconds_per_step or 0) / (cheap.node_seconds_per_step or 1):.1f}× less "
                   f"than {dear.label}.")
    failed = [c for c in columns if c.verdict != "pass"]
    for c in failed:
        out.append(f"{c.label} did not pass ({c.verdict}): its figures describe a failed run.")
    return out


def _widest_gap(quick: Column, slow: Column) -> tuple[str, float, float] | None:
    """The recovery phase (measured in both runs) whose duration differs most between them."""
    a = {n: v for n, v in quick.recovery_phases or [] if v is not None}
    b = {n: v for n, v in slow.recovery_phases or [] if v is not None}
    common = [n for n in a if n in b]
    if not common:
        return None
    name = max(common, key=lambda n: b[n] - a[n])
    return (name, a[name], b[name]) if b[name] > a[name] else None


def render_markdown(columns: list[Column]) -> str:
    header = ["", *[c.label for c in columns]]
    lines = ["# torch-chaos comparison: distributed vs centralized", "",
             "Same workload, same fault plan, different cluster shapes; every figure measured in the runs below.", "",
             f"Measured on: {columns[0].machine}." if columns else "", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in table(columns)]
    lines += ["", "## Conclusions", "", *[f"- {s}" for s in conclusions(columns)], "", "## Runs", ""]
    lines += [f"- [{c.label}]({c.scenario}.html): `{c.run_dir}`" for c in columns]
    return "\n".join(lines) + "\n"


def render_html(columns: list[Column]) -> str:
    head = "".join(f"<th>{escape(c.label)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in table(columns))
    items = "".join(f"<li>{escape(s)}</li>" for s in conclusions(columns))
    runs = "".join(f"<li><a href='{escape(c.scenario)}.html'>{escape(c.label)}</a>: <code>{escape(c.run_dir)}</code>"
                   "</li>" for c in columns)
    from chaos.reports.html import CSS

    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>torch-chaos comparison</title>"
            f"<style>{CSS}</style></head><body><h1>torch-chaos comparison: distributed vs centralized</h1>"
            f"<p>Same workload, same fault plan, different cluster shapes; every figure measured in the runs "
            f"below.</p><p>Measured on: {escape(columns[0].machine if columns else '')}.</p>"
            f"<table><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<h2>Conclusions</h2><ul>{items}</ul><h2>Runs</h2><ul>{runs}</ul></body></html>\n")


def write_comparison(run_dirs: list[Path], output: Path) -> dict[str, Path]:
    """The comparison (HTML, Markdown, JSON) plus each run's own HTML report beside it, linked from the table."""
    from chaos.reports import write_report

    output.mkdir(parents=True, exist_ok=True)
    columns = []
    for d in run_dirs:  # one analysis per run, for its column and its report
        analysis = analyze_run(d)
        columns.append(measure(analysis))
        write_report(analysis, "html", output / f"{analysis.scenario.name}.html")
    paths = {"md": output / "compare.md", "html": output / "compare.html", "json": output / "compare.json"}
    paths["md"].write_text(render_markdown(columns))
    paths["html"].write_text(render_html(columns))
    paths["json"].write_text(json.dumps({"columns": [asdict(c) for c in columns],
                                         "conclusions": conclusions(columns)}, indent=2) + "\n")
    return paths
