"""The storage layer's side of the history: its event lines, its holds, and what it reads back.

Lines go to the run's ``events.jsonl`` exactly as :mod:`chaos.probe` writes them (one ``os.write`` per line on an
``O_APPEND`` descriptor, source ``storage``), and an event named in ``CHAOS_PAUSE_ON`` is held the same way: the
line gets an ``id`` and the calling filesystem operation waits for ``<events>.acks/<id>``, for the engine's
heartbeat to go stale, or for the safety timeout. A layer on a node's own host (:mod:`chaos.storage.hostlayer`)
sends its lines over the history channel instead and waits for the engine's acknowledgement there. Holding the
operation holds the job inside its ``open`` or ``write``: a crash triggered on ``checkpoint_save_started`` lands
while the file is being written.

It also reads back, incrementally and only when a save needs it, the step the job is at: the last
``step_completed`` of each node in the history (the probe writes it as the step ends) and, for ``command:``
workloads, the last progress line of each node's log (read here directly: the engine's own scrape of the logs
runs at its 20 ms tick, and a script that prints its step and saves at once would be a step behind). That is
the ``step`` of a save whose file name has no number. And it keeps the step of every finished save by digest
(the ``step`` of a load).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.events import Ev, Source
from chaos.history import FileTail
from chaos.probe import wait_for_ack
from chaos.progress_regex import compile_progress, search
from chaos.step_names import blank_timestamps

if TYPE_CHECKING:
    from chaos.storage.hostlayer import Link

HOLD_TIMEOUT_S = 10.0
READ_CHUNK = 4 << 20
_NUMBER = re.compile(r"\d+")
# A number a word for training progress names: `step_100`, `global_step100`, `it_000080`, `iter-5`, `epoch3`,
# `checkpoint-500`, `ckpt_150` (not preceded by a letter, so `split_1` or `submit3` are not `it`).
_STEP_WORD = re.compile(r"(?<![a-z])(?:global_step|steps?|iter(?:ation)?s?|it|epochs?|checkpoint|ckpt|chkpt)"
                        r"[-_ .]?(\d+)", re.IGNORECASE)



def _parts(path: str) -> list[str]:
    """The named parts of a relative path (no empty, ``.`` or ``..`` parts), dates and times of day blanked."""
    return [blank_timestamps(part) for part in path.replace("\\", "/").split("/") if part not in ("", ".", "..")]


def step_in_name(path: str) -> int | None:
    """The step a checkpoint file's path (relative to the checkpoint directory) names, or None.

    A number after a progress word in the innermost part that has one (``ckpt_150.pt`` -> 150,
    ``it_000080/__0_0.distcp`` -> 80, ``global_step100/mp_rank_00_model_states.pt`` -> 100, ``rank0/step_40.pt``
    -> 40), else the last number of the file name (``model_150.pt`` -> 150). A sharded checkpoint is a directory
    per save whose files number their shards (``__0_0.distcp``, ``rank_1.pt``): the shard is not the step, and
    the save's step is in the directory's name."""
    parts = _parts(path)
    for part in reversed(parts):
        found = _STEP_WORD.findall(part)
        if found:
            return int(found[-1])
    numbers = _NUMBER.findall(parts[-1]) if parts else []
    return int(numbers[-1]) if numbers else None


def _numbers(path: str) -> list[tuple[bool, int]]:
    """Every number of a relative path, innermost part first: (after a progress word, the number)."""
    parts = _parts(path)
    found: list[tuple[bool, int]] = []
    for part in reversed(parts):
        words = {m.start(1) for m in _STEP_WORD.finditer(part)}
        found += [(m.start() in words, int(m.group())) for m in reversed(list(_NUMBER.finditer(part)))]
    return found


def save_step(path: str, progress: int | None, gap: int = 1) -> tuple[int | None, str | None]:
    """A save's step and where it came from (``name`` or ``progress``), given the step the job had reached.

    Without the job's progress, the path's step (:func:`step_in_name`). With it, a number of the path is the step
    only when it lies near that progress: within ``gap`` steps (how far apart the job reports them) or 2, either
    side (a save before or after its step is printed, an asynchronous save that finishes steps later). Otherwise
    the number is something else (an epoch in ``ckpt_epoch1.pt`` of a job that counts iterations, a timestamp,
    a shard index) and the step is the progress the job reported as the save began."""
    if progress is None:
        step = step_in_name(path)
        return step, (None if step is None else "name")
    slack = max(2, gap)
    near = [(not word, abs(n - progress), -n, n) for word, n in _numbers(path) if abs(n - progress) <= slack]
    if near:
        return min(near)[3], "name"
    return progress, "progress"


class Recorder:
    def __init__(self, events_path: str, pause_on: frozenset[str] = frozenset(),
                 hold_timeout_s: float = HOLD_TIMEOUT_S, progress_regex: str | None = None,
                 logs: dict[str, str] | None = None, link: Link | None = None):
        self.path = events_path  # written here, unless ``link`` sends the lines; read back either way (catch_up)
        self.link = link
        self.regex = compile_progress(progress_regex) if progress_regex else None
        self.logs = {node: FileTail(Path(path)) for node, path in (logs or {}).items()}
        self.pause_on = pause_on
        self.hold_timeout_s = hold_timeout_s
        self._fd = -1 if link is not None else os.open(events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._read_lock = threading.Lock()
        self._offset = 0
        self._partial = b""
        self.node_step: dict[str, int] = {}  # the last step each node completed
        self.node_gap: dict[str, int] = {}  # how far apart its last two reported steps were (1: every step)
        self.job_step: int | None = None  # the last step any node completed
        self.step_of_digest: dict[str, int | None] = {}

    def emit(self, event: str, hold: bool = True, gone: Callable[[], bool] | None = None, at: float | None = None,
             **fields: Any) -> bool:
        """Write one line; when ``event`` is paused on (and ``hold``), wait for the engine's acknowledgement, or
        until ``gone()`` says the held caller is dying (a killed process waits for the server's answer). ``at``:
        when the operation happened, for an event written later (a passthrough server's digest thread); else now.

        Returns whether it held."""
        record: dict[str, Any] = {"t": time.time() if at is None else at, "source": Source.STORAGE, "event": event,
                                  **fields}
        held = hold and event in self.pause_on
        if held:
            record["id"] = uuid.uuid4().hex
        if self.link is not None:
            self.link.send(record)
        else:
            os.write(self._fd, (json.dumps(record, default=str) + "\n").encode())
        if event == Ev.CHECKPOINT_SAVE_FINISHED and fields.get("sha256"):
            with self._read_lock:
                self.step_of_digest[fields["sha256"]] = fields.get("step")
        if held and self.link is not None:
            self.link.hold(record["id"], self.hold_timeout_s, gone)
        elif held:
            # the probe's own wait, checking a dying caller every 20 ms (a killed process waits for our answer)
            wait_for_ack(self.path, record["id"], self.hold_timeout_s, gone, check_every_s=0.02)
        return held

    def catch_up(self) -> None:
        """Read what the history gained since the last call: steps per node, and digests of finished saves."""
        with self._read_lock:
            try:
                f = open(self.path, "rb")
            except OSError:
                return
            with f:
                f.seek(self._offset)
                while chunk := f.read(READ_CHUNK):  # a long history is read a few MiB at a time
                    self._offset += len(chunk)
                    lines = (self._partial + chunk).split(b"\n")
                    self._partial = lines.pop()
                    for line in lines:
                        if b'"step_completed"' in line:
                            self._step(line)
                        elif b'"checkpoint_save_finished"' in line:
                            self._saved(line)

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        try:
            e = json.loads(line)
        except ValueError:
            return None
        return e if isinstance(e, dict) else None

    def _step(self, line: bytes) -> None:
        e = self._parse(line)
        if e is None or e.get("event") != Ev.STEP_COMPLETED or not isinstance(e.get("step"), int):
            return
        self._reached(str(e.get("node")), e["step"])

    def _reached(self, node: str, step: int) -> None:
        before = self.node_step.get(node)
        if before is not None and step > before:
            self.node_gap[node] = step - before
        self.node_step[node] = self.job_step = step

    def _saved(self, line: bytes) -> None:
        e = self._parse(line)
        if e is None or e.get("event") != Ev.CHECKPOINT_SAVE_FINISHED or not isinstance(e.get("sha256"), str):
            return
        step = e.get("step")
        self.step_of_digest[e["sha256"]] = step if isinstance(step, int) else None

    def _scrape_logs(self) -> None:
        if self.regex is None:
            return
        rank_group = "rank" in self.regex.groupindex
        for node, tail in self.logs.items():
            for line in tail.read_lines():
                try:
                    m = search(self.regex, line)
                except TimeoutError:  # a pattern that backtracks (the engine ends the run on it): a save waits on
                    self.regex = None  # this, so the logs are no longer read, and saves take the files' own steps
                    return
                if m is None or (rank_group and m.group("rank") not in (None, "0")):
                    continue
                self._reached(node, int(m.group("step")))

    def last_step(self, node: str | None) -> int | None:
        """The step the caller's node last completed, else the job's last step (steps are global), else None."""
        self.catch_up()
        with self._read_lock:
            self._scrape_logs()
            found = self.node_step.get(str(node)) if node is not None else None
            return found if found is not None else self.job_step

    def progress(self, node: str | None) -> tuple[int | None, int]:
        """The step the caller's node last reached (as ``last_step``) and how far apart it reports its steps."""
        step = self.last_step(node)
        with self._read_lock:
            gap = self.node_gap.get(str(node)) or max(self.node_gap.values(), default=1)
        return step, gap

    def saved_step(self, sha256: str) -> tuple[bool, int | None]:
        """Whether a save finished with this digest, and its step."""
        self.catch_up()
        with self._read_lock:
            return sha256 in self.step_of_digest, self.step_of_digest.get(sha256)
