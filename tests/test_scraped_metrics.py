"""Print-only jobs (source ``progress``): the engine stamps each printed step when it reads the log, a batch of
lines every 20 ms tick, so per-step times are read times. Median step time and goodput must come from the job's
pace over several reads, not from the microseconds between lines of one read (docs/metrics.md, "Metric definitions").
"""

from __future__ import annotations

import pytest

from chaos.analysis.metrics import goodput, median_step_time, step_intervals
from chaos.events import Ev, Source

TICK = 0.0205  # the engine's read interval (POLL_S plus the tick's work)
WRITE = 5e-5  # between two lines written from one read


def scraped(step_s: float, steps: int, t0: float = 1000.0, first: int = 1, pid: str = "node0:1",
            events: list | None = None, pause_after: dict[int, float] | None = None) -> list:
    """A print-only job stepping every ``step_s`` (plus ``pause_after[s]`` after step s), read every TICK."""
    out = events if events is not None else []
    out.append({"t": t0, "source": Source.PROGRESS, "event": Ev.PROCESS_STARTED, "node": "node0", "pid": pid})
    printed, t, pause = [], t0, pause_after or {}
    for s in range(first, first + steps):
        t += step_s + pause.get(s - 1, 0.0)
        printed.append((t, s))
    read, i = t0 + TICK, 0
    while i < len(printed):
        batch = []
        while i < len(printed) and printed[i][0] <= read:
            batch.append(printed[i][1])
            i += 1
        for k, s in enumerate(batch):
            out.append({"t": read + k * WRITE, "source": Source.PROGRESS, "event": Ev.STEP_COMPLETED,
                        "node": "node0", "pid": pid, "step": s, "loss": 1.0})
        read += TICK
    return out


def test_median_step_of_a_fast_print_only_job_is_its_pace_not_the_gap_between_lines_of_one_read() -> None:
    # 6 ms steps read every 20 ms: 3-4 lines a read, written 50 µs apart
    events = scraped(0.006, 240)
    median, basis = median_step_time(events)
    assert basis == "fault_free_run"
    assert median == pytest.approx(0.006, rel=0.1)
    assert min(step_intervals(events)) > 0.004  # no step is timed by the microseconds between two lines
    g = goodput(events)
    assert 0.9 <= g["goodput"] <= 1.0


def test_a_print_only_job_slightly_slower_than_the_read_tick_is_not_timed_at_the_tick() -> None:
    # 15 ms steps read every 20.5 ms: most reads hold one step, so step-to-step gaps are mostly the tick
    events = scraped(0.015, 120, pause_after={40: 0.25, 80: 0.25})  # two slow saves
    median, _ = median_step_time(events)
    assert median == pytest.approx(0.015, rel=0.1)
    g = goodput(events)
    assert 0 < g["goodput"] <= 1.0  # was 1.15: 120 × the tick over the real 2.3 s


def test_goodput_of_a_print_only_job_never_exceeds_one() -> None:
    for step_s in (0.003, 0.0075, 0.012, 0.019, 0.021, 0.05):
        g = goodput(scraped(step_s, 200))
        assert 0 < g["goodput"] <= 1.0, step_s
        assert g["median_step_s"] == pytest.approx(step_s, rel=0.15), step_s


def test_a_stall_in_a_print_only_job_is_one_slow_step_not_a_slow_window() -> None:
    events = scraped(0.006, 200, pause_after={100: 3.0})
    intervals = step_intervals(events)
    assert max(intervals) == pytest.approx(3.0, rel=0.05)
    assert median_step_time(events)[0] == pytest.approx(0.006, rel=0.1)


def test_slow_print_only_steps_keep_their_own_times() -> None:
    events = scraped(0.5, 20)  # one step per read: every step has its own (tick-rounded) time
    assert median_step_time(events)[0] == pytest.approx(0.5, abs=TICK)
    assert len(step_intervals(events)) == 19


def test_a_print_only_job_printing_every_kth_step_is_timed_per_step() -> None:
    events = [e for e in scraped(0.01, 400) if e["event"] != Ev.STEP_COMPLETED or e["step"] % 10 == 0]
    assert median_step_time(events)[0] == pytest.approx(0.01, rel=0.1)


def _write(tmp_path, events: list) -> object:
    import json

    from chaos.analysis.load import load_events

    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in sorted(events, key=lambda e: e["t"])))
    return load_events(path)


def _round(node: str, n: int, first: int, last: int, t0: float, lag: float = 0.0) -> list:
    pid = f"{node}:{n}"
    out = [{"t": t0 + lag, "source": Source.PROGRESS, "event": Ev.PROCESS_STARTED, "node": node, "pid": pid}]
    out += [{"t": t0 + lag + 0.01 * (s - first), "source": Source.PROGRESS, "event": Ev.STEP_COMPLETED,
             "node": node, "pid": pid, "step": s, "loss": 1.0 / s} for s in range(first, last + 1)]
    return out


def test_another_nodes_copy_of_the_printed_progress_is_not_a_round(tmp_path) -> None:
    from chaos.analysis.metrics import worker_restarts

    # recorded before the engine told copies apart: every rank printed, each node's log became rounds of its own
    events = (_round("node0", 1, 1, 70, 1000.0) + _round("node1", 1, 1, 70, 1000.0, lag=0.002)
              + [{"t": 1001.0, "source": "engine", "event": Ev.FAULT_INJECTED, "fault_id": 0, "kind": "crash"}]
              + _round("node0", 2, 61, 100, 1008.0) + _round("node1", 2, 61, 100, 1008.0, lag=0.003))
    history = _write(tmp_path, events)
    assert worker_restarts(history) == 1
    assert {p for p in history.steps.values("pid")} == {"node0:1", "node0:2"}


def test_rank0_moving_to_another_node_is_still_a_round(tmp_path) -> None:
    from chaos.analysis.metrics import worker_restarts

    history = _write(tmp_path, _round("node0", 1, 1, 30, 1000.0) + _round("node1", 1, 21, 40, 1006.0))
    assert worker_restarts(history) == 1


def test_step_timing_of_a_print_only_job_is_its_pace_around_a_fault() -> None:
    from chaos.analysis.step_timing import step_timings

    events = scraped(0.006, 300)
    steps_t = [e["t"] for e in events if e["event"] == Ev.STEP_COMPLETED]
    fault = {"id": 0, "injected": True, "t_injected": steps_t[100], "t_healed": steps_t[200], "target": "node0"}
    [rank] = step_timings(events, [fault])[0]["ranks"]
    for window in ("before", "during", "after"):
        assert rank[window]["step_s"] == pytest.approx(0.006, rel=0.15), window
