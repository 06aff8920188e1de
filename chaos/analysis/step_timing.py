"""Per-rank step timing around each fault that lasted a while: how each rank spent its steps, and which one was slow.

A synchronous job steps at the pace of its slowest rank: the others wait for it in the collectives, so every
rank's step lasts about as long, and step durations alone cannot name a straggler. What tells them apart is how a
rank spent its step (docs/design.md, "Metric definitions", step timing):

- ``cpu_wait_s`` (the probe, from the kernel's schedstat): time the rank was runnable but had no CPU, which is
  where a CPU quota's throttling (and any CPU contention) shows. A rank waiting for a peer in a collective sleeps,
  which counts here not at all. Per second of the step (``starved``; summed over the process's threads, so several
  threads waiting at once can make it exceed 1), it names a rank starved of CPU.
- ``compute_s`` = ``duration_s`` − ``comm_s`` (a workload that times its collectives, as the reference one does):
  time outside the collectives. A rank that computes slowly (a slower GPU, a throttled CPU on a compute-bound job)
  has a larger one, while the ranks it holds up spend the difference waiting inside the collective.

Windows, per fault with an end (``t_healed``): ``before`` from the end of the previous fault (or the start) to the
injection, ``during`` the fault, ``after`` from the heal to the next fault (or the end). A step counts in a window
when it started (completion − ``duration_s``, else the process's previous completion) and completed inside it.
Per rank (and per node, its ranks' steps pooled) and window: the median of each figure over those steps.

The slow rank: the first signal the history has that makes one rank stand out during the fault: its ``starved``
share at least :data:`STARVED_MIN` and :data:`MARGIN` times any other rank's; else its ``compute_s`` at least
:data:`MARGIN` times its own before the fault and :data:`MARGIN` times any other rank's ratio. Otherwise no rank
is named, and ``why`` says what was compared.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any

from chaos.analysis.metrics import scraped_row_spans, steps
from chaos.analysis.steps import MISSING
from chaos.events import Event, Source

WINDOWS = ("before", "during", "after")
MARGIN = 2.0  # how many times another rank's figure the slow rank's must be
STARVED_MIN = 0.1  # the least share of a step spent waiting for a CPU that names a rank starved
_FIGURES = ("step_s", "comm_s", "compute_s", "cpu_s", "cpu_wait_s", "starved")


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value) else None


def _rows(events: list[Event]) -> list[dict[str, Any]]:
    """Each step as (process key, start, end and the figures), in time order per process."""
    table = steps(events)
    cols = {name: table.values(name, MISSING) for name in ("t", "duration_s", "comm_s", "cpu_s", "cpu_wait_s",
                                                           "rank", "node", "pid")}
    last_end: dict[tuple[Any, Any], float] = {}
    scraped = scraped_row_spans(table)  # a print-only job's steps: timed over the engine's reads
    sources = table.values("source")
    out = []
    for i in sorted(range(len(table)), key=lambda i: cols["t"][i]):
        end = _num(cols["t"][i])
        if end is None:
            continue
        proc = (cols["node"][i], cols["pid"][i])
        duration = _num(cols["duration_s"][i])
        start = end - duration if duration is not None else last_end.get(proc)
        last_end[proc] = end
        if i in scraped:
            start, end = scraped[i]
        elif sources[i] == Source.PROGRESS:
            continue  # a print-only step without a span (its process's first read)
        if start is None:
            continue
        step_s = end - start
        comm = _num(cols["comm_s"][i])
        cpu, wait = _num(cols["cpu_s"][i]), _num(cols["cpu_wait_s"][i])
        rank = cols["rank"][i]
        out.append({
            "key": (str(cols["node"][i]), rank if isinstance(rank, int) else None), "start": start, "end": end,
            "step_s": step_s, "comm_s": comm,
            "compute_s": max(0.0, duration - comm) if duration is not None and comm is not None else None,
            "cpu_s": cpu, "cpu_wait_s": wait,
            # thread-seconds runnable without a CPU per second of the step (threads waiting at once each count,
            # so it can exceed 1)
            "starved": wait / step_s if wait is not None and step_s > 0 else None})
    return out


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not rows:
        return None
    out: dict[str, Any] = {"steps": len(rows)}
    for name in _FIGURES:
        values = [r[name] for r in rows if r[name] is not None]
        out[name] = round(median(values), 6) if values else None
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _stands_out(values: dict[Any, float], floor: float) -> tuple[Any, float, float] | None:
    """(key, its value, the largest of the others) when one value is at least ``floor`` and MARGIN × every other."""
    if len(values) < 2:
        return None
    top = max(values, key=lambda k: values[k])
    others = max(v for k, v in values.items() if k != top)
    return (top, values[top], others) if values[top] >= floor and values[top] >= MARGIN * others else None


def fault_step_timing(rows: list[dict[str, Any]], t_from: float, t_f: float, t_h: float, t_to: float,
                      target: str | None) -> dict[str, Any] | None:
    """Step timing of one fault active in ``[t_f, t_h]``, ``before`` from ``t_from``, ``after`` up to ``t_to``."""
    bounds = {"before": (t_from, t_f), "during": (t_f, t_h), "after": (t_h, t_to)}
    inside = {w: [r for r in rows if a <= r["start"] and r["end"] <= b] for w, (a, b) in bounds.items()}
    if not inside["during"]:
        return None
    keys = sorted({r["key"] for w in WINDOWS for r in inside[w]},
                  key=lambda k: (k[1] is None, k[1] if k[1] is not None else 0, k[0]))
    ranks = [{"rank": rank, "node": node,
              **{w: _summary([r for r in inside[w] if r["key"] == (node, rank)]) for w in WINDOWS}}
             for node, rank in keys]
    nodes = [{"node": node, **{w: _summary([r for r in inside[w] if r["key"][0] == node]) for w in WINDOWS}}
             for node in sorted({k[0] for k in keys})]
    during = {(r["node"], r["rank"]): r["during"] for r in ranks if r["during"]}
    before = {(r["node"], r["rank"]): r["before"] for r in ranks if r["before"]}
    out: dict[str, Any] = {"signal": None, "slow_rank": None, "slow_node": None, "target": target,
                           "slow_is_target": None, "cpu_slowdown": None, "compute_slowdown": None, "why": "",
                           "ranks": ranks, "nodes": nodes}
    starved = {k: s["starved"] for k, s in during.items() if s["starved"] is not None}
    compute = {k: c for k, s in during.items()
               if (c := _ratio(s["compute_s"], (before.get(k) or {}).get("compute_s"))) is not None}
    if (hit := _stands_out(starved, STARVED_MIN)) is not None:
        key, value, others = hit
        out.update(signal="cpu_wait", why=(
            f"rank {key[1]} on {key[0]} was runnable without a CPU {value:.2f} s per second of its steps during the "
            f"fault (median, its threads summed), the other ranks at most {others:.2f} s: it was starved of CPU "
            "while the others waited for it in the collectives"))
    elif (hit := _stands_out(compute, MARGIN)) is not None:
        key, value, others = hit
        out.update(signal="compute", why=(
            f"rank {key[1]} on {key[0]} spent {value:.1f}× as long outside the collectives as before the fault "
            f"(median), the other ranks at most {others:.1f}×: it computed slowly while the others waited for it"))
    else:
        if starved or compute:
            parts = []
            if starved:
                parts.append("runnable without a CPU (s per s of step) "
                             + ", ".join(f"rank {k[1]} {v:.2f}" for k, v in starved.items()))
            if compute:
                parts.append("time outside the collectives against before the fault "
                             + ", ".join(f"rank {k[1]} {v:.1f}×" for k, v in compute.items()))
            out["why"] = (f"no rank stands out (by {MARGIN:g}× over every other) during the fault: "
                          + "; ".join(parts))
        else:
            out["why"] = ("not measured: the history has no per-rank timing but step durations (no cpu_wait_s from "
                          "the probe, no comm_s from the workload), and in a synchronous job every rank's step lasts "
                          "as long as the slowest one's")
        return out
    node, rank = key
    out.update(slow_rank=rank, slow_node=node, slow_is_target=(node == target) if target else None)
    d, b = during[key], before.get(key) or {}
    # how much less CPU the slow rank got of what it asked for: (on CPU / runnable) before over during
    got_b = _ratio(b.get("cpu_s"), (b.get("cpu_s") or 0) + (b.get("cpu_wait_s") or 0))
    got_d = _ratio(d.get("cpu_s"), (d.get("cpu_s") or 0) + (d.get("cpu_wait_s") or 0))
    out["cpu_slowdown"] = round(got_b / got_d, 3) if got_b and got_d else None
    ratio = _ratio(d.get("compute_s"), b.get("compute_s"))
    out["compute_slowdown"] = round(ratio, 3) if ratio is not None else None
    return out


def step_timings(events: list[Event], faults: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Fault id → its step timing, for every injected fault with an end (``t_healed``) and steps inside it."""
    lasting = [f for f in faults if f.get("injected", True) and f.get("t_injected") is not None
               and f.get("t_healed") is not None]
    if not lasting:
        return {}
    rows = _rows(events)
    marks = sorted({t for f in faults for t in (f.get("t_injected"), f.get("t_healed")) if t is not None})
    out = {}
    for f in lasting:
        t_f, t_h = f["t_injected"], f["t_healed"]
        t_from = max((t for t in marks if t < t_f), default=-math.inf)
        t_to = min((t for t in marks if t > t_h), default=math.inf)
        target = f.get("target")
        timing = fault_step_timing(rows, t_from, t_f, t_h, t_to,
                                   target if target not in (None, "None", "network", "storage") else None)
        if timing is not None:
            out[f["id"]] = timing
    return out
