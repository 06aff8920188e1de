"""What ``chaos.run`` (and :meth:`chaos.engine.Engine.run`) returns: the run's result.json, with its run directory.

Not to be confused with the analysis that computes result.json from a history (``write_result``); this is only
the handle a caller gets back.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chaos.analysis.result_model import ResultModel
from chaos.analysis.verdict import Verdict

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
    def model(self) -> ResultModel:
        """The same result, typed (``chaos.analysis.result_model``): what torch-chaos itself reads."""
        return ResultModel.from_dict(self)

    @property
    def passed(self) -> bool:
        return self.model.passed

    @property
    def errored(self) -> bool:
        """The test did not happen (verdict ``error``): nothing about the job was proven, pass or fail."""
        return self["verdict"] in ERROR_VERDICTS

    @property
    def exit_code(self) -> int:
        """What ``chaos run`` exits with for this result (``exit_code_for``)."""
        return exit_code_for(self["verdict"])

    def plain(self) -> str:
        """The summary as plain lines, one fact each (no box drawing, no colour): what a CI log, a JUnit message
        and a CI summary page show well. :meth:`table` is the terminal's."""
        return plain_summary(self)

    def figures(self) -> list[tuple[str, str]]:
        """Every measured figure and verdict as (name, value) pairs, for JUnit properties a CI can trend:
        ``chaos_verdict``, ``chaos_goodput``, ``chaos_fault<id>_recovery_s`` ..., ``chaos_checkpoint_<verdict>``."""
        return measured_figures(self)

    def table(self) -> str:
        """The terminal summary as plain text (used as the failure message in pytest)."""
        from rich.console import Console

        # lazy: the engine and analysis behind the console summary, only when a result is printed
        from chaos.console import summary

        console = Console(width=120, record=True, file=io.StringIO(), color_system=None, markup=False, emoji=False)
        summary(self.model, console, report=self.run_dir / "report.html")
        return console.export_text()


def _text(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:.3g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def _checkpoint_word(entry: Verdict) -> str:
    ok = entry.ok
    word = "ok" if ok else "not_checked" if ok is None else "failed"
    mode = entry.get("mode")
    return f"{word} ({mode})" if mode and mode != "not_checked" and ok is not None else word


def _model(r: ResultModel | Mapping[str, Any]) -> ResultModel:
    return r if isinstance(r, ResultModel) else ResultModel.from_dict(r)


def plain_summary(result: ResultModel | Mapping[str, Any]) -> str:
    """result.json as plain lines: the verdict and why, each fault, each expectation, each checkpoint verdict."""
    r = _model(result)
    lines = [f"verdict: {r.verdict} ({r.end_reason}): {r.why}"]
    for f in r.faults:
        done = (f"restarted, resumed from step {f.resumed_from}" if f.restarted
                else "no restart") if f.injected else f"NOT INJECTED ({f.outcome}: {f.why_not_injected})"
        lines.append(f"fault {f.id} {f.kind} on {f.target}: {done}; recovery "
                     f"{_text(f.recovery_s, ' s')}, lost steps {_text(f.lost_steps)}, slowdown "
                     f"{_text(f.slowdown, 'x')}")
    for x in r.expectations:
        lines.append(f"expect {x.name} {x.limit}: measured {_text(x.value)} -> {'ok' if x.ok else 'NOT MET'}")
    for name, entry in r.checkpoint.items():
        lines.append(f"checkpoint {name}: {_checkpoint_word(entry)}: {entry.why}".rstrip(": "))
    goodput = "not reported" if r.goodput_why else _text(r.goodput)
    lines.append(f"steps completed {r.steps_completed}, worker restarts {r.restarts}, node "
                 f"replacements {r.node_replacements}, goodput {goodput}, run "
                 f"{_text(r.duration_s, ' s')}")
    return "\n".join(lines)


def measured_figures(result: ResultModel | Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, value) for every figure a CI may trend; a figure that was not measured is left out, not zeroed."""
    r = _model(result)
    found: list[tuple[str, Any]] = [("chaos_verdict", r.verdict), ("chaos_end_reason", r.end_reason),
                                    ("chaos_duration_s", r.duration_s), ("chaos_goodput", r.goodput),
                                    ("chaos_steps_completed", r.steps_completed),
                                    ("chaos_restarts", r.restarts),
                                    ("chaos_node_replacements", r.node_replacements)]
    for f in r.faults:
        prefix = f"chaos_fault{f.id}"
        found += [(f"{prefix}_kind", f.kind), (f"{prefix}_injected", f.injected)]
        found += [(f"{prefix}_recovery_s", f.recovery_s), (f"{prefix}_catch_up_s", f.catch_up_s),
                  (f"{prefix}_lost_steps", f.lost_steps), (f"{prefix}_lost_work_s", f.lost_work_s),
                  (f"{prefix}_resumed_from", f.resumed_from), (f"{prefix}_slowdown", f.slowdown)]
    for name, entry in r.checkpoint.items():
        found.append((f"chaos_checkpoint_{name}", _checkpoint_word(entry)))
    return [(name, str(value).lower() if isinstance(value, bool) else str(value))
            for name, value in found if value is not None]
