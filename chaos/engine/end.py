"""When a run is over: the job completed, every node failed, or one of the scenario's limits (deadline, restart
loop, startup or stall timeout) ran out. A run never waits forever."""

from __future__ import annotations

from dataclasses import dataclass

from chaos.engine.nodes import NodeOrchestrator
from chaos.engine.progress import ProgressObserver
from chaos.engine.states import EndReason, NodeStatus
from chaos.scenario import Limits

# Once a node finished, how long the others may take to finish too before the run ends anyway.
FINISH_GRACE_S = 30.0


@dataclass(frozen=True)
class End:
    reason: EndReason
    why: str
    # the engine's own failure (an engine bug): its traceback, kept in the history for whoever debugs it
    traceback: str | None = None


class EndDetector:
    def __init__(self, limits: Limits, nodes: NodeOrchestrator, progress: ProgressObserver):
        self._limits = limits
        self._nodes = nodes
        self._progress = progress

    def check(self, now: float, started: float) -> End | None:
        """The run's end if it is over at ``now`` (``started``: when the faulted run began), else None."""
        limits, progress = self._limits, self._progress
        states = list(self._nodes.nodes.values())
        finishing_since = self._nodes.finishing_since
        if finishing_since is not None:
            if all(s.status in (NodeStatus.FINISHED, NodeStatus.DEAD, NodeStatus.REPLACING) for s in states):
                return End(EndReason.COMPLETED, "every node finished its steps")
            if now - finishing_since > FINISH_GRACE_S:
                return End(EndReason.COMPLETED, "a node finished; the others were stopped after the grace period")
            return None
        started_training = progress.first_step_t is not None
        logs = progress.node_logs
        if all(s.status is NodeStatus.DEAD for s in states):
            codes = ", ".join(f"{s.name}={s.exit_code}" for s in states)
            if not started_training:
                return End(EndReason.FAILED_TO_START, f"the workload failed to start: every node exited before any "
                           f"training step ({codes})" + (f"; {logs.explain()}" if logs is not None else ""))
            return End(EndReason.FAILED, f"every node exited without finishing ({codes})")
        # Before any step, workers that torchrun restarts and nodes the orchestrator replaces are failed starts;
        # counted per node, so one unlucky rendezvous round that fails every node at once is not a pattern.
        early = max((s.replacements + (len(logs.worker_failures.get(s.name, [])) if logs is not None else 0)
                     for s in states), default=0)
        if not started_training and early >= limits.restart_loop_restarts:
            return End(EndReason.FAILED_TO_START, f"the workload failed to start: its workers died {early} "
                       "time(s) before any training step" + (f"; {logs.explain()}" if logs is not None else ""))
        if now - started > limits.deadline_s:
            return End(EndReason.DEADLINE, f"deadline of {limits.deadline_s:g}s reached at step {progress.max_step}")
        if progress.starts_since_progress >= limits.restart_loop_restarts:
            error = logs.error() if logs is not None else None
            return End(EndReason.RESTART_LOOP, f"{progress.starts_since_progress} worker restarts without progress "
                                               f"past step {progress.max_step}"
                       + (f"; the workers died of {error}" if error else ""))
        if progress.first_step_t is None and now - started > limits.startup_timeout_s:
            return End(EndReason.HUNG, f"no training step within {limits.startup_timeout_s:g}s of the start")
        if progress.first_step_t is not None and now - progress.last_progress_t > limits.stall_timeout_s:
            return End(EndReason.HUNG, f"no step for {limits.stall_timeout_s:g}s (stuck at step {progress.max_step})"
                       + progress.blocked_text(now))
        return None
