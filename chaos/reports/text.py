"""Shared wording for the report formats: the same rows and sentences in HTML, Markdown and JUnit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chaos.analysis.breakdown import RecoveryBreakdown
from chaos.analysis.channel import skew_sentence
from chaos.analysis.replacements import explain_replacements
from chaos.analysis.result_model import FaultResult
from chaos.analysis.verdict import Verdict
from chaos.reports.model import Report


def fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def limit_text(limit: Any) -> str:
    if isinstance(limit, dict):
        return " and ".join(f"{'≤' if k == 'max' else '≥'} {v:g}" for k, v in limit.items())
    return str(limit).lower()


FAULT_COLUMNS = ("#", "kind", "target", "mechanism", "at step", "restart", "recovery", "catch-up", "lost steps",
                 "lost work", "slowdown", "resumed from")


def verdict_text(verdict: Verdict) -> str:
    """A checkpoint verdict's outcome, with its mode where it has one (``ok (within_noise)``, ``FAILED
    (diverged)``): which comparison was made matters as much as its outcome."""
    ok = verdict.ok
    text = "not checked" if ok is None else ("ok" if ok else "FAILED")
    mode = verdict.get("mode")
    return f"{text} ({mode})" if mode and mode != "not_checked" else text


def fault_rows(report: Report) -> list[list[str]]:
    return [[str(f.id), f.kind, str(f.target), f.mechanism or f"not injected ({f.outcome or '?'}: "
             f"{f.why_not_injected or ''})", fmt(f.highest_step_before),
             fmt(f.restarted), fmt(f.recovery_s, " s"), fmt(f.catch_up_s, " s"), fmt(f.lost_steps),
             fmt(f.lost_work_s, " s"), fmt(f.slowdown, "×"), fmt(f.resumed_from)]
            for f in report.result.faults]


def summary_rows(report: Report) -> list[tuple[str, str]]:
    r = report.result
    return [("steps completed", fmt(r.steps_completed)), ("step executions", fmt(r.step_executions)),
            ("goodput", r.goodput_why if r.goodput_why else fmt(r.goodput)),
            ("median step", fmt(r.median_step_s, " s", 4)),
            ("worker restarts", fmt(r.restarts)),
            ("restarts after the job finished", fmt(r.restarts_after_completion or 0)),
            ("node replacements", replacements_text(report)),
            ("run duration", fmt(r.duration_s, " s", 1)), ("end", r.end_reason), *oom_rows(report),
            *slow_node_rows(report), *hang_rows(report), *replaced_rows(report)]


def replacements_text(report: Report) -> str:
    """The replacement count with what each replacement followed (chaos.analysis.replacements): "3" for one crash
    reads like a miscount when two of them were the replaced node exiting again by itself."""
    return explain_replacements(report.analysis.replacements) or fmt(report.result.node_replacements)


def lanes_note(report: Report) -> str | None:
    """Why the timeline has fewer lanes than the cluster has nodes: only those nodes' steps were recorded."""
    seen, nodes = len(report.analysis.progress), report.scenario.cluster.nodes
    if 0 < seen < nodes:
        return (f"Steps were recorded from {', '.join(report.analysis.progress)} only ({seen} of {nodes} nodes): "
                "the job reports its steps from those nodes' ranks.")
    return None


def divergence_line(report: Report) -> str | None:
    """Where the loss left the golden's, as the loss plot marks it; None when matches_golden found no divergence."""
    v = report.result.checkpoint.get("matches_golden") or Verdict(None, "")
    if v.get("first_divergent_step") is None:
        return None
    return (f"The loss diverges from the golden run's at step {v.get('first_divergent_step')} (dashed line); the lower "
            f"panel is this run's loss minus the golden's per step (largest difference "
            f"{v.get('max_abs_loss_diff', 0):.3g}, {v.get('max_rel_loss_diff', 0):.3g} relative, over "
            f"{v.get('steps_compared')} steps compared).")


def replaced_rows(report: Report) -> list[tuple[str, str]]:
    """A lasting fault whose node was replaced meanwhile: put on the replacement too, or ended early for it."""
    rows = []
    for f in report.result.faults:
        for r in f.extra.get("node_replaced") or []:
            text = (f"put on the replacement too, {r['after_s']:.2f} s after it started" if r.get("reapplied")
                    and r.get("after_s") is not None else "put on the replacement too" if r.get("reapplied")
                    else f"ended early: {r.get('why', '')}")
            rows.append((f"{f.kind} #{f.id}: {r.get('node')} replaced", text))
    return rows


def oom_rows(report: Report) -> list[tuple[str, str]]:
    """The kernel's OOM kills (its own record, not an exit code: a SIGKILL crash also says -9)."""
    rows = []
    for f in report.result.faults:
        for k in f.extra.get("oom_kills") or []:
            who = k.get("role", "process") + "".join(f" {n} {k[n]}" for n in ("rank", "local_rank") if n in k)
            rows.append(("OOM-killed by the kernel", f"{k.get('node')} pid {k.get('pid')} ({who}), fault #{f.id} "
                         f"{f.kind}" + (f", {k['after_injection_s']:+.2f} s from its injection"
                                           if k.get("after_injection_s") is not None else "")))
    return rows


def hang_rows(report: Report) -> list[tuple[str, str]]:
    """Each hang: whether the job noticed the stuck rank (and how fast) or hung (chaos.analysis.hangs)."""
    rows = []
    for f in report.result.faults:
        h = f.extra.get("hang")
        if h:
            why = str(h.get("why", ""))
            text = why if why.startswith((h["outcome"], "not checked")) else f"{h['outcome']}: {why}"
            rows.append((f"hang #{f.id} ({h.get('mode')})", text))
    return rows


def slow_node_line(f: FaultResult) -> str | None:
    """Which node the per-rank step timing names as slow during a fault, and on what evidence (analysis wrote it)."""
    st = f.extra.get("step_timing")
    if not st:
        return None
    if st.get("slow_node") is None:
        return f"fault #{f.id} {f.kind}: no slow node named: {st['why']}"
    target = "" if st.get("slow_is_target") is None else (" (the fault's target)" if st["slow_is_target"]
                                                           else f" (NOT the fault's target, {st['target']})")
    ran = [f"got {x:.2f}× less of the CPU it asked for" if (x := st.get("cpu_slowdown")) else None,
           f"spent {x:.2f}× as long outside the collectives" if (x := st.get("compute_slowdown")) else None]
    return (f"{st['slow_node']} rank {st['slow_rank']}{target}, fault #{f.id} {f.kind}: {st['why']}"
            + (f"; against before the fault it {' and '.join(r for r in ran if r)}" if any(ran) else ""))


def slow_node_rows(report: Report) -> list[tuple[str, str]]:
    return [("slow node (per-rank step timing)", line) for f in report.result.faults
            if (line := slow_node_line(f)) is not None]


STEP_TIMING_INTRO = ("Median per step, before / during / after the fault. In a synchronous job every rank's step "
                     "lasts as long as the slowest one's; what names the slow rank is how it spent the step: waiting "
                     "for a CPU (runnable without one: CPU quota, contention; the probe reads the kernel's schedstat, "
                     "its threads summed, per second of the step) "
                     "or outside the collectives (step time − time in all-reduces, from the workload), while the "
                     "ranks it holds up wait inside the collectives.")
STEP_TIMING_COLUMNS = ("rank", "node", "step (ms)", "waiting for a CPU (s per s)", "outside collectives (ms)",
                       "steps")


def _three(x: dict[str, Any], name: str, scale: float = 1000.0, digits: int = 1) -> str:
    def one(w: str) -> str:
        v = (x.get(w) or {}).get(name)
        return "—" if v is None else f"{v * scale:.{digits}f}"
    return " / ".join(one(w) for w in ("before", "during", "after"))


def step_timing_rows(st: dict[str, Any]) -> list[list[str]]:
    """One row per rank of a fault's step timing (before / during / after in each cell)."""
    rows = []
    for x in st["ranks"]:
        mark = " ◀ slow" if (x["node"], x["rank"]) == (st.get("slow_node"), st.get("slow_rank")) else ""
        rows.append([f"{x['rank']}{mark}", x["node"], _three(x, "step_s"), _three(x, "starved", 1.0, 2),
                     _three(x, "compute_s"), " / ".join(str((x.get(w) or {}).get("steps", 0))
                                                        for w in ("before", "during", "after"))])
    return rows


def step_timing_node_rows(st: dict[str, Any]) -> list[list[str]]:
    """Per node (its ranks' steps pooled), when some node runs more than one rank; else none (the rank rows say it)."""
    if len(st.get("nodes", [])) >= len(st["ranks"]):
        return []
    return [[f"{x['node']}{' ◀ slow' if x['node'] == st.get('slow_node') else ''}", _three(x, "step_s"),
             _three(x, "starved", 1.0, 2), _three(x, "compute_s"),
             " / ".join(str((x.get(w) or {}).get("steps", 0)) for w in ("before", "during", "after"))]
            for x in st["nodes"]]


def environment_rows(report: Report) -> list[tuple[str, str]]:
    env = dict(report.result.environment)
    settings = env.pop("elastic_settings", {})
    rows = [(k, str(v)) for k, v in env.items()]
    rows += [(f"elastic: {k}", str(v)) for k, v in settings.items()]
    mechanisms = sorted({f.mechanism for f in report.result.faults if f.mechanism})
    rows += [("fault mechanism", m) for m in mechanisms]
    skew = skew_sentence(dict(report.result.channel) if report.result.channel is not None else None)
    if skew:  # the nodes' clocks against the engine's, as the history channel measured them
        rows.append(("history channel", skew))
    return rows


def advice_lines(report: Report) -> list[str]:
    a = report.advice
    if not a:
        return []
    lines = [f"Measured checkpoint save cost C = {a['save_cost_s'] * 1000:.1f} ms (median)."]
    if a.get("current_interval_s"):
        lines.append(f"Current interval: {a['current_interval_s']:.2f} s of training between checkpoints.")
    if a.get("mtbf_s") is None:
        lines.append(a["note"])
        return lines
    lines.append(f"For MTBF M = {a['mtbf_s']:g} s and restart cost R = {a['restart_cost_s']:.1f} s: "
                 f"Young √(2CM) = {a['young_interval_s']:.1f} s, Daly = {a['daly_interval_s']:.1f} s"
                 + (f" (≈ {a['daly_interval_steps']} steps)." if a.get("daly_interval_steps") else "."))
    if a.get("warning"):
        lines.append(a["warning"])
    if a.get("expected_goodput_at_current") is not None:
        lines.append(f"Expected goodput: {a['expected_goodput_at_current']:.4f} at the current interval, "
                     f"{a['expected_goodput_at_daly']:.4f} at Daly's.")
    return lines


BREAKDOWN_INTRO = ("Each phase ends at a mark in the history: torchrun's agent (detection, rendezvous: "
                   "chaos.agent_log), the probe (worker start, worker init, checkpoint load), the first step. "
                   "A missing mark merges its phase into the next.")


def breakdown_rows(b: RecoveryBreakdown) -> list[tuple[str, str, str]]:
    """(phase, seconds, share of the recovery) rows of one breakdown."""
    total = b.recovery_s
    return [(name, fmt(s, " s"), f"{100 * s / total:.0f}%" if s is not None and total else "—")
            for name, s in b.phases]


def breakdown_notes(b: RecoveryBreakdown) -> list[str]:
    """What was not measured and why, then what would shrink the largest part (analysis wrote the advice)."""
    lines = [f"not measured separately: {x['phase']} ({x['why']})" for x in b.not_measured]
    if b.agent_rounds:
        lines.append(f"rendezvous rounds the agents completed during the recovery: {b.agent_rounds}")
    if b.floor_s and b.recovery_s is not None:
        lines.append(f"floor: the job's own first start (launch to first step) took {b.floor_s:.1f} s; this "
                     f"recovery is {b.recovery_s / b.floor_s:.1f}x that")
    sched: Mapping[str, Any] = b.scheduler or {}
    if "host_not_responding_after_s" in sched:
        lines.append(f"Slurm said a host does not respond {sched['host_not_responding_after_s']:.1f} s after the "
                     "fault")
    if "host_down_after_s" in sched:
        lines.append(f"Slurm marked {sched.get('host_down')} {sched.get('host_down_state')} "
                     f"{sched['host_down_after_s']:.1f} s after the fault (its own detection)")
    if "replacement_step_s" in sched:
        lines.append(f"replacement step on {sched.get('replacement_host')}: srun "
                     f"{sched['replacement_srun_after_s']:.1f} s after the fault, running "
                     f"{sched['replacement_step_s']:.2f} s later (Slurm's part)")
    if b.advice:
        lines.append(b.advice)
    return lines
