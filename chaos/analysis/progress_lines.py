"""Why a print-only job recorded no step: its ``progress_regex`` against the lines its nodes printed.

The engine follows a ``command:`` workload through the lines ``workload.progress_regex`` matches in the node logs
(chaos.engine.progress). A regex that matches none (a typo, another case, another format) leaves a run with no
step at all, whose faults were "never reached" and whose figures are empty: that must be said as such, with the
regex and a line it should have matched, not read as a job that made no progress.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from chaos.analysis.load import of_kind
from chaos.events import NODE_BANNER, Ev
from chaos.history import Event
from chaos.progress_regex import LINE_TIMEOUT_S, Budget, compile_progress, search
from chaos.progress_regex import error as progress_error

READ_BYTES = 4 << 20  # of each node log: a run without a single matched line rarely printed more
ANALYSIS_BUDGET_S = 5.0  # for matching the user's pattern against every line read (twice: as written, case ignored)
_DIGITS = re.compile(r"\d+")
# lines that are not the job's progress: torchrun's own log records, tracebacks, the runtime's banner
_NOT_PROGRESS = re.compile(r"^\s*(?:[EWID]\d{4} |\[rank\d+\]:|Traceback|File \"|\s)|^=====")


def line_shape(line: str) -> str | None:
    """A printed line with its numbers collapsed (``step # | loss #.#``), or None for a line that cannot be the
    job's progress (no number; torchrun's own records, tracebacks). The most repeated shape of a job's output is
    usually its progress line."""
    if not _DIGITS.search(line) or _NOT_PROGRESS.match(line):
        return None
    return _DIGITS.sub("#", line.strip())


def node_log_lines(run_dir: Path, events: list[Event]) -> dict[str, list[str]]:
    """Each training node's log (not the store's or the storage layer's), as lines (the first READ_BYTES)."""
    names = sorted({str(e["node"]) for e in of_kind(events, Ev.NODE_STARTED)
                    if e.get("node") is not None and e.get("role") in (None, "node", "worker")})
    out = {}
    for name in names:
        path = run_dir / "logs" / f"{name}.log"
        try:
            with open(path, "rb") as f:
                text = f.read(READ_BYTES).decode(errors="replace")
        except OSError:
            continue
        out[name] = [line for line in text.splitlines() if line.strip() and not line.startswith(NODE_BANNER)]
    return out


def unmatched_progress(run_dir: Path, regex: str, events: list[Event]) -> str | None:
    """When no step was recorded and no line of the job's output matches ``regex``: that, with the regex and a
    sample line (one the regex matches when case is ignored, else the job's most repeated line shape, which is
    usually its progress line). None when a step was recorded, or a line matches (the job did print progress)."""
    from chaos.analysis.metrics import steps

    if len(steps(events)):
        return None
    logs = node_log_lines(run_dir, events)
    lines = [line for node_lines in logs.values() for line in node_lines]
    try:
        pattern = compile_progress(regex)
        insensitive = compile_progress(regex, ignore_case=True)
    except progress_error:
        return None
    # The user's pattern on the job's lines, bounded (chaos.progress_regex): a pattern that backtracks, or one too
    # slow for this many lines, gets no sample here; the engine's own why already says it took too long.
    budget = Budget(ANALYSIS_BUDGET_S)
    try:
        if any(budget.spent() or search(pattern, line, min(LINE_TIMEOUT_S, budget.remaining())) for line in lines):
            return None  # it matched: the job printed progress the engine did not record (not this module's case)
        sample = next((line for line in lines if budget.spent() or search(
            insensitive, line, min(LINE_TIMEOUT_S, budget.remaining()))), None)
    except TimeoutError:
        return None
    if budget.spent():
        return None
    if not logs:  # no training node started (the run ended before, e.g. on its golden run's finding)
        return None
    where = ", ".join(f"logs/{name}.log ({len(node_lines)} line(s))" for name, node_lines in logs.items())
    text = f"workload.progress_regex '{regex}' matched no line of the job's output"
    if not lines:
        return text + f" ({where} printed nothing)"
    text += f" ({where})"
    if sample is not None:
        return text + f"; it matches when case is ignored, e.g. {sample.strip()[:200]!r}"
    shapes = Counter(shape for line in lines if (shape := line_shape(line)) is not None)
    if shapes:
        shape, count = shapes.most_common(1)[0]
        sample = next(line for line in lines if line_shape(line) == shape)
        return text + f"; its most repeated line ({count} times) is {sample.strip()[:200]!r}"
    return text + f"; its last line is {lines[-1].strip()[:200]!r}"
