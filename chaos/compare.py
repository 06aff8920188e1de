"""``chaos compare``: the distributed-vs-centralized table, with measured figures instead of adjectives.

Each column is one run of the same workload under the same fault plan in another cluster shape (centralized,
elastic with tuned settings, elastic with torchrun's defaults ...). Every figure is computed by ``chaos.analysis``
from that run's history (this module only lays them out); the conclusions under the table are sentences
computed from those figures, nothing else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from html import escape
from pathlib import Path, PurePath
from typing import Any

from chaos.analysis.breakdown import RecoveryBreakdown, phase_costs, phase_settings
from chaos.analysis.noise import CHANGED_WORLD_RTOL
from chaos.analysis.run import RunAnalysis, analyze_run
from chaos.analysis.throughput import training_setup
from chaos.compare_names import run_report_name, short_names, where
from chaos.compare_rounds import ROUNDS_SUBDIR, is_federated, write_round_comparison
from chaos.loading import ScenarioInvalid, load_bounded_yaml
from chaos.paths import read_small, write_output
from chaos.registry import PluginError, launcher_class
from chaos.reports import write_report
from chaos.reports.compare_plots import figures
from chaos.reports.html import CSS
from chaos.reports.plots import to_svg

# The final loss of a column may differ from the one-worker column's by this much, relative: the shipped workload
# trains on the same global batches at any world size, so only the order of every sum changes (the tolerance the
# golden comparison uses when the world size changed, chaos.analysis.noise).
LOSS_RTOL = CHANGED_WORLD_RTOL


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
    # what each node got (result.json `resources`: cpus_per_node, host_cpus, nodes, oversubscribed); None: not
    # recorded (a run from before schema 8)
    resources: dict[str, Any] | None = None
    final_step: int | None = None
    final_loss: float | None = None
    # the shipped workload's model-deciding arguments (chaos.analysis.throughput.training_setup); None: unknown
    training: dict[str, Any] | None = field(default=None)
    # the largest recovery phase's name and seconds (recovery_largest is its text)
    # run start → the training's last step first completed (chaos.analysis.throughput.time_to_result)
    time_to_result_s: float | None = None
    largest_phase: str | None = None
    largest_s: float | None = None
    # what setting the cluster up takes, derived from the run's plan.yaml (setup_steps); None: no plan recorded
    setup: list[str] | None = None
    # the settings in force that bound recovery phases (plan.yaml's elastic_settings, min_nodes,
    # node_restart.delay_s); None: no plan recorded
    settings: dict[str, Any] | None = None
    # a launcher's own words for what bounds its detection and restart (Launcher.levers, from run_started)
    levers: dict[str, str] | None = None
    # the column's short name in the table, the bullets and the plots (with_short); the legend maps it to label
    short: str = ""
    # who recovers the job and what its loss stops (the launcher's orchestrator and single_point_of_failure, from
    # run_started's environment, else the launcher's class); None: not recorded and the launcher is not installed
    launcher: str | None = None
    orchestrator: str | None = None
    single_point: str | None = None
    restarts: int | None = None  # worker restarts the run counted (result.json)

    @property
    def tag(self) -> str:
        """What the page calls the column: its short name (the long label is in the legend, once)."""
        return self.short or self.label


def with_short(columns: list[Column]) -> list[Column]:
    """The columns, each with its short name (copies where it was not set; set ones are kept)."""
    if all(c.short for c in columns):
        return columns
    return [c if c.short else replace(c, short=name) for c, name in zip(columns, short_names(columns), strict=True)]


def measure(run: Path | RunAnalysis) -> Column:
    """One column: the run's figures as ``chaos.analysis`` computed them (see ``chaos.analysis.throughput``)."""
    analysis = run if isinstance(run, RunAnalysis) else analyze_run(run)
    scenario, result, figures = analysis.scenario, analysis.model, analysis.throughput
    c = scenario.cluster
    return Column(
        label=f"{scenario.name} ({c.mode}, {c.nodes}×{c.procs_per_node}"
              + (f", {c.preset}" if c.mode == "elastic" else "")
              + (f", {c.resources.cpus} cpu/node" if c.resources.cpus is not None else "") + ")",
        scenario=scenario.name, run_dir=str(analysis.run_dir), verdict=result.verdict, mode=c.mode,
        nodes=c.nodes, world_size=c.nodes * c.procs_per_node,
        steps_per_s=figures.steps_per_s, samples_per_s=figures.samples_per_s,
        comm_share=figures.comm_share, time_to_first_step_s=figures.time_to_first_step_s,
        recovery_s=figures.recovery_s, lost_work_s=figures.lost_work_s, lost_steps=figures.lost_steps,
        goodput=result.goodput, node_seconds_per_step=figures.node_seconds_per_step,
        duration_s=result.duration_s, machine=_machine(result.environment),
        levers=dict(result.environment.get("levers") or {}) or None,
        **_first_breakdown(analysis.breakdowns),
        resources=dict(result.resources) if result.resources is not None else None,
        final_step=analysis.final[0], final_loss=analysis.final[1],
        training=training_setup(scenario.workload), time_to_result_s=analysis.time_to_result_s,
        **_from_plan(analysis.run_dir / "plan.yaml", scenario),
        **_recovery_model(result.environment), restarts=result.restarts,
    )


def _recovery_model(env: Mapping[str, Any]) -> dict[str, Any]:
    """The launcher, its orchestrator and its single point of failure: the run's own record, else the installed
    launcher's class (a run recorded before the launcher declared it)."""
    name = env.get("launcher")
    name = name if isinstance(name, str) else None
    cls: Any = None
    if name is not None:
        try:
            cls = launcher_class(name)
        except PluginError:  # a launcher not installed here: only what the run recorded
            cls = None
    orchestrator = env.get("orchestrator") or getattr(cls, "orchestrator", None) or None
    single = env.get("single_point_of_failure") or getattr(cls, "single_point_of_failure", None)
    return {"launcher": name, "orchestrator": orchestrator, "single_point": single}


# The engine's plan.yaml is a few KB; anything past this is not one. Its lists can be long: resources.host_cpus
# names every core of the host.
PLAN_MAX_BYTES, PLAN_MAX_LIST = 1 << 20, 1 << 16


def _from_plan(path: Path, scenario: Any) -> dict[str, Any]:
    """The column's setup steps and recovery settings, from the plan the run was started with."""
    try:  # a damaged plan (not UTF-8, a FIFO, an alias bomb, another shape) leaves the column without its setup
        plan = load_bounded_yaml(read_small(path, PLAN_MAX_BYTES).decode(), str(path), max_list=PLAN_MAX_LIST)
    except (OSError, UnicodeDecodeError, ScenarioInvalid):
        return {}
    if not isinstance(plan, dict):
        return {}
    c = scenario.cluster
    restart = c.node_restart.model_dump(mode="json")
    try:
        settings = dict(plan.get("elastic_settings") or {}) if c.mode == "elastic" else {}
        setup = setup_steps(plan, restart)
    except (AttributeError, TypeError, ValueError, KeyError):  # a plan.yaml of another shape than the engine writes
        return {}
    if c.mode == "elastic":
        settings["min_nodes"] = c.min_nodes or c.nodes
    if restart.get("policy") == "on-failure":
        settings["node_restart.delay_s"] = restart.get("delay_s")
    return {"setup": setup, "settings": settings}


def _arg(argv: list[str], name: str) -> str | None:
    """The value of ``--name=value`` (or ``--name value``) in a command line."""
    for i, a in enumerate(argv):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def setup_steps(plan: dict[str, Any], node_restart: dict[str, Any] | None = None) -> list[str]:
    """What a cluster of this shape takes to set up, derived from the plan the run was started with (plan.yaml:
    its nodes' command lines, the rendezvous store or servers, the pinned cores, the checkpoint directory) and the
    scenario's node_restart: hosts to provision, services to run, processes to launch, the rendezvous endpoint,
    the network between hosts, shared checkpoint storage, a supervisor that replaces a failed host."""
    nodes = [n for n in plan.get("nodes") or [] if n.get("role", "node") == "node"]
    store, servers = plan.get("store"), plan.get("servers") or []
    if not nodes:
        return []
    per = (plan.get("resources") or {}).get("cpus_per_node")
    steps = [f"provision {len(nodes)} host{'s' if len(nodes) > 1 else ''}"
             + (f" ({per} core{'s' if per > 1 else ''}{' each' if len(nodes) > 1 else ''})" if per else "")]
    argv = [str(a) for a in nodes[0].get("argv") or []]
    script = next((PurePath(a).name for a in argv[1:] if a.endswith(".py")), "the training script")
    backend = _arg(argv, "--rdzv-backend")
    own = plan.get("launcher")
    if own not in (None, "torchrun", "process"):  # a launcher of its own: its node processes, by name
        launcher = f"{own} node process"
        steps.append(f"start the {own} launcher's node process on each of the {len(nodes)} hosts (the job: "
                     f"{script})" if len(nodes) > 1 else f"start the {own} launcher's node process ({script})")
    elif backend is not None:
        if store:
            steps.append("run the rendezvous store on a host of its own")
        if servers:
            steps.append(f"run {len(servers)} {backend} server{'s' if len(servers) > 1 else ''} for the rendezvous")
        launcher = "torchrun"
        steps.append(f"start torchrun on each of the {len(nodes)} hosts (--nnodes={_arg(argv, '--nnodes')}, "
                     f"--nproc-per-node={_arg(argv, '--nproc-per-node')}, {script})" if len(nodes) > 1 else
                     f"start torchrun on the host (--nnodes={_arg(argv, '--nnodes')}, {script})")
        hosted = [n["name"] for n in nodes if "is_host=true" in (_arg([str(a) for a in n.get("argv") or []],
                                                                        "--rdzv-conf") or "")]
        where = ("the store host" if store else f"the {backend} servers" if servers
                 else f"{hosted[0]}'s TCP store" if hosted else "its endpoint")
        steps.append(f"a {backend} rendezvous endpoint ({where}) that every host's torchrun is given and can reach")
    elif "torch.distributed.run" in argv:
        launcher = "torchrun"
        steps.append(f"start torchrun --standalone on the host (--nproc-per-node={_arg(argv, '--nproc-per-node')}, "
                     f"{script})")
    else:
        launcher = "process"
        steps.append(f"start 1 process on the host ({script})")
    hosts = len(nodes) + (1 if store else 0)
    if hosts > 1:
        ports = ("the rendezvous port and the process group's ports" if own in (None, "torchrun", "process")
                 else f"the {own} cluster's ports and the process group's ports")
        steps.append(f"a network between the {hosts} hosts ({ports} open between them)")
    if plan.get("checkpoint_dir"):
        steps.append("checkpoint storage every host reads and writes (shared)" if len(nodes) > 1
                     else "checkpoint storage on the host")
    if node_restart and node_restart.get("policy") == "on-failure":
        steps.append(f"a supervisor that restarts a failed host's {launcher} (after {node_restart.get('delay_s'):g} s, "
                     f"at most {node_restart.get('max_restarts')} times)")
    return steps


def _extremes(columns: list[Column], attr: str) -> tuple[Column, Column] | None:
    """The columns with the lowest and the highest measured ``attr``; None when fewer than two measured it."""
    measured = [c for c in columns if getattr(c, attr) is not None]
    if len(measured) < 2:
        return None
    return min(measured, key=lambda c: getattr(c, attr)), max(measured, key=lambda c: getattr(c, attr))


def _first_breakdown(breakdowns: list[RecoveryBreakdown]) -> dict[str, Any]:
    """The first disruptive fault's phases and its largest part, as the column shows them."""
    for b in breakdowns:
        if b.largest:
            big = b.largest
            return {"recovery_phases": [tuple(p) for p in b.phases],
                    "recovery_largest": f"{big['phase']}: {big['seconds']:.1f} s",
                    "largest_phase": big["phase"], "largest_s": big["seconds"]}
    return {}


def _machine(env: Mapping[str, Any]) -> str:
    return (f"{env.get('cpus', '?')} CPU cores, {env.get('platform', '?')}, torch {env.get('torch', '?')}, "
            f"Python {env.get('python', '?')}")


ROWS = [("throughput (steps/s, fault-free median)", "steps_per_s", "{:.1f}"),
        ("throughput (samples/s)", "samples_per_s", "{:.0f}"),
        ("communication share of a step (median)", "comm_share", "{:.0%}"),
        ("start → first step", "time_to_first_step_s", "{:.1f} s"),
        ("time to result (start → last step, faults included)", "time_to_result_s", "{:.1f} s"),
        ("recovery time (first fault)", "recovery_s", "{:.1f} s"),
        ("recovery, largest part", "recovery_largest", "{}"),
        ("lost work (first fault)", "lost_work_s", "{:.2f} s"),
        ("lost steps (first fault)", "lost_steps", "{}"),
        ("goodput under the fault plan", "goodput", "{:.2f}"),
        ("cost (node-seconds per useful step)", "node_seconds_per_step", "{:.3f}"),
        ("verdict", "verdict", "{}")]


def resources_text(col: Column) -> str:
    """What each node of the column had, as recorded in its result.json."""
    r = col.resources
    if r is None:
        return "not recorded"
    host = len(r.get("host_cpus") or [])
    if r.get("cpus_per_node") is None:
        return f"not pinned: {col.nodes} node(s) on any of {host} host cores"
    cores = "; ".join(f"{name}: {','.join(map(str, c))}" for name, c in (r.get("nodes") or {}).items())
    return (f"{r['cpus_per_node']} core(s) pinned per node ({cores}) of {host}"
            + (", oversubscribed" if r.get("oversubscribed") else ""))


def fairness(columns: list[Column]) -> dict[str, list[str]]:
    """Why each column is not a fair comparison (label → reasons; none: fair): its nodes share cores (not pinned
    with more than one node, or oversubscribed), its resources were not recorded, or it is not pinned while other
    columns are (its one node may use every core)."""
    any_pinned = any(c.resources and c.resources.get("cpus_per_node") is not None for c in columns)
    out: dict[str, list[str]] = {}
    for c in columns:
        r, why = c.resources, []
        if r is None:
            why.append("its resources were not recorded (a run from before result.json schema 8)")
        elif r.get("cpus_per_node") is None:
            host = len(r.get("host_cpus") or [])
            if c.nodes > 1:
                why.append(f"its {c.nodes} nodes are not pinned and share the host's {host} cores")
            elif any_pinned:
                why.append(f"its node is not pinned (it may use all {host} host cores) while other columns' are")
        elif r.get("oversubscribed"):
            why.append(f"oversubscribed: {c.nodes} nodes × {r['cpus_per_node']} core(s) on "
                       f"{len(r.get('host_cpus') or [])} host cores, so nodes share cores")
        out[c.label] = why
    return out


def loss_vs_reference(columns: list[Column]) -> tuple[Column | None, dict[str, float | None]]:
    """The reference column (the smallest world size whose final loss is known, one worker when there is one)
    and each column's relative final-loss difference from it; None where the two did not train the same model
    setup (another global batch, step count, seed ...) or the loss or setup is unknown."""
    known = [c for c in columns if c.final_loss is not None and c.training is not None
             and c.final_step == c.training.get("steps")]
    if not known:
        return None, {}
    ref = min(known, key=lambda c: c.world_size)
    diffs: dict[str, float | None] = {}
    for c in columns:
        same = c in known and c.training == ref.training
        diffs[c.label] = ((c.final_loss or 0) - (ref.final_loss or 0)) / abs(ref.final_loss or 1) if same else None
    return ref, diffs


def _speedup(columns: list[Column]) -> tuple[Column | None, dict[str, float | None]]:
    """Steps/s of each column over the one-node column's (the smallest node count with a measured pace)."""
    paced = [c for c in columns if c.steps_per_s]
    if not paced:
        return None, {}
    ref = min(paced, key=lambda c: (c.nodes, c.world_size))
    return ref, {c.label: (c.steps_per_s / (ref.steps_per_s or 1)) if c.steps_per_s else None for c in columns}


def table(columns: list[Column]) -> list[list[str]]:
    columns = with_short(columns)
    flags = fairness(columns)
    rows = [["resources per node", *[resources_text(c) for c in columns]],
            ["fair comparison", *["no: " + "; ".join(flags[c.label]) if flags[c.label] else "yes"
                                  for c in columns]]]
    for title, attr, pattern in ROWS:
        row = [title]
        for col in columns:
            value = getattr(col, attr)
            row.append("—" if value is None else pattern.format(value))
        rows.append(row)
        if attr == "samples_per_s":
            ref, speedups = _speedup(columns)
            rows.append([f"speedup over {ref.tag if ref else 'one node'} (steps/s)",
                         *[f"{v:.2f}×" if (v := speedups.get(c.label)) is not None else "—" for c in columns]])
        if attr == "recovery_largest":
            rows.append(["recovery, what shrinks the largest part", *[shrinks(c) for c in columns]])
    batches = {c.training.get("global_batch") for c in columns if c.training}
    rows.append([f"final loss (global batch {'/'.join(str(b) for b in sorted(batches)) or '?'})",
                 *[f"{c.final_loss:.6g} (step {c.final_step})" if c.final_loss is not None else "—"
                   for c in columns]])
    ref, diffs = loss_vs_reference(columns)
    rows.append([f"final loss vs {ref.tag if ref else 'the one-worker column'} (tolerance {LOSS_RTOL:g} relative)",
                 *["reference" if c is ref else (f"{d:+.2e} ({'within' if abs(d) <= LOSS_RTOL else 'BEYOND'})"
                                                 if (d := diffs.get(c.label)) is not None else "—")
                   for c in columns]])
    rows.append(["setup steps (from the run's plan)",
                 *[f"{len(c.setup)}: " + "; ".join(c.setup) if c.setup else "not recorded (no plan.yaml)"
                   for c in columns]])
    rows.append(rows.pop(next(i for i, r in enumerate(rows) if r[0] == "verdict")))  # the verdict stays last
    return rows


def _setting(settings: dict[str, Any] | None, key: str) -> str:
    value = (settings or {}).get(key)
    if value is None:
        return "not recorded"
    return f"{value:g} s" if key.endswith("_s") and isinstance(value, (int, float)) else str(value)


def shrinks(c: Column) -> str:
    """The settings (with this run's values) that bound the column's largest recovery phase, or what else shrinks
    it when no setting does."""
    if c.largest_phase is None:
        return "—"
    if c.levers:  # a launcher of its own (Ray): its detection and restart are bounded by what it says
        said = [c.levers[p] for p in c.largest_phase.split(" + ") if p in c.levers]
        if said:
            return "; ".join(said + phase_costs(c.largest_phase))
    keys = phase_settings(c.largest_phase, c.mode)
    parts = [f"{k} ({_setting(c.settings, k)})" for k in keys] + phase_costs(c.largest_phase)
    return "; ".join(parts) or "—"


def recovery_levers(columns: list[Column]) -> list[str]:
    """Per column: the largest part of recovery, the settings that bound it, and their measured effect where
    another column of the same mode ran with other values of those settings (its time in the same phase)."""
    columns = with_short(columns)
    out = []
    for c in columns:
        if c.largest_phase is None or c.largest_s is None or not c.recovery_s:
            continue
        phase, sec = c.largest_phase, c.largest_s
        keys = phase_settings(phase, c.mode)
        text = (f"On {c.tag} the largest part of the {c.recovery_s:.1f} s recovery is {phase}: {sec:.1f} s "
                f"({sec / c.recovery_s:.0%})")
        if keys:
            text += "; the settings that bound it: " + ", ".join(f"{k} = {_setting(c.settings, k)}" for k in keys)
        if costs := phase_costs(phase):
            text += "; " + ("what else shrinks it: " if keys else "no setting bounds it; what shrinks it: ") \
                + ", ".join(costs)
        effects = []
        for o in columns:
            other = dict(o.recovery_phases or []).get(phase)
            if o is c or o.mode != c.mode or other is None or c.settings is None or o.settings is None:
                continue
            differ = [k for k in keys if o.settings.get(k) != c.settings.get(k)]
            if not differ:
                continue
            also = [k for k in sorted(set(c.settings) | set(o.settings))
                    if k not in keys and o.settings.get(k) != c.settings.get(k)]
            effects.append(f"{o.tag}, with " + ", ".join(f"{k} = {_setting(o.settings, k)}" for k in differ)
                           + f", spent {other:.1f} s in {phase}: {abs(sec - other):.1f} s "
                           + ("less" if other < sec else "more")
                           + (f" (the two runs also differ in {', '.join(also)})" if also else ""))
        if effects:
            text += ". Measured effect: " + "; ".join(effects)
        elif keys:
            text += ". Their effect is not measured here: no other column of this mode ran with other values"
        out.append(text + ".")
    return out


def setup_conclusion(columns: list[Column]) -> str | None:
    """Which shape takes the fewest setup steps, and what the one that takes the most adds."""
    columns = with_short(columns)
    known = [c for c in columns if c.setup]
    if len(known) < 2:
        return None
    few = min(known, key=lambda c: len(c.setup or []))
    many = max(known, key=lambda c: len(c.setup or []))
    if len(many.setup or []) == len(few.setup or []):
        return f"Every shape takes {len(few.setup or [])} setup steps (see the table)."
    extra = [step for step in many.setup or [] if step not in (few.setup or [])]
    return (f"Setting up {few.tag} takes {len(few.setup or [])} steps; {many.tag} takes "
            f"{len(many.setup or [])}, differing in: " + "; ".join(extra) + ".")


def conclusions(columns: list[Column]) -> list[str]:
    """Sentences derived from the measured figures (and recorded resources) only; columns named by their short
    names (the legend gives each one's long label)."""
    columns = with_short(columns)
    out: list[str] = []
    flags = fairness(columns)
    unfair = {label: why for label, why in flags.items() if why}
    if unfair:
        tags = {c.label: c.tag for c in columns}
        out.append("Not a fair comparison: " + "; ".join(f"{tags[label]}: {', '.join(why)}"
                                                          for label, why in unfair.items())
                   + ". Speed and cost figures of those columns describe how this host shares its cores, not what "
                   "more machines would give.")
    elif columns and all(c.resources for c in columns):
        out.append("A fair comparison: every node ran on cores of its own ("
                   + "; ".join(f"{c.tag}: {resources_text(c)}" for c in columns) + ").")

    def mark(*cs: Column) -> str:
        return " (not a fair comparison, see above)" if any(c.label in unfair for c in cs) else ""

    ranked = time_to_result_ranking(columns)
    first = ranked[0] if ranked else None
    if ranked:
        out.append(_ranking_sentence(ranked) + mark(*ranked) + ".")
        out.append("To the result, " + ", ".join(
            f"{c.tag} held {c.nodes} node{'s' if c.nodes > 1 else ''} × {c.time_to_result_s:.1f} s = "
            f"{c.nodes * (c.time_to_result_s or 0):.1f} node-seconds" for c in ranked) + mark(*ranked) + ".")

    fast = [c for c in columns if c.steps_per_s]
    if len(fast) >= 2:
        best = max(fast, key=lambda c: c.steps_per_s or 0)
        worst = min(fast, key=lambda c: c.steps_per_s or 0)
        out.append(f"{best.tag} is the fastest: {best.steps_per_s:.1f} steps/s, "
                   f"{(best.steps_per_s or 0) / (worst.steps_per_s or 1):.1f}× {worst.tag}{mark(best, worst)}.")
        central = [c for c in fast if c.mode == "centralized"]
        dist = [c for c in fast if c.mode == "elastic" and c.comm_share is not None]
        if central and dist:
            c0, d0 = central[0], max(dist, key=lambda c: c.steps_per_s or 0)
            if (c0.steps_per_s or 0) > (d0.steps_per_s or 0):
                out.append(f"For this model size one node is faster ({c0.steps_per_s:.1f} against "
                           f"{d0.steps_per_s:.1f} steps/s): communication alone is {d0.comm_share:.0%} of a "
                           f"distributed step on {d0.world_size} workers{mark(c0, d0)}.")
            else:
                out.append(f"Distributing pays off: {d0.world_size} workers reach {d0.steps_per_s:.1f} steps/s "
                           f"against {c0.steps_per_s:.1f}, with communication at {d0.comm_share:.0%} of a "
                           f"step{mark(c0, d0)}.")
    if (ends := _extremes(columns, "recovery_s")) is not None:
        quick, slow = ends
        ratio = (slow.recovery_s or 0) / (quick.recovery_s or 1)
        out.append(f"Recovery from the fault took {quick.recovery_s:.1f} s on {quick.tag} and "
                   f"{slow.recovery_s:.1f} s on {slow.tag} ({ratio:.1f}×).")
        if (phase := _widest_gap(quick, slow)) is not None:
            name, q, w = phase
            out.append(f"The recovery phase that differs most is {name}: {q:.1f} s on {quick.tag}, {w:.1f} s on "
                       f"{slow.tag} ({w - q:.1f} s of the {(slow.recovery_s or 0) - (quick.recovery_s or 0):.1f} s "
                       f"difference).")
    out += recovery_levers(columns)
    gp = [c for c in columns if c.goodput is not None]
    if len(gp) >= 2:
        best = max(gp, key=lambda c: c.goodput or 0)
        text = f"Goodput under this fault plan is highest on {best.tag} ({best.goodput:.2f})"
        if first is not None and best is not first:
            text += (f", yet {first.tag} finished first: goodput measures each run against its own fault-free pace "
                     "(useful steps × its median step ÷ its wall time), not against the other runs, so it does not "
                     "rank them")
            if best.steps_per_s and first.steps_per_s and best.steps_per_s < first.steps_per_s:
                text += (f"; {best.tag}'s steps are slower ({best.steps_per_s:.1f} against {first.steps_per_s:.1f} "
                         "steps/s), so its recovery is a smaller share of its longer run")
        out.append(text + ".")
    if (ends := _extremes(columns, "node_seconds_per_step")) is not None:
        cheap, dear = ends
        out.append(f"Per useful step, {cheap.tag} costs {cheap.node_seconds_per_step:.3f} node-seconds, "
                   f"{(dear.node_seconds_per_step or 0) / (cheap.node_seconds_per_step or 1):.1f}× less "
                   f"than {dear.tag}.")
    ref, diffs = loss_vs_reference(columns)
    others = [(c, d) for c in columns if c is not ref and (d := diffs.get(c.label)) is not None]
    if ref is not None and others:
        batch = (ref.training or {}).get("global_batch")
        worst_c, worst_d = max(others, key=lambda cd: abs(cd[1]))
        verdict = ("within it: more workers did not change the model" if abs(worst_d) <= LOSS_RTOL
                   else "beyond it: the model differs with the world size")
        out.append(f"At the same global batch ({batch} samples per step, {ref.final_step} steps), the final loss "
                   f"differs from {ref.tag} (world size {ref.world_size}, {ref.final_loss:.6g}) by at most "
                   f"{abs(worst_d):.2e} relative, on {worst_c.tag} (world size {worst_c.world_size}, "
                   f"{worst_c.final_loss:.6g}); tolerance {LOSS_RTOL:g}: {verdict}.")
    if (setup := setup_conclusion(columns)) is not None:
        out.append(setup)
    failed = [c for c in columns if c.verdict != "pass"]
    for c in failed:
        out.append(f"{c.tag} did not pass ({c.verdict}): its figures describe a failed run.")
    return out


# How each kind of job recovers from a lost node, by mode: the mechanism's name (what the orchestrator does);
# the run's figures say how long it took. A mode not listed is described by its launcher's orchestrator alone.
RECOVERY_MECHANISM = {
    "centralized": "restart of the whole job: the one node is the job, and the engine starts it again",
    "elastic": "elastic regroup: the surviving torchrun agents notice the lost node, run a new rendezvous and "
               "restart their workers in the new group",
    "ray": "group restart: Ray Train ends the whole worker group and starts a new one once it can place it",
    "tf-multiworker": "relaunch by the supervisor: MultiWorkerMirroredStrategy is not elastic and nothing in "
                      "TensorFlow restarts a worker; the survivors fail in their next collective and the "
                      "supervisor relaunches every worker",
}
# Where the comparison has no column yet for a framework the project's question names, what would fill it.
PENDING_COLUMNS = {
    "flower": "Flower (federated learning): it counts rounds, not steps, so its runs are compared on their own "
              "page, with rounds instead of steps (`chaos compare scenarios/compare/flower-*.yaml`: "
              "reports/compare/flower/compare.html; docs/flower.md): a lost client is dropped from the next round's "
              "sample, and the server is the single "
              "point of failure (its crash ends training unless something restarts it from a saved global model)",
}


def recovery_models(columns: list[Column], rounds_page: str | None = None) -> list[str]:
    """Per column: how its framework recovered from the fault (the mechanism, who did it, the measured recovery,
    the steps trained again, the largest part) and which node, if any, it cannot lose. ``rounds_page``: where
    this comparison's federated runs were written (their own page), if it had any."""
    columns = with_short(columns)
    out = []
    for c in columns:
        how = RECOVERY_MECHANISM.get(c.mode) or f"{c.mode}"
        text = f"{c.tag}: {how}"
        if c.orchestrator:
            text += f" (here: {c.orchestrator})"
        measured = []
        if c.recovery_s is not None:
            measured.append(f"first new step {c.recovery_s:.1f} s after the fault")
        if c.lost_steps is not None:
            measured.append(f"{c.lost_steps} steps trained again")
        if c.largest_phase and c.largest_s is not None:
            measured.append(f"largest part {c.largest_phase} ({c.largest_s:.1f} s)")
        if c.restarts is not None:
            measured.append(f"{c.restarts} worker restart{'s' if c.restarts != 1 else ''}")
        text += ". Measured: " + ", ".join(measured) if measured else ". Recovery not measured"
        text += (f". Single point of failure: {c.single_point}" if c.single_point else
                 ". Single point of failure: none named by its launcher")
        out.append(text + ".")
    present = {c.launcher for c in columns} | {c.mode for c in columns}
    out += [f"Not in this comparison: {why}." for name, why in PENDING_COLUMNS.items() if name not in present
            and not (name == "flower" and rounds_page)]
    if rounds_page:
        out.append(f"The Flower runs of this comparison count rounds, not steps: they are on their own page, "
                   f"{rounds_page}.")
    return out


def time_to_result_ranking(columns: list[Column]) -> list[Column]:
    """The columns with a time to result, first to finish first; none when fewer than two have one. Time to
    result (start → the last step first completed, faults included) is what a user waits for; goodput, relative
    to each run's own pace, does not rank runs of different shapes."""
    timed = sorted((c for c in columns if c.time_to_result_s is not None), key=lambda c: c.time_to_result_s or 0)
    return timed if len(timed) >= 2 else []


def _ranking_sentence(ranked: list[Column]) -> str:
    first, rest = ranked[0], ranked[1:]
    steps = {c.final_step for c in ranked}
    same = len(steps) == 1 and None not in steps
    what = f"the same {first.final_step} steps" if same else "its steps"
    text = (f"Ranked by time to result (wall time from the start to the last step, faults included): {first.tag} "
            f"finished {what} in {first.time_to_result_s:.1f} s, " + ", ".join(
                f"{(c.time_to_result_s or 0) / (first.time_to_result_s or 1):.1f}× faster than {c.tag} "
                f"({c.time_to_result_s:.1f} s)" for c in rest))
    if not same:
        text += (" (the runs did not end at the same step: " + ", ".join(
            f"{c.tag} at {c.final_step if c.final_step is not None else '?'}" for c in ranked)
            + ", so these are not times to the same result)")
    return text


def _widest_gap(quick: Column, slow: Column) -> tuple[str, float, float] | None:
    """The recovery phase (measured in both runs) whose duration differs most between them, if it explains at
    least a tenth of the difference."""
    a = {n: v for n, v in quick.recovery_phases or [] if v is not None}
    b = {n: v for n, v in slow.recovery_phases or [] if v is not None}
    common = [n for n in a if n in b]
    if not common:
        return None
    name = max(common, key=lambda n: b[n] - a[n])
    # a phase that explains under a tenth of the difference says nothing about it (the two runs' other phases
    # are not comparable: e.g. a centralized restart has no rendezvous)
    difference = (slow.recovery_s or 0) - (quick.recovery_s or 0)
    return (name, a[name], b[name]) if b[name] - a[name] >= 0.1 * difference and b[name] > a[name] else None


def comparison_title(columns: list[Column]) -> str:
    """What the columns compare, from their modes: a comparison of two elastic shapes is not 'vs centralized'."""
    modes = {c.mode for c in columns}
    if modes == {"elastic", "centralized"}:
        return "distributed vs centralized"
    shapes = {"elastic": "distributed", "centralized": "centralized"}
    return f"{len(columns)} {' and '.join(sorted(shapes.get(m, m) for m in modes))} runs"


def same_runs(run_dirs: list[Path]) -> str | None:
    """Why these run directories cannot be compared side by side, or None: one directory given twice would be a
    column compared with itself, and two directories of one name would write one report over the other."""
    seen: dict[str, Path] = {}
    resolved: set[Path] = set()
    for d in run_dirs:
        real = d.resolve()
        if real in resolved:
            return f"{d} is given twice; a comparison needs different runs"
        resolved.add(real)
        name = real.name
        if name in seen:
            return (f"{seen[name]} and {d} have the same name, and each run's report beside the comparison is "
                    "named by its run directory; rename one of them")
        seen[name] = d
    return None


PLOT_TITLES = {"result": "Time to result and cost", "throughput": "Throughput over time",
               "recovery": "Recovery breakdown"}


def legend_rows(columns: list[Column], base: Path | None) -> list[list[str]]:
    """(short name, long label, verdict, report, run directory relative to the page) per column."""
    return [[c.tag, c.label, c.verdict, run_report_name(c.run_dir), where(c.run_dir, base)] for c in columns]


LEGEND_HEADER = ("column", "run (scenario, mode, nodes × processes, preset, cores)", "verdict", "report",
                 "run directory")


def render_markdown(columns: list[Column], base: Path | None = None, plots: dict[str, str] | None = None,
                    rounds_page: str | None = None) -> str:
    """The comparison as Markdown; ``base``: the directory it is written to (links relative to it); ``plots``:
    plot name → PNG file name beside it."""
    columns = with_short(columns)
    header = ["", *[c.tag for c in columns]]
    lines = [f"# torch-chaos comparison: {comparison_title(columns)}", "",
             "Same workload, same fault plan, different cluster shapes; every figure measured in the runs below.", "",
             f"Measured on: {columns[0].machine}." if columns else "", "",
             "| " + " | ".join(LEGEND_HEADER) + " |", "|" + "---|" * len(LEGEND_HEADER)]
    lines += [f"| {tag} | {label} | {verdict} | [{report}]({report}) | `{run}` |"
              for tag, label, verdict, report, run in legend_rows(columns, base)]
    lines += ["", "## Conclusions", "", *[f"- {s}" for s in conclusions(columns)], ""]
    lines += ["## How each recovered from the same fault", "",
              *[f"- {s}" for s in recovery_models(columns, rounds_page)], ""]
    for name, png in (plots or {}).items():
        lines += [f"## {PLOT_TITLES.get(name, name)}", "", f"![{name}]({png})", ""]
    lines += ["## Figures", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in table(columns)]
    return "\n".join(lines) + "\n"


def render_html(columns: list[Column], base: Path | None = None, plots: dict[str, str] | None = None,
                rounds_page: str | None = None) -> str:
    """The comparison as one self-contained page; ``plots``: plot name → inline SVG (no script, no request)."""
    columns = with_short(columns)
    head = "".join(f"<th>{escape(c.tag)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in table(columns))
    items = "".join(f"<li>{escape(s)}</li>" for s in conclusions(columns))
    models = "".join(f"<li>{escape(s)}</li>" for s in recovery_models(columns, rounds_page))
    if rounds_page:  # the federated runs' own page, beside this one: a link
        models = models.replace(f"{escape(rounds_page)}.</li>",
                                f"<a href='{escape(rounds_page)}'>{escape(rounds_page)}</a>.</li>")
    legend = "".join(f"<tr><td><b>{escape(tag)}</b></td><td>{escape(label)}</td><td>{escape(verdict)}</td>"
                     f"<td><a href='{escape(report)}'>{escape(report)}</a></td><td><code>{escape(run)}</code></td></tr>"
                     for tag, label, verdict, report, run in legend_rows(columns, base))
    figs = "".join(f"<h2>{escape(PLOT_TITLES.get(name, name))}</h2><figure id=plot-{escape(name)}>{svg}</figure>"
                   for name, svg in (plots or {}).items())

    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>torch-chaos comparison</title>"
            f"<style>{CSS}</style></head><body><h1>torch-chaos comparison: {escape(comparison_title(columns))}</h1>"
            f"<p>Same workload, same fault plan, different cluster shapes; every figure measured in the runs "
            f"below.</p><p>Measured on: {escape(columns[0].machine if columns else '')}.</p>"
            f"<table id=legend><thead><tr>{''.join(f'<th>{escape(h)}</th>' for h in LEGEND_HEADER)}</tr></thead>"
            f"<tbody>{legend}</tbody></table>"
            f"<h2>Conclusions</h2><ul>{items}</ul><h2>How each recovered from the same fault</h2>"
            f"<ul id=recovery-models>{models}</ul>{figs}<h2>Figures</h2>"
            f"<table id=figures><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table></body></html>\n")


def write_comparison(runs: list[Path] | list[RunAnalysis], output: Path) -> dict[str, Path]:
    """The comparison (HTML, Markdown, JSON) plus each run's own HTML report beside it, linked from the table.
    Runs given as directories are analysed here, all before anything is written. Federated runs (rounds, not
    steps) get a page of their own (chaos.compare_rounds): the whole comparison when every run is one, else
    ``output/flower/``, which the step page names; a round is never laid out as a step."""

    analyses = [r if isinstance(r, RunAnalysis) else analyze_run(r) for r in runs]  # one per run: column, report
    federated = [a for a in analyses if is_federated(a)]
    if federated and len(federated) == len(analyses):
        return write_round_comparison(federated, output)
    rounds_page = None
    if federated:
        analyses = [a for a in analyses if not is_federated(a)]
        page = write_round_comparison(federated, output / ROUNDS_SUBDIR)["html"]
        rounds_page = os.path.relpath(page, output)
    columns = with_short([measure(analysis) for analysis in analyses])
    output.mkdir(parents=True, exist_ok=True)
    for analysis in analyses:
        # a name chosen here, in a directory that may hold anything: a link under it is replaced, never followed
        write_report(analysis, "html", output / run_report_name(analysis.run_dir), out_named_by_user=False)
    paths = {"md": output / "compare.md", "html": output / "compare.html", "json": output / "compare.json"}

    svgs: dict[str, str] = {}
    files: dict[str, str] = {}
    for name, fig in figures(columns, analyses).items():  # drawn once: inside compare.html, beside compare.md
        svgs[name] = to_svg(fig)  # closes the figure
        svg = output / f"compare-{name}.svg"
        write_output(svg, svgs[name])
        files[name] = svg.name
    write_output(paths["md"], render_markdown(columns, output, files, rounds_page))
    write_output(paths["html"], render_html(columns, output, svgs, rounds_page))
    write_output(paths["json"], json.dumps({
        "columns": [asdict(c) | {"run_dir": where(c.run_dir, output)} for c in columns],
        "legend": {c.tag: c.label for c in columns}, "conclusions": conclusions(columns),
        "recovery_models": recovery_models(columns, rounds_page),
        **({"rounds_page": rounds_page} if rounds_page else {})}, indent=2) + "\n")
    return paths | ({"rounds_html": output / rounds_page} if rounds_page else {})
