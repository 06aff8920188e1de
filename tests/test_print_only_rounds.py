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
