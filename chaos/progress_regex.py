"""``workload.progress_regex``, compiled once and matched with a time bound.

The pattern is the user's, and the lines it is matched against are the job's: a pattern with nested quantifiers
(``(a|aa)+$``) takes time exponential in a line's length, and Python's ``re`` has no timeout (measured: a run with
``deadline_s: 60`` stayed busy matching past its deadline; a SIGINT that broke one match left the teardown, where
stop signals are ignored, matching the next such lines; SIGKILLed at 126 s without a result). The ``regex``
module takes a ``timeout`` (and checks for signals while it matches), so every match here is bounded: a line that
takes longer than ``LINE_TIMEOUT_S`` raises :class:`ProgressRegexTooSlow`, which names the line and the log and
ends the run as an error (the engine, chaos.engine.progress) or ends the look at the logs (the analysis, the
storage layer's recorder).

``VERSION0`` keeps ``re``'s syntax and semantics, so a pattern means what it meant before.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

try:
    import regex
except ImportError:  # a compute host's Python (the storage layer on a node's host: standard library and mfusepy)
    regex = None

# A progress line of a sane pattern matches in microseconds (a few ms for a line of a megabyte): a line that takes
# longer than this is a pattern that backtracks, not a slow machine.
LINE_TIMEOUT_S = 0.5

# Where ``regex`` is missing (the storage layer on a Slurm compute host runs with the nodes' Python), ``re`` matches
# without a timeout, on at most this much of a line: the engine, which always has ``regex``, matches the same
# pattern on the same output under the bound and ends the run on a pattern that backtracks, which ends the layer.
UNBOUNDED_LINE_MAX = 4096

error = regex.error if regex is not None else re.error
Pattern = Any  # regex.Pattern (its stubs are not installed everywhere), or re.Pattern without regex


def compile_progress(pattern: str, ignore_case: bool = False) -> Pattern:
    """``pattern`` compiled as ``re`` would read it; ``regex.error`` (``error``) when it is not a regex."""
    if regex is None:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    return regex.compile(pattern, regex.VERSION0 | (regex.IGNORECASE if ignore_case else 0))


class ProgressRegexMissed(Exception):
    """``workload.progress_regex`` matched no line a fault-free run of the job printed: the faulted run would
    record nothing either, so it is not started (the message names the pattern and a line it should match)."""


class ProgressRegexTooSlow(Exception):
    """Matching ``workload.progress_regex`` takes too long on this job's output (one line past its bound, or more
    lines waiting than the engine may hold): the message says where, and what to change."""

    @classmethod
    def on_line(cls, pattern: str, line_number: int, log: str | Path, length: int,
                seconds: float) -> ProgressRegexTooSlow:
        return cls(
            f"workload.progress_regex took too long on line {line_number} of {log} (more than {seconds:g}s on one "
            f"line of {length} characters): the pattern '{pattern}' backtracks catastrophically on this output "
            "(nested or overlapping repetition such as (a+)+ or (a|aa)+); rewrite it without nested repetition, "
            r"e.g. 'step (?P<step>\d+)'")


def search(pattern: Pattern, line: str, timeout: float = LINE_TIMEOUT_S) -> Any:
    """``pattern.search(line)``, raising TimeoutError after ``timeout`` seconds (at least a millisecond)."""
    if isinstance(pattern, re.Pattern):  # no regex module here (a compute host): a bounded line, no timeout
        return pattern.search(line[:UNBOUNDED_LINE_MAX])
    return pattern.search(line, timeout=max(timeout, 0.001))


class Budget:
    """A bound on the total time a loop of matches may take (``remaining`` seconds, never below zero), for callers
    that match many lines at once: per-line bounds alone would let ten thousand lines take an hour."""

    def __init__(self, seconds: float):
        self.until = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.until - time.monotonic())

    def spent(self) -> bool:
        return self.remaining() <= 0.0
