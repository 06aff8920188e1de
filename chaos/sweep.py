"""``chaos compare --sweep bandwidth=1gbit,100mbit,10mbit`` (or ``delay=0ms,5ms,20ms``): speedup against link
quality, and the crossover.

The one-node scenarios of the comparison run once without faults (the baseline); every multi-node scenario runs
once per value, on the netns runtime, with its faults replaced by the swept impairment on every node's link for the
whole run (a ``bandwidth`` or ``delay`` fault per node, from the first step, never healed; a delay of 0 is the
unimpaired link: no fault at all) and no golden run. Each run's pace is the median step interval over the steps
after every node's impairment took effect (``chaos.analysis.throughput.impaired_pace``); the speedup is that pace
over the baseline's, and the crossover is where it falls below 1 as the link gets worse: from there on one machine
wins. Every sentence is computed from those figures.

A pace needs steps, not the whole run: before each point after the first, the steps of a shipped workload are cut
(never below ``MIN_STEPS``) to what the previous, better link's measured pace says fits the run's deadline if the
step time grew as much as the link got worse (``fit_steps``); the report states every point's steps.

What the sweep knows of a kind is what the kind declares (``sweep_axis``, chaos.faults.base.SweepAxis): the option
the value sets, how values order and slow a step, where they go on the plot; any kind with an axis can be swept.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chaos.analysis.load import load_events
from chaos.analysis.throughput import impaired_pace, training_setup
from chaos.compare import Column, fairness, measure, resources_text, where
from chaos.faults.base import SweepAxis
from chaos.registry import fault_plugins
from chaos.reports.plots import plt
from chaos.scenario import Scenario

# fewest steps a cut point keeps (a median over fewer says little), and the part of the deadline a point may plan
# to use (the rest: start-up, the first step, checkpoints, teardown)
MIN_STEPS, DEADLINE_SHARE = 100, 0.6


def sweepable() -> dict[str, SweepAxis]:
    """The kinds that can be swept (a ``sweep_axis``), by name, sorted."""
    return {kind: plugin.sweep_axis for kind, plugin in sorted(fault_plugins().items())
            if plugin.sweep_axis is not None}


def axis(kind: str) -> SweepAxis:
    """The axis ``kind`` declares (KeyError for a kind without one: ``parse_sweep`` refuses it first)."""
    return sweepable()[kind]


def badness(kind: str, value: str) -> float:
    """How bad a link the value makes (larger: worse), the order of the curve: less bandwidth, more delay."""
    return axis(kind).badness(value)


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """``bandwidth=1gbit,100mbit`` → ("bandwidth", [values from the best link to the worst])."""
    kind, sep, values = text.partition("=")
    axes = sweepable()
    if not sep or kind not in axes:
        raise ValueError(f"--sweep: expected KIND=V1,V2,... with KIND one of {', '.join(axes)}, got {text!r}")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if len(items) < 2:
        raise ValueError("--sweep: give at least two values to draw a curve, e.g. "
                         + " or ".join(f"{name}={a.examples}" for name, a in axes.items()))
    for v in items:
        try:
            badness(kind, v)
            _as_fault(kind, v)  # what the kind itself accepts (delay at most 60s, a rate above zero)
        except ValueError as exc:
            raise ValueError(f"--sweep: {kind} value {v!r}: {exc}") from None
    if len(set(items)) < len(items):
        raise ValueError(f"--sweep: a value is given twice ({', '.join(items)}): each point of the curve once")
    ordered = sorted(items, key=lambda v: badness(kind, v))
    if len({badness(kind, v) for v in ordered}) < len(ordered):
        raise ValueError(f"--sweep: two values name the same link: {', '.join(ordered)}")
    return kind, ordered


def _as_fault(kind: str, value: str) -> None:
    """Refuse a value the kind's own options refuse, before any point of the sweep runs (ValueError: the why)."""
    from pydantic import ValidationError


    try:
        fault_plugins()[kind].options.model_validate({"kind": kind, "target": 0, "at_step": 1,
                                                      axis(kind).option: value})
    except ValidationError as exc:
        raise ValueError(str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None


def _rebuilt(scenario: Scenario, name: str, **changes: Any) -> Scenario:
    data = scenario.model_dump(mode="json", exclude_none=True)
    data.update(name=name, expect={}, checks={**data.get("checks", {}), "golden": False}, **changes)
    data.pop("explore", None)
    return Scenario.model_validate(data)


def baseline_scenario(scenario: Scenario) -> Scenario:
    """The one-node scenario without its faults: the pace the sweep measures speedups against."""
    return _rebuilt(scenario, f"{scenario.name}-baseline", faults=[])


def swept_scenario(scenario: Scenario, kind: str, value: str, steps: int | None = None) -> Scenario:
    """The multi-node scenario on netns, its faults replaced by ``kind`` at ``value`` on every node, whole run (a
    delay of 0: no fault); ``steps``: the shipped workload's steps (``fit_steps``), None to keep the scenario's."""
    cluster = {**scenario.cluster.model_dump(mode="json", exclude_none=True), "runtime": "netns"}
    faults = [] if axis(kind).unimpaired(value) else [
        {"kind": kind, "target": i, "at": 0, axis(kind).option: value} for i in range(scenario.cluster.nodes)]
    changes: dict[str, Any] = {}
    if steps is not None:
        workload = scenario.workload.model_dump(mode="json", exclude_none=True)
        changes["workload"] = {**workload, "args": {**workload.get("args", {}), "steps": steps}}
    return _rebuilt(scenario, f"{scenario.name}-{kind}-{value}", cluster=cluster, faults=faults, **changes)


def measure_point(run_dir: Path) -> Column:
    """A sweep run's column, its steps/s and communication share taken under the impairment (``impaired_pace``)."""
    from dataclasses import replace


    pace, share, _ = impaired_pace(load_events(Path(run_dir) / "events.jsonl"))
    return replace(measure(run_dir), steps_per_s=pace, comm_share=share)


def slowdown(kind: str, better: str, worse: str) -> float:
    """How much longer a step may take on ``worse`` than on ``better``, at most, for planning (the kind's axis: a
    step that were all transfer, or all round trips)."""
    return axis(kind).slowdown(better, worse)


def fit_steps(scenario: Scenario, kind: str, previous: tuple[str, Column] | None,
              value: str) -> tuple[int | None, str]:
    """The steps a point should run so it can end before the deadline, and why: the scenario's own, unless the
    previous (better) point's measured pace, slowed by ``slowdown``, says they would not fit ``DEADLINE_SHARE`` of
    the deadline after its start-up; then fewer, never below ``MIN_STEPS``. None: keep the scenario's (no previous
    pace, not a shipped workload, or they fit)."""

    setup = training_setup(scenario.workload)
    if previous is None or setup is None:
        return None, ""
    planned = int(setup["steps"])
    prev_value, prev = previous
    if not prev.steps_per_s:
        return None, ""
    factor = slowdown(kind, prev_value, value)
    pace = prev.steps_per_s / factor
    budget = DEADLINE_SHARE * scenario.limits.deadline_s - (prev.time_to_first_step_s or 0.0)
    fits = int(max(budget, 0.0) * pace)
    if fits >= planned:
        return None, ""
    steps = max(MIN_STEPS, fits)
    return steps, (f"{steps} of {planned} steps: at {prev_value} it ran {prev.steps_per_s:.1f} steps/s; if a step "
                   f"took {factor:.3g}× as long at {value}, {planned} would not fit {DEADLINE_SHARE:.0%} of the "
                   f"{scenario.limits.deadline_s:g} s deadline after its {prev.time_to_first_step_s or 0:.1f} s "
                   f"start")


@dataclass
class Point:
    value: str
    bits_per_s: float | None  # a rate point's bits per second (None for the other axes)
    steps_per_s: float | None
    speedup: float | None
    comm_share: float | None
    verdict: str
    run_dir: str
    delay_s: float | None = None  # a delay point's added delay in seconds (None for the other axes)
    steps: int | None = None  # the steps the run reached (its last step)
    steps_note: str = ""  # why the point ran fewer steps than the scenario (fit_steps), "" when it did not


@dataclass
class Curve:
    label: str  # the multi-node scenario's column label
    points: list[Point]  # best link first
    crossover: str  # the sentence


def crossover(label: str, baseline: str, points: list[Point]) -> str:
    """Where one machine starts to win as the link gets worse, from the measured speedups (best link first)."""
    known = [p for p in points if p.speedup is not None]
    if not known:
        return f"{label}: no pace measured at any link quality."
    if all((p.speedup or 0) >= 1 for p in known):
        return (f"{label}: distributing is faster than {baseline} at every tested link, down to {known[-1].value} "
                f"({known[-1].speedup:.2f}×).")
    if all((p.speedup or 0) < 1 for p in known):
        best = max(known, key=lambda p: p.speedup or 0)
        return (f"{label}: one machine ({baseline}) wins at every tested link quality; the best speedup is "
                f"{best.speedup:.2f}× at {best.value}.")
    for a, b in itertools.pairwise(known):
        if (a.speedup or 0) >= 1 > (b.speedup or 0):
            return (f"{label}: crossover between {a.value} ({a.speedup:.2f}×) and {b.value} ({b.speedup:.2f}×): "
                    f"on a link of {b.value} or worse, one machine ({baseline}) wins.")
    worst = known[-1]
    return (f"{label}: the speedup does not fall steadily with the link (noise?): "
            + ", ".join(f"{p.value} {p.speedup:.2f}×" for p in known) + f"; at {worst.value} it is "
            f"{worst.speedup:.2f}×.")


def curves(baseline: Column, swept: dict[str, list[tuple[Any, ...]]], kind: str) -> list[Curve]:
    """One curve per multi-node scenario (its base label → [(value, column) or (value, column, steps note)])."""
    out = []
    ax = axis(kind)
    for label, cols in swept.items():
        points = []
        for value, c, *note in cols:
            speedup = (c.steps_per_s / baseline.steps_per_s) if c.steps_per_s and baseline.steps_per_s else None
            # the value as a number, in the field the kind's axis names (the others stay None)
            points.append(Point(**{
                "value": value, "bits_per_s": None, "steps_per_s": c.steps_per_s, "speedup": speedup,
                "comm_share": c.comm_share, "verdict": c.verdict, "run_dir": c.run_dir, "steps": c.final_step,
                "steps_note": note[0] if note else "", ax.point_field: ax.point_value(value)}))
        points.sort(key=lambda p: ax.badness(p.value))
        out.append(Curve(label, points, crossover(label, baseline.label, points)))
    return out


def plot(baseline: Column, found: list[Curve], path: Path, kind: str) -> None:
    axis_of = axis(kind)

    def x_of(p: Point) -> float:
        return axis_of.x(p.value)

    fig, ax = plt.subplots(figsize=(7, 3.8), dpi=100)
    xs = [x_of(p) for c in found for p in c.points if p.speedup is not None]
    worse_side = (min(xs) / 2, max(xs) * 2) if axis_of.log_x and xs else (0.0, max(xs or [1.0]) * 1.05)
    for curve in found:
        pts = [p for p in curve.points if p.speedup is not None]
        ax.plot([x_of(p) for p in pts], [p.speedup for p in pts], "o-", label=curve.label)
        for a, b in itertools.pairwise(pts):
            if (a.speedup or 0) >= 1 > (b.speedup or 0):  # the crossover: shade the links where one machine wins
                if axis_of.log_x:  # the worse links at the low end
                    ax.axvspan(worse_side[0], x_of(a), color="#d62728", alpha=0.08)
                    mid = (x_of(a) * x_of(b)) ** 0.5
                else:
                    ax.axvspan(x_of(a), worse_side[1], color="#d62728", alpha=0.08)
                    mid = (x_of(a) + x_of(b)) / 2
                ax.axvline(mid, color="#d62728", linestyle=":", label="crossover")
    known = [p for c in found for p in c.points if p.speedup is not None]
    if known and all((p.speedup or 0) < 1 for p in known):  # no crossover in range: one machine wins throughout
        ax.axvspan(*worse_side, color="#d62728", alpha=0.08, label="one machine wins")
    ax.axhline(1.0, color="grey", linestyle="--", label=f"one machine ({baseline.label})")
    if axis_of.log_x:
        ax.set_xscale("log")
    ax.set_xlabel(axis_of.x_label)
    ax.set_ylabel("speedup over one machine")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


PACE = ("A point's steps/s is 1 / the median step interval (all ranks) over the steps completed after the last node's "
        "impairment took effect (its last fault_injected; the whole run without faults), and its communication share "
        "the median of rank 0's over the same steps.")


def render_markdown(kind: str, baseline: Column, found: list[Curve], base: Path | None = None) -> str:
    """The sweep as Markdown; run directories relative to ``base`` (the page's directory), as compare's are."""
    lines = [f"# torch-chaos interconnect sweep: {kind}", "",
             f"Speedup = steps/s of the multi-node run with {axis(kind).how} over steps/s of {baseline.label} without "
             f"faults. {PACE} Measured on: {baseline.machine}.", "",
             f"Baseline: {baseline.label}: {baseline.steps_per_s or 0:.1f} steps/s; {resources_text(baseline)}.", ""]
    for curve in found:
        lines += [f"## {curve.label}", "", "| link | steps run | steps/s | speedup | communication share | verdict |",
                  "|---|---|---|---|---|---|"]
        for p in curve.points:
            lines.append(f"| {p.value} | {'—' if p.steps is None else p.steps} | "
                         f"{'—' if p.steps_per_s is None else f'{p.steps_per_s:.1f}'} | "
                         f"{'—' if p.speedup is None else f'{p.speedup:.2f}×'} | "
                         f"{'—' if p.comm_share is None else f'{p.comm_share:.0%}'} | {p.verdict} |")
        lines += [""]
    cut = [f"- {c.label} at {p.value}: {p.steps_note}." for c in found for p in c.points if p.steps_note]
    failed = [f"- {c.label} at {p.value} did not pass ({p.verdict}): its pace is that of the steps it ran."
              for c in found for p in c.points if p.verdict != "pass"]
    lines += ["## Conclusions", "", *[f"- {c.crossover}" for c in found], *cut, *failed, "",
              "![speedup vs link](sweep.svg)", "",
              "## Runs", "", f"- {baseline.label}: `{where(baseline.run_dir, base)}`"]
    lines += [f"- {c.label} at {p.value}: `{where(p.run_dir, base)}`" for c in found for p in c.points]
    lines += [""]
    return "\n".join(lines)


def write_sweep(kind: str, baseline: Column, swept: dict[str, list[tuple[Any, ...]]],
                output: Path) -> dict[str, Path]:
    output.mkdir(parents=True, exist_ok=True)
    found = curves(baseline, swept, kind)
    paths = {"md": output / "sweep.md", "json": output / "sweep.json", "svg": output / "sweep.svg"}
    plot(baseline, found, paths["svg"], kind)
    md = render_markdown(kind, baseline, found, output)
    unfair = [f"{label}: {', '.join(why)}" for label, why in fairness(
        [baseline, *[col for cols in swept.values() for _, col, *_ in cols]]).items() if why]
    if unfair:
        md = md.replace("## Conclusions\n\n", "## Conclusions\n\n- Not a fair comparison: " + "; ".join(unfair)
                        + ".\n", 1)
    paths["md"].write_text(md)
    paths["json"].write_text(json.dumps({"kind": kind, "baseline": asdict(baseline),
                                         "curves": [asdict(c) for c in found], "not_fair": unfair}, indent=2) + "\n")
    return paths
