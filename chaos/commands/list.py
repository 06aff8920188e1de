"""``chaos list [--long]``: the shipped scenarios, with runtime and documented verdict."""

from __future__ import annotations

import argparse
import re

from rich.table import Table
from rich.text import Text

from chaos.commands import out
from chaos.loading import ScenarioInvalid, load_scenario, shipped_scenarios_dir
from chaos.run_result import EXIT_PASS

_EXPECTED_VERDICT = re.compile(r"Expected\s+verdict:\s*`?([A-Za-z_]+)")


def main(args: argparse.Namespace) -> int:
    """One line per shipped scenario, grouped by folder, with its runtime and documented verdict (the words
    "Expected verdict: X" of its description); ``--long``: the whole descriptions."""
    if args.long:
        return _list_long()
    root = shipped_scenarios_dir()
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root).with_suffix("").as_posix()
        try:
            scenario = load_scenario(path)
            found = _EXPECTED_VERDICT.search(scenario.description)
            runtime, verdict = str(scenario.cluster.runtime), found.group(1).lower() if found else "-"
        except ScenarioInvalid as exc:
            runtime, verdict = "?", f"invalid: {exc.errors[0]}"
        groups.setdefault(rel.rpartition("/")[0] or ".", []).append((rel, runtime, verdict))
    width = max(len(rel) for rows in groups.values() for rel, _, _ in rows)
    for folder, rows in groups.items():
        out.print(Text("shipped" if folder == "." else f"{folder}/", style="bold"))
        for rel, runtime, verdict in rows:
            out.print(f"  {rel:<{width}}  {runtime:<7} {verdict}")
    out.print(f"{sum(len(r) for r in groups.values())} scenarios (name, runtime, expected verdict); `chaos list "
              "--long` describes each; `chaos run NAME --runtime docker` runs one on another runtime")
    return EXIT_PASS


def _list_long() -> int:
    """``chaos list --long``: a table of every shipped scenario with its whole description."""
    # One file per scenario, not per runtime: the runtime column is the file's default; `--runtime` runs it on
    # another (a fault the runtime cannot inject is refused then, file:line named, as if the file said so).
    t = Table(title="shipped scenarios",
              caption="run one on another runtime: chaos run NAME --runtime netns (or docker); "
                      "network faults need netns or docker")
    t.add_column("name")
    t.add_column("runtime")
    t.add_column("description", overflow="fold")
    root = shipped_scenarios_dir()
    for path in sorted(root.rglob("*.yaml")):
        try:
            scenario = load_scenario(path)
            desc, runtime = Text(" ".join(scenario.description.split())), str(scenario.cluster.runtime)
        except ScenarioInvalid as exc:
            desc, runtime = Text(f"invalid: {exc.errors[0]}", style="red"), "?"
        t.add_row(str(path.relative_to(root).with_suffix("")), runtime, desc)
    out.print(t)
    return EXIT_PASS
