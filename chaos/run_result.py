"""What ``chaos.run`` (and :meth:`chaos.engine.Engine.run`) returns: the run's result.json, with its run directory.

Not to be confused with the analysis that computes result.json from a history (``write_result``); this is only
the handle a caller gets back.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

# The command's exit codes (chaos/cli.py), one per kind of outcome: a CI job tells "the job broke" (1) from "the
# test did not happen" (3: a planned fault never fired, the engine failed, the job never started, nothing was
# recorded), and both from a scenario it could not read (2).
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3

# The verdicts that say the test did not happen (result_json.build_result's "error"); every other verdict but
# "pass" is a finding about the job (fail, hung, restart_loop).
ERROR_VERDICTS = frozenset({"error"})


def exit_code_for(verdict: str) -> int:
    """0 pass, 3 the test did not happen (verdict ``error``), 1 any other verdict (the job broke)."""
    if verdict == "pass":
        return EXIT_PASS
    return EXIT_ERROR if verdict in ERROR_VERDICTS else EXIT_FAIL


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

    @property
    def errored(self) -> bool:
        """The test did not happen (verdict ``error``): nothing about the job was proven, pass or fail."""
        return self["verdict"] in ERROR_VERDICTS

    @property
    def exit_code(self) -> int:
        """What ``chaos run`` exits with for this result (``exit_code_for``)."""
        return exit_code_for(self["verdict"])

    def table(self) -> str:
        """The terminal summary as plain text (used as the failure message in pytest)."""
        from rich.console import Console

        from chaos.console import summary

        console = Console(width=120, record=True, file=io.StringIO(), color_system=None, markup=False, emoji=False)
        summary(dict(self), console)
        return console.export_text()
