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
        summary(dict(self), console, report=self.run_dir / "report.html")
        return console.export_text()


def _text(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:.3g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def _checkpoint_word(entry: dict[str, Any]) -> str:
    ok = entry.get("ok")
    word = "ok" if ok else "not_checked" if ok is None else "failed"
    mode = entry.get("mode")
    return f"{word} ({mode})" if mode and mode != "not_checked" and ok is not None else word


def plain_summary(r: dict[str, Any]) -> str:
    """result.json as plain lines: the verdict and why, each fault, each expectation, each checkpoint verdict."""
    lines = [f"verdict: {r['verdict']} ({r.get('end_reason')}): {r['why']}"]
    for f in r.get("faults", []):
        done = (f"restarted, resumed from step {f.get('resumed_from')}" if f.get("restarted")
                else "no restart") if f.get("injected", True) else \
            f"NOT INJECTED ({f.get('outcome')}: {f.get('why_not_injected')})"
        lines.append(f"fault {f['id']} {f['kind']} on {f['target']}: {done}; recovery "
                     f"{_text(f.get('recovery_s'), ' s')}, lost steps {_text(f.get('lost_steps'))}, slowdown "
                     f"{_text(f.get('slowdown'), 'x')}")
    for x in r.get("expectations", []):
        lines.append(f"expect {x['name']} {x.get('limit')}: measured {_text(x.get('value'))} -> "
                     f"{'ok' if x.get('ok') else 'NOT MET'}")
    for name, entry in r.get("checkpoint", {}).items():
        lines.append(f"checkpoint {name}: {_checkpoint_word(entry)}: {entry.get('why') or ''}".rstrip(": "))
    goodput = "not reported" if r.get("goodput_why") else _text(r.get("goodput"))
    lines.append(f"steps completed {r.get('steps_completed')}, worker restarts {r.get('restarts')}, node "
                 f"replacements {r.get('node_replacements')}, goodput {goodput}, run "
                 f"{_text(r.get('duration_s'), ' s')}")
    return "\n".join(lines)


def measured_figures(r: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value) for every figure a CI may trend; a figure that was not measured is left out, not zeroed."""
    found: list[tuple[str, Any]] = [("chaos_verdict", r.get("verdict")), ("chaos_end_reason", r.get("end_reason")),
                                    ("chaos_duration_s", r.get("duration_s")), ("chaos_goodput", r.get("goodput")),
                                    ("chaos_steps_completed", r.get("steps_completed")),
                                    ("chaos_restarts", r.get("restarts")),
                                    ("chaos_node_replacements", r.get("node_replacements"))]
    for f in r.get("faults", []):
        prefix = f"chaos_fault{f['id']}"
        found += [(f"{prefix}_kind", f.get("kind")), (f"{prefix}_injected", f.get("injected", True))]
        found += [(f"{prefix}_{k}", f.get(k)) for k in ("recovery_s", "catch_up_s", "lost_steps", "lost_work_s",
                                                        "resumed_from", "slowdown")]
    for name, entry in r.get("checkpoint", {}).items():
        found.append((f"chaos_checkpoint_{name}", _checkpoint_word(entry)))
    return [(name, str(value).lower() if isinstance(value, bool) else str(value))
            for name, value in found if value is not None]
