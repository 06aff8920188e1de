"""Hand-built histories for testing analysis without running anything."""

from __future__ import annotations

from typing import Any

from chaos.events import Ev, Source

Event = dict[str, Any]


class H:
    """Builds an event list: a job stepping every ``dt`` seconds, with restarts and faults placed by hand."""

    def __init__(self, dt: float = 0.1, t0: float = 1000.0):
        self.dt = dt
        self.t = t0
        self.events: list[Event] = [{"t": t0, "source": Source.ENGINE, "event": Ev.RUN_STARTED, "run_id": "r"}]
        self.pid = 0
        self.ranks = 1

    def start(self, ranks: int = 1, at: float | None = None, load: int | None = None) -> H:
        """New worker incarnation (one process per rank), optionally loading checkpoint ``load``."""
        if at is not None:
            self.t = at
        self.ranks = ranks
        self.pid += 10
        for r in range(ranks):
            self.events.append({"t": self.t, "source": Source.WORKLOAD, "event": Ev.PROCESS_STARTED, "node": f"node{r}",
                                "pid": self.pid + r, "rank": r, "world_size": ranks})
        if load is not None:
            for r in range(ranks):
                self.events.append({"t": self.t + 0.01, "source": Source.WORKLOAD, "event": Ev.CHECKPOINT_LOADED,
                                    "node": f"node{r}", "pid": self.pid + r, "rank": r, "step": load,
                                    "path": f"step_{load}.pt", "sha256": "x"})
        return self

    def steps(self, first: int, last: int, dt: float | None = None) -> H:
        for s in range(first, last + 1):
            self.t += dt or self.dt
            for r in range(self.ranks):
                self.events.append({"t": self.t, "source": Source.WORKLOAD, "event": Ev.STEP_COMPLETED,
                                    "node": f"node{r}", "pid": self.pid + r, "rank": r, "step": s,
                                    "world_size": self.ranks, "loss": 1.0 / s, "duration_s": dt or self.dt})
        return self

    def wait(self, seconds: float) -> H:
        self.t += seconds
        return self

    def fault(self, fid: int, kind: str = "crash", duration: float | None = None, disruptive: bool = True) -> H:
        self.t += 0.001
        self.events.append({"t": self.t, "source": Source.ENGINE, "event": Ev.FAULT_INJECTED, "fault_id": fid,
                            "kind": kind, "target": "node1", "mechanism": "test", "disruptive": disruptive})
        if duration is not None:
            self.events.append({"t": self.t + duration, "source": Source.ENGINE, "event": Ev.FAULT_HEALED,
                                "fault_id": fid, "kind": kind})
        return self

    def finish(self, step: int) -> H:
        """Rank 0 reports the final state (``run_finished``), as the reference workload does after its last step."""
        self.t += 0.01
        self.events.append({"t": self.t, "source": Source.WORKLOAD, "event": Ev.RUN_FINISHED, "node": "node0",
                            "pid": self.pid, "rank": 0, "step": step, "state_sha256": "s"})
        return self

    def end(self, reason: str = "completed") -> list[Event]:
        self.events.append({"t": self.t + 0.5, "source": Source.ENGINE, "event": Ev.RUN_ENDED, "reason": reason,
                            "why": reason})
        return sorted(self.events, key=lambda e: e["t"])
