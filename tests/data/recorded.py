"""Recorded real runs (tests/data/histories/): analysis, reports and compare are tested on them in the fast tier.

Each directory is a real run directory as the engine left it, minus checkpoints and acks, with its history gzipped
(a 600-step three-node history is ~0.9 MB as text, ~0.15 MB gzipped). ``tests/data/record.py`` re-records them;
the list of what is recorded and why is RECORDINGS there.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

RECORDED = Path(__file__).resolve().parent / "histories"


def recorded_names() -> list[str]:
    return sorted(p.name for p in RECORDED.iterdir() if (p / "events.jsonl.gz").exists())


def expand(name: str, into: Path) -> Path:
    """A writable run directory with the recorded run ``name`` (reports write next to the history)."""
    source = RECORDED / name
    run_dir = into / name
    shutil.copytree(source, run_dir, ignore=shutil.ignore_patterns("events.jsonl.gz"))
    with gzip.open(source / "events.jsonl.gz", "rb") as src, (run_dir / "events.jsonl").open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return run_dir
