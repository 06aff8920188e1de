"""The bring-your-own example scenarios (examples/byo/*.yaml) as the tests run them.

The files name their scripts as ``examples/byo/<script>.py``, relative to the repository root, because nodes start
in their own run directory and torch-chaos wants an absolute path there; a user rewrites it once (README.md in
examples/byo). The tests do the same rewrite, to this checkout's absolute path.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BYO_DIR = REPO / "examples" / "byo"


def byo_names() -> list[str]:
    return sorted(p.stem for p in BYO_DIR.glob("*.yaml"))


def byo_text(name: str) -> str:
    """The scenario text with its script path made absolute, as the README tells a user to do."""
    return (BYO_DIR / f"{name}.yaml").read_text().replace("examples/byo/", f"{BYO_DIR}/")
