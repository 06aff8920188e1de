"""``chaos compare --sweep bandwidth=1gbit,100mbit,10mbit``: speedup against link quality, and the crossover.

The one-node scenarios of the comparison run once without faults (the baseline); every multi-node scenario runs
once per value, on the netns runtime, with its faults replaced by the swept impairment on every node's link for the
whole run (a ``bandwidth`` fault per node, from the first step, never healed) and no golden run. Each run's pace is
the median step time ``chaos.analysis`` measures (the whole run is under the impairment, so the median covers it);
the speedup is that pace over the baseline's, and the crossover is where it falls below 1 as the link gets worse:
from there on one machine wins. Every sentence is computed from those figures.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chaos.compare import Column, fairness, resources_text
from chaos.scenario import Scenario

# kind → the option the swept value sets (a fault kind that impairs one node's link, applied to every node)
SWEEPABLE = {"bandwidth": "rate"}
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")
_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def rate_bits(rate: str) -> float:
    """A tc rate in bits per second (``10mbit`` → 1e7; tc's ``mbps`` is megabytes per second)."""
    m = _RATE.match(rate)
    if m is None:
        raise ValueError(f"expected a tc rate such as 10mbit, 500kbit or 1gbit, got {rate!r}")
    return float(m.group(1)) * _BITS[m.group(2)]


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """``bandwidth=1gbit,100mbit`` → ("bandwidth", [values from the best link to the worst])."""
    kind, sep, values = text.partition("=")
    if not sep or kind not in SWEEPABLE:
        raise ValueError(f"--sweep: expected KIND=V1,V2,... with KIND one of {', '.join(SWEEPABLE)}, got {text!r}")
    items = [v.strip() for v in values.split(",") if v.strip()]
    if len(items) < 2:
        raise ValueError("--sweep: give at least two values to draw a curve, e.g. bandwidth=1gbit,100mbit,10mbit")
    for v in items:
        rate_bits(v)
    return kind, sorted(dict.fromkeys(items), key=rate_bits, reverse=True)


def _rebuilt(scenario: Scenario, name: str, **changes: Any) -> Scenario:
    data = scenario.model_dump(mode="json", exclude_none=True)
    data.update(name=name, expect={}, checks={**data.get("checks", {}), "golden": False}, **changes)
    data.pop("explore", None)
    return Scenario.model_validate(data)


def baseline_scenario(scenario: Scenario) -> Scenario:
    """The one-node scenario without its faults: the pace the sweep measures speedups against."""
    return _rebuilt(scenario, f"{scenario.name}-baseline", faults=[])


def swept_scenario(scenario: Scenario, kind: str, value: str) -> Scenario:
    """The multi-node scenario on netns, its faults replaced by ``kind`` at ``value`` on every node, whole run."""
    cluster = {**scenario.cluster.model_dump(mode="json", exclude_none=True), "runtime": "netns"}
    faults = [{"kind": kind, "target": i, "at": 0, SWEEPABLE[kind]: value} for i in range(scenario.cluster.nodes)]
    return _rebuilt(scenario, f"{scenario.name}-{kind}-{value}", cluster=cluster, faults=faults)


@dataclass
class Point:
    value: str
    bits_per_s: float
    steps_per_s: float | None
    speedup: float | None
    comm_share: float | None
    verdict: str
    run_dir: str


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


def curves(baseline: Column, swept: dict[str, list[tuple[str, Column]]]) -> list[Curve]:
    """One curve per multi-node scenario (its base label → [(value, column)])."""
    out = []
    for label, cols in swept.items():
        points = [Point(v, rate_bits(v), c.steps_per_s,
                        (c.steps_per_s / baseline.steps_per_s) if c.steps_per_s and baseline.steps_per_s else None,
                        c.comm_share, c.verdict, c.run_dir) for v, c in cols]
        points.sort(key=lambda p: p.bits_per_s, reverse=True)
        out.append(Curve(label, points, crossover(label, baseline.label, points)))
    return out


def plot(baseline: Column, found: list[Curve], path: Path) -> None:
    from chaos.reports.plots import plt

    fig, ax = plt.subplots(figsize=(7, 3.8), dpi=100)
    for curve in found:
        pts = [p for p in curve.points if p.speedup is not None]
        ax.plot([p.bits_per_s for p in pts], [p.speedup for p in pts], "o-", label=curve.label)
        for a, b in itertools.pairwise(pts):
            if (a.speedup or 0) >= 1 > (b.speedup or 0):  # the crossover: shade the links where one machine wins
                ax.axvspan(min(p.bits_per_s for p in pts) / 2, a.bits_per_s, color="#d62728", alpha=0.08)
                ax.axvline((a.bits_per_s * b.bits_per_s) ** 0.5, color="#d62728", linestyle=":",
                           label="crossover")
    known = [p for c in found for p in c.points if p.speedup is not None]
    if known and all((p.speedup or 0) < 1 for p in known):  # no crossover in range: one machine wins throughout
        ax.axvspan(min(p.bits_per_s for p in known) / 2, max(p.bits_per_s for p in known) * 2, color="#d62728",
                   alpha=0.08, label="one machine wins")
    ax.axhline(1.0, color="grey", linestyle="--", label=f"one machine ({baseline.label})")
    ax.set_xscale("log")
    ax.set_xlabel("link bandwidth per node (bit/s, tc tbf)")
    ax.set_ylabel("speedup over one machine")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def render_markdown(kind: str, baseline: Column, found: list[Curve]) -> str:
    lines = [f"# torch-chaos interconnect sweep: {kind}", "",
             f"Speedup = steps/s of the multi-node run with every node's link capped ({kind}, netns, tc tbf, the "
             f"whole run) over steps/s of {baseline.label} without faults. Measured on: {baseline.machine}.", "",
             f"Baseline: {baseline.label}: {baseline.steps_per_s or 0:.1f} steps/s; {resources_text(baseline)}.", ""]
    for curve in found:
        lines += [f"## {curve.label}", "", "| link | steps/s | speedup | communication share | verdict |",
                  "|---|---|---|---|---|"]
        for p in curve.points:
            lines.append(f"| {p.value} | {'—' if p.steps_per_s is None else f'{p.steps_per_s:.1f}'} | "
                         f"{'—' if p.speedup is None else f'{p.speedup:.2f}×'} | "
                         f"{'—' if p.comm_share is None else f'{p.comm_share:.0%}'} | {p.verdict} |")
        lines += [""]
    failed = [f"- {c.label} at {p.value} did not pass ({p.verdict}): its pace is that of the steps it ran."
              for c in found for p in c.points if p.verdict != "pass"]
    lines += ["## Conclusions", "", *[f"- {c.crossover}" for c in found], *failed, "",
              "![speedup vs link](sweep.svg)", "",
              "## Runs", "", f"- {baseline.label}: `{baseline.run_dir}`"]
    lines += [f"- {c.label} at {p.value}: `{p.run_dir}`" for c in found for p in c.points]
    lines += [""]
    return "\n".join(lines)


def write_sweep(kind: str, baseline: Column, swept: dict[str, list[tuple[str, Column]]],
                output: Path) -> dict[str, Path]:
    output.mkdir(parents=True, exist_ok=True)
    found = curves(baseline, swept)
    paths = {"md": output / "sweep.md", "json": output / "sweep.json", "svg": output / "sweep.svg"}
    plot(baseline, found, paths["svg"])
    md = render_markdown(kind, baseline, found)
    unfair = [f"{label}: {', '.join(why)}" for label, why in fairness(
        [baseline, *[c for cols in swept.values() for _, c in cols]]).items() if why]
    if unfair:
        md = md.replace("## Conclusions\n\n", "## Conclusions\n\n- Not a fair comparison: " + "; ".join(unfair)
                        + ".\n", 1)
    paths["md"].write_text(md)
    paths["json"].write_text(json.dumps({"kind": kind, "baseline": asdict(baseline),
                                         "curves": [asdict(c) for c in found], "not_fair": unfair}, indent=2) + "\n")
    return paths
