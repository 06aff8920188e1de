"""One analysis of a run directory: parse the history once, compute every figure once, keep only the figures.

``chaos report`` writes result.json and a report from the same :class:`RunAnalysis`; ``chaos compare`` reads its
columns from it; the engine writes result.json through it. The history itself is not kept: what the reports
draw is kept as downsampled series (see ``chaos.analysis.series``), so a report's memory after the analysis is
bounded by its figures, not by the run's length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.analysis.breakdown import RecoveryBreakdown, recovery_breakdowns
from chaos.analysis.interval import interval_advice, save_cost_s
from chaos.analysis.load import History, first_t, load_events, of_kind
from chaos.analysis.replacements import replacement_causes
from chaos.analysis.result_json import build_result
from chaos.analysis.result_model import ResultModel
from chaos.analysis.series import lineage_losses, progress_by_node, worker_round_starts
from chaos.analysis.throughput import Throughput, final_loss, throughput, time_to_result
from chaos.events import Ev
from chaos.loading import load_scenario
from chaos.paths import read_small, write_output
from chaos.scenario import Scenario, ShippedWorkload


@dataclass
class RunAnalysis:
    """Everything computed from one run directory; reports and comparisons only present it."""

    run_dir: Path
    scenario: Scenario
    result: dict[str, Any]  # result.json's content, as written (readers use ``model``)
    model: ResultModel  # the same, typed (chaos.analysis.result_model)
    golden: dict[str, Any] | None  # golden.json (the fault-free run's summary), if any
    t0: float  # time of the first event: the plots' origin
    breakdowns: list[RecoveryBreakdown] = field(default_factory=list)  # per disruptive fault
    throughput: Throughput = field(default_factory=Throughput)  # see chaos.analysis.throughput
    save_cost_s: float | None = None  # median checkpoint save
    progress: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # node → (s since t0, step)
    worker_starts: list[float] = field(default_factory=list)  # s since t0 of each rank-0 worker start
    losses: list[tuple[float, float]] = field(default_factory=list)  # (step, loss) along the surviving lineage
    final: tuple[int | None, float | None] = (None, None)  # (step, loss) the run ended with (compare's final loss)
    time_to_result_s: float | None = None  # run start → the highest step first completed (compare's time to result)
    # why each node replacement happened (chaos.analysis.replacements): the reports explain the count with it
    replacements: list[dict[str, Any]] = field(default_factory=list)

    def interval_advice(self, mtbf_s: float | None = None) -> dict[str, Any] | None:
        """Young/Daly checkpoint-interval advice for an MTBF (``--mtbf``, else the scenario's checks.mtbf_s)."""
        every = None
        if isinstance(self.scenario.workload, ShippedWorkload):
            every = int(self.scenario.workload.args.get("checkpoint_every", 25))
        recoveries = [f.recovery_s for f in self.model.faults if f.recovery_s is not None]
        return interval_advice(self.save_cost_s, mtbf_s or self.scenario.checks.mtbf_s, every,
                               self.model.median_step_s, max(recoveries) if recoveries else None)


def history_health(events: History) -> dict[str, Any]:
    """What the figures rest on: whether the engine finished the history (``run_ended``; without it the run was
    cut short, e.g. the engine was killed) and which lines could not be read (skipped, not fatal)."""
    return {"complete": bool(of_kind(events, Ev.RUN_ENDED)), "unreadable_count": events.unreadable.count,
            "unreadable_lines": list(events.unreadable.lines)}

# golden.json holds one loss per step: ~30 bytes each, so this bounds a run of a million steps.
GOLDEN_MAX_BYTES = 64 << 20


def _read_golden(path: Path) -> dict[str, Any] | None:
    """golden.json (or control.json), or None when it is missing or damaged (the golden comparison then says it
    was not checked)."""
    try:
        golden = json.loads(read_small(path, GOLDEN_MAX_BYTES))  # a FIFO or a device there is damage, not a wait
    except (OSError, ValueError, RecursionError):
        return None
    return golden if _is_summary(golden) else None


def _is_summary(golden: Any) -> bool:
    """The shape golden_summary writes (per-step losses keyed by step number, the world sizes, the step count):
    anything else is a damaged file, said as such, not a KeyError deep in the comparison or a plot."""
    if not isinstance(golden, dict):
        return False
    losses, sizes, steps = golden.get("losses"), golden.get("world_sizes"), golden.get("steps")
    return (isinstance(losses, dict) and all(isinstance(k, str) and k.isdigit() for k in losses)
            and isinstance(sizes, list) and isinstance(steps, int) and not isinstance(steps, bool))


def analyze_run(run_dir: str | Path, events: History | None = None) -> RunAnalysis:
    """The run directory's analysis; ``events``: its history already loaded (a :class:`HistoryLoader`'s, read
    while the run went on), else ``events.jsonl`` is read here."""
    run_dir = Path(run_dir)
    scenario = load_scenario(run_dir / "scenario.yaml", stored=True)
    golden_path = run_dir / "golden.json"
    golden = _read_golden(golden_path)
    control = _read_golden(run_dir / "control.json")  # the clean resume that measured the noise floor, if run
    if events is None:
        events = load_events(run_dir / "events.jsonl")
    result = build_result(run_dir, scenario, events, golden, control)
    result["history"] = history_health(events)
    model = ResultModel.from_dict(result)
    t0 = first_t(events)
    return RunAnalysis(
        run_dir=run_dir, scenario=scenario, result=result, model=model, golden=golden, t0=t0,
        breakdowns=recovery_breakdowns(events, model.faults),
        throughput=throughput(events, model, scenario.cluster.nodes),
        save_cost_s=save_cost_s(events),
        progress=progress_by_node(events, t0),
        worker_starts=worker_round_starts(events, t0),
        losses=lineage_losses(events),
        final=final_loss(events),
        time_to_result_s=time_to_result(events),
        replacements=replacement_causes(events),
    )


def analyze(run_dir: str | Path) -> dict[str, Any]:
    """result.json's content, recomputed from the run directory (without writing it)."""
    return analyze_run(run_dir).result


def write_result(run: str | Path | RunAnalysis) -> dict[str, Any]:
    """Write ``result.json`` into the run directory; ``run`` is the directory or its analysis (not redone)."""
    analysis = run if isinstance(run, RunAnalysis) else analyze_run(run)
    path = analysis.run_dir / "result.json"
    write_output(path, json.dumps(analysis.result, indent=2, default=str) + "\n")
    return analysis.result
