"""What a verdict rests on: the ``expect`` bounds it checked, and the measured figures nothing bounded.

A green PASS beside an 85 s recovery reads as "85 s is fine"; it only means the scenario set no bound on
recovery. Every report (and the terminal summary) says which bounds held and flags the figures no bound gated,
naming the scenario field that would (``expect.recovery_s: {max: ...}``, ``chaos.scenario.Expect``). Works on
the result alone (``chaos.analysis.result_model``), so the terminal can use it without the analysis.
"""

from __future__ import annotations

from typing import Any

from chaos.analysis.result_model import ResultModel

# expect field → (what it measures, unit, the side a bound usually takes); the per-fault figures take the worst
# value over the disruptive faults that happened, as chaos.analysis.result_json's expectations do
PER_FAULT = {"recovery_s": ("recovery", " s", "max"), "catch_up_s": ("catch-up", " s", "max"),
             "lost_steps": ("lost steps", "", "max"), "slowdown": ("slowdown", "×", "max")}


def _num(value: Any, unit: str) -> str:
    if value is None:
        return "not measured"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.3g}{unit}" if abs(value) < 100 else f"{value:.0f}{unit}"
    return f"{value}{unit}"


def _limit(limit: Any) -> str:
    if isinstance(limit, dict):
        return " and ".join(f"{'≤' if k == 'max' else '≥'} {v:g}" for k, v in limit.items())
    return f"= {str(limit).lower()}"


def _unit(name: str) -> str:
    return PER_FAULT.get(name, ("", "", ""))[1]


def held_bounds(result: ResultModel) -> list[str]:
    """Each expectation that held, as ``recovery_s 6.23 s ≤ 30`` (implicit ones say so)."""
    out = []
    for x in result.expectations:
        if not x.ok:
            continue
        name, limit, value = x.name, x.limit, x.value
        if isinstance(limit, dict):
            text = f"{name} {_num(value, _unit(name))} {_limit(limit)}"
        elif isinstance(limit, bool):
            text = name if limit else f"not {name}"
        else:  # a named mode (checkpoint.matches_golden: bitwise ...): what was found, what was accepted
            text = f"{name} {value} (expected {limit} or closer)"
        out.append(text + (" (implicit)" if x.implicit else ""))
    return out


def failed_bounds(result: ResultModel) -> list[str]:
    """Each expectation that did not hold, with the measured value."""
    return [f"{x.name} {_num(x.value, _unit(x.name))}, expected "
            f"{_limit(x.limit) if isinstance(x.limit, dict) else str(x.limit).lower()}"
            for x in result.expectations if not x.ok]


def unbounded(result: ResultModel) -> list[str]:
    """The measured per-fault figures no ``expect`` bound gated, worst value first named, with the field to add."""
    gated = {x.name for x in result.expectations}
    out = []
    for name, (what, unit, side) in PER_FAULT.items():
        values = [v for f in result.disruptive_faults if isinstance(v := f.figure(name), (int, float))]
        if name in gated or not values:
            continue
        worst = max(values) if side == "max" else min(values)
        out.append(f"{what} {_num(worst, unit)}: no bound set — add expect.{name}: {{{side}: ...}} to the "
                   "scenario to gate on it")
    return out


def bounds_lines(result: ResultModel) -> list[str]:
    """The lines under a verdict: what it held (or failed), then what it did not look at."""
    lines = []
    if held := held_bounds(result):
        lines.append(("PASS held: " if result.verdict == "pass" else "held: ") + "; ".join(held))
    if failed := failed_bounds(result):
        lines.append("failed: " + "; ".join(failed))
    lines += unbounded(result)
    return lines
