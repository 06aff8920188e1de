"""Every metric on hand-built histories, edge cases included (definitions: docs/metrics.md)."""

from __future__ import annotations

import pytest

from chaos.analysis.metrics import (
    fault_metrics,
    goodput,
    median_step_time,
    restarts_after_completion,
    worker_restarts,
)
from tests.histories import H


def test_crash_with_restart_measures_recovery_catch_up_and_lost_steps() -> None:
    h = H(dt=0.1).start(ranks=2).steps(1, 37)  # checkpoint at 30 assumed
    h.fault(0)
    t_f = h.t
    h.steps(38, 39)  # in flight: the old incarnation finished two more steps before noticing
    h.start(ranks=2, at=t_f + 5.0, load=30).steps(31, 50)
    [m] = fault_metrics(h.end())
    assert m.restarted
    assert m.highest_step_before == 37
    assert m.resumed_from == 30
    assert m.lost_steps == 7
    # recovery = first step of the new incarnation (step 31 at t_f+5.0+0.1), not the in-flight steps 38, 39
    assert m.recovery_s == pytest.approx(5.1, abs=1e-6)
    # catch-up = new incarnation completes step 38 (= H + 1): 8 steps after restart
    assert m.catch_up_s == pytest.approx(5.8, abs=1e-6)
    # lost work = recomputing steps 31..37 (7 steps of 0.1 s)
    assert m.lost_work_s == pytest.approx(0.7, abs=1e-6)


def test_resume_step_inferred_without_checkpoint_loaded_event() -> None:
    h = H().start().steps(1, 20).fault(0)
    h.start(at=h.t + 2).steps(11, 25)
    [m] = fault_metrics(h.end())
    assert m.resumed_from == 10
    assert m.lost_steps == 10


def test_freeze_without_restart_recovers_at_first_step_after_fault() -> None:
    h = H(dt=0.1).start().steps(1, 50).fault(0, kind="freeze", duration=3.0)
    t_f = h.t
    h.wait(3.0).steps(51, 60)
    [m] = fault_metrics(h.end())
    assert not m.restarted
    assert m.lost_steps == 0
    assert m.resumed_from == 50
    assert m.recovery_s == pytest.approx(3.1, abs=1e-3)
    assert m.catch_up_s == pytest.approx(m.recovery_s)
    assert h.t > t_f


def test_slowdown_is_median_step_time_during_fault_over_before() -> None:
    h = H(dt=0.1).start().steps(1, 50).fault(0, kind="freeze", duration=2.0)
    h.steps(51, 60, dt=0.2).steps(61, 70)
    [m] = fault_metrics(h.end())
    assert m.slowdown == pytest.approx(2.0, rel=1e-6)


def test_fault_before_first_step() -> None:
    h = H().fault(0)
    h.start(at=h.t + 1.0).steps(1, 10)
    [m] = fault_metrics(h.end())
    assert m.highest_step_before is None
    assert m.restarted
    assert m.lost_steps == 0
    assert m.recovery_s is not None and m.recovery_s > 0


def test_fault_after_last_step_has_no_recovery() -> None:
    h = H().start().steps(1, 10).fault(0)
    [m] = fault_metrics(h.end())
    assert m.highest_step_before == 10
    assert m.recovery_s is None and m.catch_up_s is None and m.lost_steps is None
    assert m.note == "the job completed no step after this fault"


def test_two_overlapping_faults_each_measured_from_its_own_injection() -> None:
    h = H(dt=0.1).start(ranks=2).steps(1, 40).fault(0, kind="freeze", duration=4.0)
    t0 = h.t
    h.wait(1.0).fault(1)  # a crash while the freeze is still active
    t1 = h.t
    h.start(ranks=2, at=t1 + 3.0, load=40).steps(41, 60)
    m0, m1 = fault_metrics(h.end())
    # the restart happened after fault 1 was injected: it belongs to fault 1
    assert m1.restarted and m1.resumed_from == 40 and m1.lost_steps == 0
    assert m1.recovery_s == pytest.approx(3.1, abs=1e-3)
    assert not m0.restarted
    assert m0.recovery_s == pytest.approx((t1 + 3.1) - t0, abs=1e-3)


def test_non_disruptive_fault_gets_no_recovery_figures_and_does_not_shorten_windows() -> None:
    h = H().start().steps(1, 30).fault(0, kind="damage", disruptive=False).steps(31, 33).fault(1)
    h.start(at=h.t + 2, load=20).steps(21, 40)
    m0, m1 = fault_metrics(h.end())
    assert m0.recovery_s is None and m0.note
    assert m1.restarted and m1.resumed_from == 20 and m1.lost_steps == 13


def test_goodput_and_median() -> None:
    h = H(dt=0.1).start().steps(1, 100).fault(0)
    h.start(at=h.t + 10.0, load=100).steps(101, 200)
    events = h.end()
    median, basis = median_step_time(events)
    assert median == pytest.approx(0.1) and basis == "before_first_fault"
    g = goodput(events)
    assert g["steps_completed"] == 200
    # ideal 200 x 0.1 = 20 s; actual = 20 s of steps + 10 s outage
    assert g["goodput"] == pytest.approx(20.0 / 30.0, rel=1e-3)


def test_goodput_without_steps_is_none() -> None:
    assert goodput(H().end())["goodput"] is None


def test_worker_restarts_counts_rank0_incarnations() -> None:
    h = H().start(ranks=3).steps(1, 5).fault(0).start(ranks=2).steps(6, 8).start(ranks=3).steps(9, 10)
    assert worker_restarts(h.end()) == 2


def test_slowdown_counts_the_step_in_flight_when_no_step_completes_during_the_fault() -> None:
    # a 1 mbit cap that stalls every all-reduce: nothing completes while it lasts (seen in CI on docker)
    h = H(dt=0.1).start(ranks=3).steps(1, 50).fault(0, kind="bandwidth", duration=10.0)
    h.wait(10.0).steps(51, 60)
    [m] = fault_metrics(h.end())
    assert not m.restarted
    # step 51 ran from t(50) to t_f + 10 + 0.1: it is the only step in flight during the fault
    assert m.slowdown == pytest.approx(10.101 / 0.1, rel=1e-3)


def test_a_restart_after_the_job_finished_is_counted_apart_and_not_blamed_on_the_fault() -> None:
    # seen in CI: a worker aborted while shutting down after step 600; the agents restarted, loaded the final
    # checkpoint and stopped at once. The bandwidth fault 20 s earlier did not cause that restart.
    h = H(dt=0.1).start(ranks=3).steps(1, 50).fault(0, kind="bandwidth", duration=2.0)
    h.steps(51, 60, dt=0.5).steps(61, 100).finish(100)
    h.start(ranks=2, at=h.t + 8.0, load=100).finish(100)
    events = h.end()
    [m] = fault_metrics(events)
    assert not m.restarted
    assert m.recovery_s == pytest.approx(0.5, abs=2e-3)
    assert m.slowdown == pytest.approx(5.0, rel=0.05)
    assert worker_restarts(events) == 0
    assert restarts_after_completion(events) == 1


def test_steps_after_losing_the_single_point_of_failure_are_no_recovery() -> None:
    """Under Ray a crash of the head (node0) leaves the workers training to their next report, which never returns:
    the run hangs, and the steps the old workers made after the crash are not a recovery (measured: 0.06 s was
    reported before)."""
    h = H(dt=0.1).start(ranks=2).steps(1, 30)
    h.events[0]["environment"] = {"launcher": "ray", "single_point_node": "node1"}  # H's faults target node1
    h.fault(0).steps(31, 35)
    [m] = fault_metrics(h.end(reason="hung"))
    assert m.recovery_s is None and m.lost_steps is None
    assert m.note is not None and "single point of failure" in m.note
    # the same history without the launcher's word: a fault after which steps went on is recovered at once
    h.events[0]["environment"] = {"launcher": "torchrun"}
    [m] = fault_metrics(sorted(h.events, key=lambda e: e["t"]))
    assert m.recovery_s is not None
