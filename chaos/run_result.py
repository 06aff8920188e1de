"""What ``chaos.run`` (and :meth:`chaos.engine.Engine.run`) returns: the run's result.json, with its run directory.

Not to be confused with the analysis that computes result.json from a history (``write_result``); this is only
the handle a caller gets back.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any


class RunResult(dict[str, Any]):
    """``result.verdict``, ``result.checkpoint``, ``result.faults`` … read like result.json (it *is* result.json)."""

    def __init__(self, data: dict[str, Any], run_dir: Path):
        super().__init__(data)
        self.run_dir = Path(run_dir)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def passed(self) -> bool:
        return self["verdict"] == "pass"

    def table(self) -> str:
        """The terminal summary as plain text (used as the failure message in pytest)."""
        from rich.console import Console

        from chaos.console import summary

        console = Console(width=120, record=True, file=io.StringIO(), color_system=None, markup=False, emoji=False)
        summary(dict(self), console, report=self.run_dir / "report.html")
        return console.export_text()
