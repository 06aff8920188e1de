"""Terminal output: the live view during a run and the summary after it (rich).

Imports nothing of the engine at run time (the engine's result handle renders its table with :func:`summary`):
a snapshot is read through its attributes, and states are shown by their string values.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from chaos.analysis.channel import skew_sentence
from chaos.analysis.federated import text_lines
from chaos.analysis.result_model import ResultModel
from chaos.paths import shown
from chaos.plan import fault_summary
from chaos.reports.bounds import bounds_lines

if TYPE_CHECKING:
    from chaos.engine import Snapshot

VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "hung": "bold red", "restart_loop": "bold red",
                 "error": "bold magenta"}
NODE_STYLE = {"running": "green", "frozen": "cyan", "dead": "red", "replacing": "yellow", "finished": "blue",
              "pending": "dim"}


# What goodput is, under every summary: a ratio of times, so it moves with the machine's load between two identical
# runs (measured 0.37 and 0.50 on a shared 2-core machine); compare runs made side by side (`chaos compare`).
GOODPUT_FOOTNOTE = ("goodput = steps completed × the median step time before the first fault ÷ the time from the first "
                    "step to the last (1.0: no time lost to faults; a timing ratio, so compare runs made side by side; "
                    "docs/metrics.md)")


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}{unit}"
    return f"{value}{unit}"


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.1f} ms"


def _limit(limit: Any) -> str:
    if isinstance(limit, dict):
        return " and ".join(f"{'≤' if k == 'max' else '≥'} {v:g}" for k, v in limit.items())
    return str(limit).lower()


def live_view(s: Snapshot) -> Group:
    reference = {"golden": "   (the fault-free golden run first: its progress)",
                 "control": "   (the control run, a clean resume: its progress)"}.get(s.reference or "")
    if reference is None and s.phase == "golden":
        reference = "   (fault-free golden run first)"
    head = Text.assemble((f"{s.run_id}", "bold"), f"   {s.elapsed_s:5.1f}s   ",
                         (f"step {s.step}" + (f"/{s.target_steps}" if s.target_steps else ""), "bold"),
                         f"   worker restarts {s.restarts}", (reference or "", "dim"),
                         (f"   no step since the {s.no_step_since[0]}: {s.no_step_since[1]:.1f}s"
                          if s.no_step_since else "", "yellow"))
    bar = Table.grid()
    bar.add_row(ProgressBar(total=float(s.target_steps or max(s.step, 1)), completed=float(s.step), width=60))
    nodes = Table.grid(padding=(0, 2))
    nodes.add_row(*[Text(f"{n.name}: {n.status}" + (f" (replaced {n.replacements}x)" if n.replacements else ""),
                         style=NODE_STYLE.get(str(n.status), "")) for n in s.nodes])
    faults = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col in ("fault", "target", "trigger", "status"):
        faults.add_column(col)
    for f in s.faults:
        summary = fault_summary(f.index, f.spec)
        faults.add_row(f.spec.kind, str(f.node or f.spec.target), summary["trigger"], str(f.status))
    log = Text("\n".join(s.log), style="dim")
    return Group(head, bar, nodes, faults, log)


def history_notes(result: ResultModel, console: Console) -> None:
    """Say what the figures could not rest on: an incomplete history, lines that could not be read."""
    health = result.history or {}
    if health.get("complete") is False:
        console.print(Text("incomplete history: no run_ended event (the engine was killed or is still running); "
                           "the figures cover what was recorded", style="yellow"))
    if health.get("unreadable_count"):
        shown = health.get("unreadable_lines", [])
        more = health["unreadable_count"] - len(shown)
        where = ", ".join(map(str, shown)) + (f" and {more} more" if more > 0 else "")
        console.print(Text(f"{health['unreadable_count']} line(s) of events.jsonl could not be read and were "
                           f"skipped: line {where}", style="yellow"))


def summary(result: ResultModel | Mapping[str, Any], console: Console, report: Path | None = None) -> None:
    """The run's summary (``result``: the result, or result.json's content). ``report``: its HTML report (default:
    the run directory's report.html when ``result`` is a run's handle, chaos.run_result.RunResult, and the engine
    wrote one); its path closes the summary."""
    if report is None and getattr(result, "run_dir", None) is not None:
        report = Path(result.run_dir) / "report.html"  # type: ignore[union-attr]
    result = result if isinstance(result, ResultModel) else ResultModel.from_dict(result)
    verdict = result.verdict
    console.print(Panel(Text(f"{verdict.upper()}  {result.why}", style=VERDICT_STYLE.get(verdict, "")),
                        title=Text(f"{result.scenario} · {result.run_id}"), expand=False))
    for line in bounds_lines(result):  # what the verdict held, and what no bound gated
        console.print(Text(line, style="yellow" if "no bound set" in line else "dim"), highlight=False)
    history_notes(result, console)
    t = Table(title="faults", show_lines=False)
    for col in ("#", "kind", "target", "step", "restart", "recovery", "catch-up", "lost steps", "lost work",
                "slowdown"):
        t.add_column(col)
    for f in result.faults:
        t.add_row(str(f.id), str(f.kind), str(f.target), _fmt(f.highest_step_before),
                  "yes" if f.restarted else "no", _fmt(f.recovery_s, "s"), _fmt(f.catch_up_s, "s"),
                  _fmt(f.lost_steps), _fmt(f.lost_work_s, "s"), _fmt(f.slowdown, "x"))
    if result.faults:
        console.print(t)
        for f in result.faults:
            line = f"  fault {f.id}: {f.mechanism or 'NOT INJECTED'}"
            if not f.injected:
                line += f" ({f.outcome}: {f.why_not_injected})" + ("; optional" if f.optional else "")
            if f.resumed_from is not None and f.restarted:
                line += f"; resumed from step {f.resumed_from}"
            if f.note:
                line += f"; {f.note}"
            console.print(line, highlight=False)
            st = f.extra.get("step_timing")
            if st:
                console.print(f"    slow node: {st['slow_node']} (rank {st['slow_rank']}): {st['why']}"
                              if st.get("slow_node") else f"    slow node: none named: {st['why']}", highlight=False)
    e = Table(title="expectations")
    for col in ("expectation", "limit", "measured", "ok"):
        e.add_column(col)
    for x in result.expectations:
        e.add_row(x.name + (" (implicit)" if x.implicit else ""), _limit(x.limit), _fmt(x.value),
                  Text("yes", style="green") if x.ok else Text("NO", style="bold red"))
    console.print(e)
    gp = "not reported" if result.goodput_why else _fmt(result.goodput)
    console.print(f"steps completed {result.steps_completed}  ·  step executions {result.step_executions}  ·  "
                  f"worker restarts {result.restarts}  ·  node replacements {result.node_replacements}  ·  "
                  f"goodput {gp}  ·  median step {_ms(result.median_step_s)}  ·  "
                  f"run {_fmt(result.duration_s, 's')}")
    console.print(Text(GOODPUT_FOOTNOTE, style="dim"), highlight=False)
    skew = skew_sentence(dict(result.channel) if result.channel is not None else None)
    if skew:  # how far the nodes' clocks were from the engine's (the history channel measures it)
        console.print(Text(skew, style="dim"), highlight=False)
    late = result.restarts_after_completion or 0
    if late:
        console.print(Text.assemble(("note:", "yellow"), f" {late} worker restart(s) began after the job had reported "
                                    "its final state (e.g. a worker crashed while shutting down; see logs/); not "
                                    "counted as restarts above"))
    if result.federated:  # a federated run: its rounds (chaos.analysis.federated)
        for line in text_lines(dict(result.federated)):
            console.print(line, highlight=False)
    checks = Table(title="checkpoint correctness")
    for col in ("verdict", "result", "why"):
        checks.add_column(col, overflow="fold")
    for name, entry in result.checkpoint.items():
        ok = entry.ok
        mark = (Text("ok", style="green") if ok else Text("not checked", style="dim") if ok is None
                else Text("FAILED", style="bold red"))
        mode = entry.get("mode")
        if mode and mode != "not_checked":
            mark.append(f" ({mode})")
        checks.add_row(name, mark, entry.why)
    if result.checkpoint:
        console.print(checks)
    if report is not None and report.is_file():
        console.print(f"HTML report: {shown(report)}", highlight=False, soft_wrap=True)  # one line, to copy
