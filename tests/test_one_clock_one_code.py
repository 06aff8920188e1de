"""Words across runtimes and clocks (issue 32, items 2 and 7), on hand-built histories: a job that trained every step
and did not exit says which node waits for what, an OOM kill is never reported before its fault, and a SIGKILLed
node's exit code reads the same on every runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.analysis.result_json import add_oom_kills, build_result
from chaos.events import EndReason, Ev, Source
from tests.histories import H
from tests.test_verdict_precision import ddp_mlp

# ------------------------------------------------------------------------------------------ done, not exited

def test_a_replaced_node_and_the_exit_barrier_are_named_after_the_last_step() -> None:
    h = H().start(2)
    for n in ("node0", "node1"):
        h.events.append({"t": h.t, "source": Source.ENGINE, "event": Ev.NODE_STARTED, "node": n})
    h.steps(1, 200)
    # node0 crashed during the final save and was replaced; node1 finished training and sits in the exit barrier
    h.events.append({"t": h.t + 0.5, "source": Source.ENGINE, "event": Ev.NODE_EXITED, "node": "node0", "code": -9,
                     "will_replace": True})
    h.events.append({"t": h.t + 1.5, "source": Source.ENGINE, "event": Ev.NODE_STARTED, "node": "node0",
                     "replacement": True})
    h.t += 60
    h.events.append({"t": h.t, "source": Source.ENGINE, "event": Ev.RUN_ENDED, "reason": EndReason.HUNG,
                     "why": "no step for 60s (stuck at step 200)"})
    result = build_result(Path("r"), ddp_mlp(200), sorted(h.events, key=lambda e: e["t"]), None)
    assert result["why"].startswith("all steps done (200 of 200); 2 node(s) did not exit: node0 (a replacement "
                                    "started after the last step, waiting in a new rendezvous round for peers that "
                                    "finished training"), result["why"]
    assert "node1 (still running: torchrun's exit barrier waits for every agent of the round, and node0's was " \
           "replaced after the last step)" in result["why"]


def test_torchruns_word_that_the_workers_finished_says_training_ended_without_a_step_count() -> None:
    from chaos.agent_log import agent_event
    from chaos.analysis.hangs import done_but_not_exited

    said = agent_event("[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.")
    assert said == (Ev.AGENT_WORKERS_SUCCEEDED, {"barrier_timeout_s": 300}), said
    h = H().start(2)
    for n in ("node0", "node1"):
        h.events.append({"t": h.t, "source": Source.ENGINE, "event": Ev.NODE_STARTED, "node": n})
    h.steps(1, 240)
    for i, n in enumerate(("node0", "node1")):
        h.events.append({"t": h.t + 0.2 + i / 10, "source": Source.AGENT, "event": Ev.AGENT_WORKERS_SUCCEEDED,
                         "node": n, "pid": 5 + i, "barrier_timeout_s": 300})
    h.events.append({"t": h.t + 60, "source": Source.ENGINE, "event": Ev.RUN_ENDED, "reason": EndReason.HUNG,
                     "why": "no step for 60s (stuck at step 240)"})
    events = sorted(h.events, key=lambda e: e["t"])
    why = done_but_not_exited(events, None)  # a command workload without a golden run: its step count is unknown
    assert why == ("training ended at step 240 (torchrun's agent on node0, node1 saw every worker exit 0 after it); "
                   "2 node(s) did not exit: node0 (its workers finished; its agent waits in torchrun's exit barrier, "
                   "up to 300 s, for every agent of the round), node1 (its workers finished; its agent waits in "
                   "torchrun's exit barrier, up to 300 s, for every agent of the round)"), why
    assert done_but_not_exited([e for e in events if e["event"] != Ev.AGENT_WORKERS_SUCCEEDED], None) is None
    # (measured: examples/byo dcp-no-optim) node1's workers never all exited: node0's agent waits for it
    why = done_but_not_exited([e for e in events if e.get("pid") != 6], None)
    assert why is not None and why.endswith(
        "node1 (its workers did not all exit after the last step: one still runs, in a collective or with a process "
        "group never destroyed; the agent of node0 waits for it in torchrun's exit barrier)"), why


# ------------------------------------------------------------------------------------------ one clock, one code

def test_an_oom_kill_is_never_reported_before_its_fault() -> None:
    faults: list[dict[str, Any]] = [{"id": 0, "t_injected": 100.0}]
    events = [{"t": 100.2, "source": Source.ENGINE, "event": Ev.OOM_KILLED, "fault_id": 0, "node": "node1",
               "pid": 7, "killed_at": 99.96}]
    add_oom_kills(faults, events)
    kill = faults[0]["oom_kills"][0]
    assert kill["after_injection_s"] == 0.0 and "0.040 s before" in kill["after_injection_note"], kill
    faults = [{"id": 0, "t_injected": 100.0}]
    add_oom_kills(faults, [{**events[0], "killed_at": 100.5}])
    assert faults[0]["oom_kills"][0]["after_injection_s"] == pytest.approx(0.5)
    assert "after_injection_note" not in faults[0]["oom_kills"][0]


def test_a_signal_reads_the_same_whatever_the_runtime_saw() -> None:
    from chaos.events import signal_exit_code  # here: the other tests of this file fail on their own without it
    assert signal_exit_code(-9) == -9  # Popen (local): killed by SIGKILL
    assert signal_exit_code(137) == -9  # srun (Slurm), docker: 128 + SIGKILL
    assert signal_exit_code(134) == -6
    assert signal_exit_code(0) == 0 and signal_exit_code(1) == 1 and signal_exit_code(None) is None
    assert signal_exit_code(255) == 255  # no signal has that number: an exit status
