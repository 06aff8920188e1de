"""How a comparison page names its columns and its runs: short column names, each run's report file, a run
directory relative to the page. Shared by the step page (chaos.compare) and the rounds page
(chaos.compare_rounds), which import it; it imports neither."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# A short name longer than this is no shorter than a letter would be worth: columns are lettered A, B, C instead.
SHORT_MAX = 28


def short_names(columns: Sequence[Any]) -> list[str]:
    """The columns' short names: their scenarios' names, less a prefix every one shares ("compare-centralized",
    "compare-elastic-tuned" → "centralized", "elastic-tuned"); letters A, B, C ... when those are not distinct
    (two runs of one scenario) or too long to be short."""
    names = [c.scenario for c in columns]
    if len(names) > 1:
        cut = 0
        first = names[0]
        for i, ch in enumerate(first):
            if ch == "-" and all(n[:i + 1] == first[:i + 1] and len(n) > i + 1 for n in names):
                cut = i + 1
        names = [n[cut:] for n in names]
    if len(set(names)) == len(names) and all(0 < len(n) <= SHORT_MAX for n in names):
        return names
    return [_letter(i) for i in range(len(columns))]


def _letter(i: int) -> str:
    """A, B, ..., Z, AA, AB, ...: a name for the i-th column."""
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(65 + r) + out
    return out


def where(run_dir: str | Path, base: Path | None) -> str:
    """A run directory as the page names it: relative to the page's own directory (``base``), so the page reads
    the same on any machine it is copied to with its runs; the directory's own name without ``base``."""
    if base is None:
        return Path(run_dir).name
    return os.path.relpath(Path(run_dir).resolve(), base.resolve())


def run_report_name(run_dir: str | Path) -> str:
    """Each run's own report beside the comparison, named by its run directory (two runs of one scenario, e.g. two
    cluster shapes of the same file, would overwrite one another under the scenario's name)."""
    return f"{Path(run_dir).resolve().name}.html"
