"""The engine: brings a cluster up, fires and heals faults, plays the orchestrator, and always tears down.

Parts, one job each (the import graph runs downwards only):

- :mod:`~chaos.engine.states`: the node, fault and run-phase states and their allowed transitions;
- :mod:`~chaos.engine.signals`: stop signals during a run, ``Interrupted`` / ``RunInterrupted``;
- :mod:`~chaos.engine.progress`: the progress observer (history tail; log lines and checkpoint files of
  ``command:`` workloads);
- :mod:`~chaos.engine.nodes`: the node orchestrator (start, watch exit codes, replace per ``node_restart``);
- :mod:`~chaos.engine.scheduler`: the fault scheduler (triggers, inject, heal, release the job's holds);
- :mod:`~chaos.engine.end`: the end detector (completed, failed, deadline, restart loop, hung);
- :mod:`~chaos.engine.core`: ``Engine``, which wires them, runs the golden run through an injected runner, and
  always tears down.
"""

from chaos.engine.core import POLL_S, Engine, RunParts, Snapshot, environment, new_run_id, run
from chaos.engine.end import FINISH_GRACE_S, End, EndDetector
from chaos.engine.nodes import NodeOrchestrator, NodeState
from chaos.engine.progress import ProgressObserver
from chaos.engine.scheduler import FaultScheduler, FaultState, random_node
from chaos.engine.signals import Interrupted, RunInterrupted
from chaos.engine.states import EndReason, FaultStatus, NodeStatus, Phase

__all__ = [
    "FINISH_GRACE_S", "POLL_S", "End", "EndDetector", "EndReason", "Engine", "FaultScheduler", "FaultState",
    "FaultStatus", "Interrupted", "NodeOrchestrator", "NodeState", "NodeStatus", "Phase", "ProgressObserver",
    "RunInterrupted", "RunParts", "Snapshot", "environment", "new_run_id", "random_node", "run",
]
