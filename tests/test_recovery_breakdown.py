"""Recovery broken down: torchrun's agent events (chaos.agent_log) and the phases analysis cuts from them."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from chaos.agent_log import AgentEvents, agent_event
from chaos.analysis.breakdown import (
    DETECTION,
    FIRST_STEP,
    LOAD,
    RENDEZVOUS,
    WORKER_INIT,
    WORKER_START,
    recovery_breakdowns,
)
from chaos.analysis.metrics import fault_metrics
from chaos.events import Ev, Source
from tests.histories import H

# What torch 2.x's agent logs (torch/distributed/elastic/agent/server/api.py), rendered.
AGENT_LINES = {
    "[default] Worker group FAILED. 99/100 attempts left; will restart worker group": Ev.AGENT_WORKERS_FAILED,
    "[default] Detected 1 new nodes from group_rank=0; will restart worker group": Ev.AGENT_MEMBERSHIP_CHANGED,
    "[default] Rendezvous'ing worker group": Ev.AGENT_RENDEZVOUS_STARTED,
    "[default] Rendezvous complete for workers. Result:\n  restart_count=1\n": Ev.AGENT_RENDEZVOUS_COMPLETED,
    "[default] Starting worker group": Ev.AGENT_WORKERS_STARTED,
}


@pytest.mark.parametrize("line", list(AGENT_LINES))
def test_each_agent_message_becomes_its_event(line: str) -> None:
    found = agent_event(line, {"restart_count": 1, "group_rank": 0, "group_world_size": 2, "role": "default"})
    assert found is not None and found[0] == AGENT_LINES[line]
    if found[0] == Ev.AGENT_WORKERS_FAILED:
        assert found[1] == {"state": "FAILED", "attempts_left": 99, "max_restarts": 100}
    if found[0] == Ev.AGENT_RENDEZVOUS_COMPLETED:
        assert found[1] == {"restart_count": 1, "group_rank": 0, "group_world_size": 2}
    assert agent_event("[default] Stopping worker group") is None


def test_the_installed_torch_still_logs_these_messages() -> None:
    """The patterns follow torch's message texts: a torch that rewords them must fail here, not in a run."""
    # read from the installed torch without importing it (an import costs 3-5 s here): the same file
    [torch_dir] = importlib.util.find_spec("torch").submodule_search_locations  # type: ignore[union-attr]
    source = (Path(torch_dir) / "distributed" / "elastic" / "agent" / "server" / "api.py").read_text()
    for fragment in ("Worker group %s. ", "attempts left;", "Detected %s ", "new nodes from group_rank",
                     "Rendezvous'ing worker group", "Rendezvous complete for workers. Result:",
                     "Starting worker group"):
        assert fragment in source, fragment


def test_the_handler_writes_history_lines_and_passes_on_only_what_torchrun_showed(tmp_path: Path) -> None:
    history = tmp_path / "events.jsonl"
    parent = logging.getLogger("test-agent-parent")
    shown: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            shown.append(record.getMessage())

    parent.addHandler(Keep())
    parent.propagate = False
    logger = logging.getLogger("test-agent-parent.api")
    logger.addHandler(AgentEvents(str(history), "node1", parent, logging.WARNING))
    logger.propagate, logger.level = False, logging.INFO
    logger.info("[%s] Starting worker group", "default")
    logger.info("[%(role)s] Rendezvous complete for workers. Result:\n  group_world_size=%(group_world_size)s",
                {"role": "default", "group_world_size": 3, "restart_count": 2, "group_rank": 1})
    logger.warning("[default] Worker group FAILED. 3/100 attempts left; will restart worker group")
    logger.info("unrelated")
    lines = [json.loads(line) for line in history.read_text().splitlines()]
    assert [e["event"] for e in lines] == [Ev.AGENT_WORKERS_STARTED, Ev.AGENT_RENDEZVOUS_COMPLETED,
                                           Ev.AGENT_WORKERS_FAILED]
    assert all(e["source"] == Source.AGENT and e["node"] == "node1" and isinstance(e["t"], float) for e in lines)
    assert lines[1]["group_world_size"] == 3 and lines[2]["attempts_left"] == 3
    assert shown == ["[default] Worker group FAILED. 3/100 attempts left; will restart worker group"]


def _agent(h: H, event: Ev, at: float, node: str = "node0", **fields: Any) -> None:
    h.events.append({"t": at, "source": Source.AGENT, "event": event, "node": node, "pid": 7, **fields})


def _crash_with_agents(load_started: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A crash at t_f; agents act at +0.5 s and +0.6 s, start workers at +2.5 s (node0) and +2.6 s (node1);
    workers start at +4.6 s, begin loading at +5.6 s, load by +5.8 s; the first step comes 0.1 s later."""
    h = H(dt=0.1).start().steps(1, 30).fault(0)
    t_f = h.t
    _agent(h, Ev.AGENT_WORKERS_FAILED, t_f + 0.5, state="FAILED", attempts_left=9, max_restarts=10)
    _agent(h, Ev.AGENT_WORKERS_FAILED, t_f + 0.6, "node1", state="FAILED", attempts_left=9, max_restarts=10)
    for node, dt in (("node0", 0.0), ("node1", 0.1)):
        _agent(h, Ev.AGENT_RENDEZVOUS_STARTED, t_f + 0.5 + dt, node)
        _agent(h, Ev.AGENT_RENDEZVOUS_COMPLETED, t_f + 2.5 + dt, node, group_world_size=2)
        _agent(h, Ev.AGENT_WORKERS_STARTED, t_f + 2.5 + dt, node)
    h.start(at=t_f + 4.6)
    pid = h.pid
    if load_started:
        h.events.append({"t": t_f + 5.6, "source": Source.WORKLOAD, "event": Ev.CHECKPOINT_LOAD_STARTED,
                         "node": "node0", "pid": pid, "rank": 0, "step": 30, "path": "step_30.pt"})
    h.events.append({"t": t_f + 5.8, "source": Source.WORKLOAD, "event": Ev.CHECKPOINT_LOADED, "node": "node0",
                     "pid": pid, "rank": 0, "step": 30, "path": "step_30.pt", "sha256": "x"})
    h.t = t_f + 5.8
    h.steps(31, 40)
    events = sorted(h.end(), key=lambda e: e["t"])
    [fault] = [m.to_dict() for m in fault_metrics(events)]
    return events, fault


def test_agent_events_split_detection_from_rendezvous_and_the_largest_part_is_named_with_its_number() -> None:
    events, fault = _crash_with_agents()
    [b] = recovery_breakdowns(events, [fault])
    phases = dict(b.phases)
    assert list(phases) == [DETECTION, RENDEZVOUS, WORKER_START, WORKER_INIT, LOAD, FIRST_STEP]
    expected = {DETECTION: 0.5, RENDEZVOUS: 2.1, WORKER_START: 2.0, WORKER_INIT: 1.0, LOAD: 0.2, FIRST_STEP: 0.1}
    assert phases == pytest.approx(expected, abs=1e-3)
    assert sum(phases.values()) == pytest.approx(fault["recovery_s"])
    assert b.not_measured == [] and b.agent_rounds == 1
    assert b.largest["phase"] == RENDEZVOUS
    assert "2.10 s" in b.advice and "last_call_timeout_s" in b.advice


def test_a_missing_mark_merges_its_phase_into_the_next_and_says_why() -> None:
    events, fault = _crash_with_agents(load_started=False)
    [b] = recovery_breakdowns(events, [fault])
    assert [name for name, _ in b.phases] == [DETECTION, RENDEZVOUS, WORKER_START, f"{WORKER_INIT} + {LOAD}",
                                                 FIRST_STEP]
    assert [x["phase"] for x in b.not_measured] == [WORKER_INIT]
    assert sum(s for _, s in b.phases) == pytest.approx(fault["recovery_s"])


def test_a_print_only_job_with_agents_gets_detection_and_rendezvous_and_one_span_after() -> None:
    events, fault = _crash_with_agents()
    # what the engine records for a script without the probe: its start inferred at its first printed step
    events = [e if e.get("source") != Source.WORKLOAD or e["event"] == Ev.STEP_COMPLETED else
              {**e, "source": Source.PROGRESS} for e in events
              if e["event"] not in (Ev.CHECKPOINT_LOAD_STARTED, Ev.CHECKPOINT_LOADED)]
    [b] = recovery_breakdowns(events, [fault])
    names = [name for name, _ in b.phases]
    assert names == [DETECTION, RENDEZVOUS, f"{WORKER_START} + {WORKER_INIT} + {LOAD} + {FIRST_STEP}"]
    assert "no probe" in b.not_measured[0]["why"]
    assert b.largest["phase"] == names[-1] and "the lever of each part" in b.advice
    # with the storage layer: its first read of the new round marks where the load began
    t_f = fault["t_injected"]
    events.append({"t": t_f + 5.7, "source": Source.STORAGE, "event": Ev.CHECKPOINT_LOADED, "node": "node0",
                   "pid": 99, "path": "step_30.pt", "step": 30, "sha256": "x"})
    [b] = recovery_breakdowns(sorted(events, key=lambda e: e["t"]), [fault])
    assert [name for name, _ in b.phases] == [DETECTION, RENDEZVOUS, f"{WORKER_START} + {WORKER_INIT}",
                                                 f"{LOAD} + {FIRST_STEP}"]
    assert dict(b.phases)[f"{WORKER_START} + {WORKER_INIT}"] == pytest.approx(5.7 - 2.6)
    assert "first read" in b.not_measured[-1]["why"]


def test_the_report_shows_the_phases_what_was_not_measured_and_the_advice(tmp_path: Path) -> None:
    from chaos.reports.text import breakdown_notes, breakdown_rows

    events, fault = _crash_with_agents(load_started=False)
    [b] = recovery_breakdowns(events, [fault])
    rows = breakdown_rows(b)
    assert rows[1] == (RENDEZVOUS, "2.10 s", f"{100 * 2.1 / fault['recovery_s']:.0f}%")
    notes = breakdown_notes(b)
    assert notes[0].startswith(f"not measured separately: {WORKER_INIT}") and notes[-1] == b.advice


def test_compare_names_the_phase_that_differs_most_with_its_numbers() -> None:
    from chaos.compare import Column, conclusions

    def column(label: str, phases: list[tuple[str, float | None]]) -> Column:
        return Column(label=label, scenario=label, run_dir="", verdict="pass", mode="elastic", nodes=3, world_size=3,
                      steps_per_s=None, samples_per_s=None, comm_share=None, time_to_first_step_s=None,
                      recovery_s=sum(s or 0 for _, s in phases), lost_work_s=None, lost_steps=None, goodput=None,
                      node_seconds_per_step=None, duration_s=None, recovery_phases=phases)

    tuned = column("tuned", [(DETECTION, 0.2), (RENDEZVOUS, 2.3), (WORKER_START, 3.0), (FIRST_STEP, 0.5)])
    defaults = column("defaults", [(DETECTION, 0.2), (RENDEZVOUS, 30.4), (WORKER_START, 3.1), (FIRST_STEP, 0.5)])
    lines = conclusions([tuned, defaults])
    assert any(line.startswith(f"The recovery phase that differs most is {RENDEZVOUS}: 2.3 s on tuned, 30.4 s on "
                               "defaults (28.1 s of the 28.2 s difference)") for line in lines), lines


def test_a_recorded_quickstart_splits_its_recovery_from_torchruns_own_agent_events(tmp_path: Path) -> None:
    """A real run (tests/data/histories/quickstart): the agents' lines are in the history, every phase is measured,
    and result.json carries the same split."""
    from chaos.analysis.run import analyze
    from tests.data.recorded import expand

    run_dir = expand("quickstart", tmp_path)
    result = analyze(run_dir)
    [fault] = result["faults"]
    split = fault["recovery_breakdown"]
    assert [p["phase"] for p in split["phases"]] == [DETECTION, RENDEZVOUS, WORKER_START, WORKER_INIT, LOAD,
                                                     FIRST_STEP]
    assert all(p["seconds"] >= 0 for p in split["phases"]) and split["not_measured"] == []
    assert sum(p["seconds"] for p in split["phases"]) == pytest.approx(fault["recovery_s"])
    assert split["largest"]["seconds"] == max(p["seconds"] for p in split["phases"])
    # the survivors' agents, not the crashed node's: they noticed, rendezvoused and started workers again
    from chaos.history import read_history

    agent = [e for e in read_history(run_dir / "events.jsonl")
             if e.get("source") == Source.AGENT and e["t"] > fault["t_injected"]]
    assert {Ev.AGENT_RENDEZVOUS_STARTED, Ev.AGENT_WORKERS_STARTED} <= {e["event"] for e in agent}
    assert {e["node"] for e in agent if e["event"] == Ev.AGENT_WORKERS_STARTED} >= {"node0", "node1"}


def test_the_floor_is_the_jobs_own_first_start_beside_each_restart() -> None:
    """launch at 1000.0, first step 2.5 s later; the crash's recovery (1.0 s idle + 2 s start + first step) sits
    on that floor, and the text report says how many times it is."""
    from chaos.analysis.breakdown import start_floor
    from chaos.reports.text import breakdown_notes

    h = H(dt=0.1)
    h.events.append({"t": 1000.0, "source": Source.ENGINE, "event": Ev.NODE_STARTED, "node": "node0"})
    h.wait(2.4).start(ranks=2).steps(1, 20).fault(0).wait(3.0).start(ranks=2, load=20).steps(21, 40)
    events = h.end()
    assert start_floor(events) == pytest.approx(2.5)
    [fault] = [m.to_dict() for m in fault_metrics(events)]
    [b] = recovery_breakdowns(events, [fault])
    assert b.floor_s == pytest.approx(2.5) and b.to_dict()["floor_s"] == pytest.approx(2.5)
    assert any(line.startswith("floor: the job's own first start (launch to first step) took 2.5 s")
               for line in breakdown_notes(b))
    assert start_floor([e for e in events if e["event"] != Ev.NODE_STARTED]) is None  # no launch: no floor
