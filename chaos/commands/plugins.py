"""``chaos plugins [--json]``: every installed plug-in, where it comes from and what it needs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from chaos.commands import err, out, styled
from chaos.registry import fault_plugins, launcher_plugins, load_errors, rendezvous_plugins, runtime_plugins
from chaos.run_result import EXIT_FAIL, EXIT_PASS


def main(args: argparse.Namespace) -> int:
    """Every installed plug-in, where it comes from and what it needs: what a scenario may name."""

    rows: list[dict[str, Any]] = []
    for name, f in fault_plugins().items():
        rows.append({"group": "fault", "name": name, "summary": f.summary, "module": f.__module__,
                     "needs": sorted(f.needs), "disruptive": f.disruptive, "explore": f.can_generate()})
    for name, r in runtime_plugins().items():
        rows.append({"group": "runtime", "name": name, "summary": r.summary, "module": r.__module__,
                     "capabilities": sorted(r.capabilities) + [f"{c} (where the machine gives it)" for c in
                                                               sorted(getattr(r, "conditional_capabilities", ()))]})
    for name, b in rendezvous_plugins().items():
        rows.append({"group": "rendezvous", "name": name, "summary": b.summary, "module": b.__module__})
    for name, launcher in launcher_plugins().items():
        rows.append({"group": "launcher", "name": name, "summary": launcher.summary, "module": launcher.__module__,
                     "needs": [f"mode {launcher.mode}"] + ([f"runtimes: {', '.join(sorted(launcher.runtimes))}"]
                                                          if launcher.runtimes is not None else [])})
    broken = [str(e) for e in load_errors()]
    if args.json:
        print(json.dumps({"plugins": rows, "failed_to_load": broken}, indent=2))
        return EXIT_PASS if not broken else EXIT_FAIL
    t = Table(title="installed plug-ins (entry points torch_chaos.faults / .runtimes / .rendezvous / .launchers)")
    for col in ("group", "name", "what it does", "needs / gives", "module"):
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(row["group"], row["name"], row["summary"],
                  ", ".join(row.get("needs", row.get("capabilities", []))), row["module"])
    out.print(t)
    for line in broken:
        err.print(styled("red", "failed to load", line), highlight=False)
    return EXIT_PASS if not broken else EXIT_FAIL
