"""Worker rounds of a print-only job, followed live: printed steps, torchrun's failure lines and the storage layer's
loads become inferred ``process_started`` events, once per round, and a crash loop on a damaged checkpoint ends as
a restart loop that names the error the workers printed (instead of a hang with 0 restarts)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from chaos.engine.end import EndDetector
from chaos.engine.progress import LogProgress, NodeLogs, ProgressObserver
from chaos.engine.states import NodeStatus
from chaos.events import EndReason
from chaos.history import HistoryWriter, read_history
from chaos.scenario import Limits

REGEX = r"\[rank(?P<rank>\d+)\] step (?P<step>\d+)"
FAILED = ("[E] torch.distributed.elastic.multiprocessing.api: failed (exitcode: 1) local_rank: 0 (pid: {pid}) "
          "of binary: /usr/bin/python\n")
TORN = ("RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory. "
        "This is an internal miniz error.\n")


class Job:
    """Two nodes' logs and the history, wired as the engine wires them for a ``command:`` workload."""

    def __init__(self, tmp_path: Path):
        self.events = tmp_path / "events.jsonl"
        self.events.touch()
        self.logs = {n: tmp_path / f"{n}.log" for n in ("node0", "node1")}
        for log in self.logs.values():
            log.touch()
        history = HistoryWriter(self.events)
        node_logs = NodeLogs(self.logs)
        self.progress = ProgressObserver(self.events, LogProgress(REGEX, self.logs, history), None,
                                         lambda _: None, now=0.0, node_logs=node_logs)
        nodes = SimpleNamespace(finishing_since=None, nodes={n: SimpleNamespace(
            name=n, status=NodeStatus.RUNNING, replacements=0, exit_code=None) for n in self.logs})
        self.end = EndDetector(Limits(), nodes, self.progress)  # type: ignore[arg-type]

    def print(self, node: str, *lines: str) -> Job:
        with open(self.logs[node], "a") as f:
            f.writelines(lines)
        self.progress.drain()
        return self

    def steps(self, first: int, last: int) -> Job:
        return self.print("node0", *(f"[rank0] step {s}\n" for s in range(first, last + 1)))

    def storage(self, event: str, pid: int, node: str = "node0", **fields: Any) -> Job:
        line = {"t": 0.0, "source": "storage", "event": event, "node": node, "pid": pid, "path": "/c/ckpt_3.pt",
                **fields}
        with open(self.events, "a") as f:
            f.write(json.dumps(line) + "\n")
        self.progress.drain()
        return self

    def starts(self) -> list[str]:
        return [e["pid"] for e in read_history(self.events) if e["event"] == "process_started"]


def test_a_new_pid_loading_after_progress_is_a_restart_even_at_the_next_step(tmp_path: Path) -> None:
    job = Job(tmp_path).steps(1, 3).storage("checkpoint_save_started", 100).storage("checkpoint_save_finished", 100)
    job.storage("checkpoint_loaded", 100)  # the saver reading its own file back: no restart
    job.steps(4, 4)
    assert job.starts() == ["node0:1"]
    job.storage("checkpoint_loaded", 200).storage("checkpoint_loaded", 201, node="node1")  # new workers resume
    job.steps(4, 5)
    assert job.starts() == ["node0:1", "node0:2"]
    assert job.progress.restarts == 1


def test_failures_then_a_lower_step_are_one_restart(tmp_path: Path) -> None:
    job = Job(tmp_path).steps(1, 5)
    job.print("node0", FAILED.format(pid=1)).print("node1", FAILED.format(pid=2))  # one round ends on both nodes
    job.storage("checkpoint_loaded", 300).steps(3, 6)
    assert job.starts() == ["node0:1", "node0:2"]


def test_a_crash_loop_on_a_torn_checkpoint_is_a_restart_loop_naming_the_error(tmp_path: Path) -> None:
    job = Job(tmp_path).steps(1, 5)
    job.progress.fault_injected()  # the crash that tore the file: the first restart answers it
    pid = 400
    job.print("node0", FAILED.format(pid=1))
    for _ in range(Limits().restart_loop_restarts + 1):  # each round loads the torn file and dies before a step
        pid += 10
        job.storage("checkpoint_loaded", pid, sha256="torn", step=None)
        job.print("node0", "Traceback (most recent call last):\n", TORN, FAILED.format(pid=pid))
    end = job.end.check(now=1.0, started=0.0)
    assert end is not None and end.reason is EndReason.RESTART_LOOP, end
    assert "failed finding central directory" in end.why and "node0" in end.why
    assert job.progress.restarts >= Limits().restart_loop_restarts


def test_without_the_storage_layer_a_node_failing_again_proves_a_round(tmp_path: Path) -> None:
    job = Job(tmp_path).steps(1, 5)
    for pid in range(3):
        job.print("node0", TORN, FAILED.format(pid=pid))
    assert len(job.starts()) == 3  # the first round, then the two rounds that died (the pending one is not yet seen)


def test_failures_before_the_first_step_are_left_to_the_failed_start_check(tmp_path: Path) -> None:
    job = Job(tmp_path)
    for pid in range(3):
        job.print("node0", FAILED.format(pid=pid))
    assert job.starts() == [] and job.progress.node_logs is not None
    assert len(job.progress.node_logs.worker_failures["node0"]) == 3


ALL_RANKS = r"epoch \d+ \| iter (?P<step>\d+)/\d+"  # no rank group: every rank's line matches


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class AllRanksJob(Job):
    """Every rank prints the same progress line, without its rank; ``clock`` is the engine's monotonic time."""

    def __init__(self, tmp_path: Path, nodes: tuple[str, ...] = ("node0", "node1")):
        self.events = tmp_path / "events.jsonl"
        self.events.touch()
        self.logs = {n: tmp_path / f"{n}.log" for n in nodes}
        for log in self.logs.values():
            log.touch()
        self.clock = Clock()
        self.log_progress = LogProgress(ALL_RANKS, self.logs, HistoryWriter(self.events), clock=self.clock)
        self.progress = ProgressObserver(self.events, self.log_progress, None, lambda _: None, now=0.0,
                                         node_logs=NodeLogs(self.logs))

    def ranks(self, first: int, last: int, *logs: tuple[str, int]) -> AllRanksJob:
        """Steps first..last printed by each (node, local ranks) of ``logs``, one read per step."""
        for s in range(first, last + 1):
            self.clock.t += 0.05
            for node, local_ranks in logs:
                with open(self.logs[node], "a") as f:
                    f.writelines(f"epoch 0 | iter {s}/240\n" for _ in range(local_ranks))
            self.progress.drain()
        return self

    def steps_written(self) -> list[tuple[str, int]]:
        return [(e["pid"], e["step"]) for e in read_history(self.events) if e["event"] == "step_completed"]


def test_every_node_printing_the_same_lines_is_one_round_and_a_crash_one_restart(tmp_path: Path) -> None:
    both = (("node0", 1), ("node1", 1))
    job = AllRanksJob(tmp_path).ranks(1, 70, *both)
    assert job.starts() == ["node0:1"] and job.progress.restarts == 0
    assert [s for _, s in job.steps_written()] == list(range(1, 71))  # each step once
    assert job.log_progress.duplicate_nodes == {"node1"}
    job.clock.t += 7.0  # node1 crashed; the round ends on both nodes and resumes from step 60
    job.print("node0", FAILED.format(pid=1)).print("node1", FAILED.format(pid=2))
    job.ranks(61, 100, *both)
    assert job.starts() == ["node0:1", "node0:2"] and job.progress.restarts == 1
    assert [s for pid, s in job.steps_written() if pid == "node0:2"] == list(range(61, 101))


def test_every_node_printing_restart_without_failure_lines_is_one_restart(tmp_path: Path) -> None:
    both = (("node0", 1), ("node1", 1))
    job = AllRanksJob(tmp_path).ranks(1, 70, *both)
    job.clock.t += 7.0
    job.ranks(61, 80, ("node1", 1), ("node0", 1))  # node1's log shows the resumed round first
    assert job.progress.restarts == 1, job.starts()


def test_local_ranks_printing_the_same_lines_in_one_log_are_not_restarts(tmp_path: Path) -> None:
    job = AllRanksJob(tmp_path, nodes=("node0",)).ranks(1, 50, ("node0", 4))
    assert job.starts() == ["node0:1"] and job.progress.restarts == 0
    assert [s for _, s in job.steps_written()] == list(range(1, 51))
    job.clock.t += 6.0  # workers restarted without a failure line: a lower step, seconds later, is a new round
    job.ranks(41, 60, ("node0", 4))
    assert job.progress.restarts == 1


def test_rank0_moving_to_another_node_after_a_restart_is_still_one_restart(tmp_path: Path) -> None:
    job = AllRanksJob(tmp_path).ranks(1, 30, ("node0", 1))  # only rank 0 prints, on node0
    job.clock.t += 6.0
    job.print("node1", FAILED.format(pid=2))
    job.ranks(21, 40, ("node1", 1))  # node0 is gone: rank 0 is now node1's
    assert job.starts() == ["node0:1", "node1:1"]
    assert [s for pid, s in job.steps_written() if pid == "node1:1"] == list(range(21, 41))


def test_a_node_restarted_by_the_runtime_reprinting_its_step_at_once_is_a_restart(tmp_path: Path) -> None:
    job = AllRanksJob(tmp_path, nodes=("node0",)).ranks(1, 1, ("node0", 1))
    for _ in range(3):  # a job dying right after its first step, restarted by the runtime within milliseconds
        job.print("node0", "\n===== torch-chaos: starting node0 at 1000.0\n", "epoch 0 | iter 1/240\n")
    assert job.progress.restarts == 3
