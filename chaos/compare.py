"""``chaos compare``: the distributed-vs-centralized table, with measured figures instead of adjectives.

Each column is one run of the same workload under the same fault plan in another cluster shape (centralized,
elastic with tuned settings, elastic with torchrun's defaults ...). Every figure comes from that run's history;
the conclusions under the table are sentences computed from those figures, nothing else.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from html import escape
from pathlib import Path
from typing import Any

from chaos.analysis.result import analyze
from chaos.history import Event, read_history
from chaos.loading import load_scenario


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


def _first_fault_t(events: list[Event]) -> float:
    faults = [e["t"] for e in events if e.get("event") == "fault_injected" and e.get("disruptive", True)]
    return min(faults) if faults else float("inf")


def measure(run_dir: Path) -> Column:
    scenario = load_scenario(run_dir / "scenario.yaml")
    result = analyze(run_dir)
    events = read_history(run_dir / "events.jsonl")
    before = _first_fault_t(events)
    steps = [e for e in events if e.get("event") == "step_completed" and e["t"] < before]
    rank0 = [e for e in steps if e.get("rank", 0) == 0]
    samples_per_step: dict[tuple[Any, int], int] = {}
    for e in steps:
        key = (e.get("incarnation"), e["step"])
        samples_per_step[key] = samples_per_step.get(key, 0) + int(e.get("samples") or 0)
    median = result["median_step_s"]
    shares = [e["comm_s"] / e["duration_s"] for e in rank0 if e.get("comm_s") is not None and e.get("duration_s")]
    started = next((e["t"] for e in events if e.get("event") == "run_started"), None)
    first_step = min((e["t"] for e in events if e.get("event") == "step_completed"), default=None)
    faults = [f for f in result["faults"] if f["kind"] != "corrupt_checkpoint"]
    first = faults[0] if faults else {}
    c = scenario.cluster
    duration = result["duration_s"]
    useful = result["steps_completed"]
    return Column(
        label=f"{scenario.name} ({c.mode}, {c.nodes}×{c.procs_per_node}"
              + (f", {c.preset}" if c.mode == "elastic" else "") + ")",
        scenario=scenario.name, run_dir=str(run_dir), verdict=result["verdict"], mode=c.mode, nodes=c.nodes,
        world_size=c.nodes * c.procs_per_node,
        steps_per_s=(1 / median) if median else None,
        samples_per_s=(statistics.median(samples_per_step.values()) / median)
        if median and samples_per_step else None,
        comm_share=statistics.median(shares) if shares else None,
        time_to_first_step_s=(first_step - started) if first_step and started else None,
        recovery_s=first.get("recovery_s"), lost_work_s=first.get("lost_work_s"), lost_steps=first.get("lost_steps"),
        goodput=result["goodput"],
        node_seconds_per_step=(c.nodes * duration / useful) if duration and useful else None,
        duration_s=duration,
        machine=_machine(result.get("environment", {})),
    )


def _machine(env: dict[str, Any]) -> str:
    return (f"{env.get('cpus', '?')} CPU cores, {env.get('platform', '?')}, torch {env.get('torch', '?')}, "
            f"Python {env.get('python', '?')}")


ROWS = [("throughput (steps/s, fault-free median)", "steps_per_s", "{:.1f}"),
        ("throughput (samples/s)", "samples_per_s", "{:.0f}"),
        ("communication share of a step (median)", "comm_share", "{:.0%}"),
        ("start → first step", "time_to_first_step_s", "{:.1f} s"),
        ("recovery time (first fault)", "recovery_s", "{:.1f} s"),
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

    columns = [measure(d) for d in run_dirs]
    output.mkdir(parents=True, exist_ok=True)
    for col in columns:
        write_report(col.run_dir, "html", output / f"{col.scenario}.html")
    paths = {"md": output / "compare.md", "html": output / "compare.html", "json": output / "compare.json"}
    paths["md"].write_text(render_markdown(columns))
    paths["html"].write_text(render_html(columns))
    paths["json"].write_text(json.dumps({"columns": [asdict(c) for c in columns],
                                         "conclusions": conclusions(columns)}, indent=2) + "\n")
    return paths
