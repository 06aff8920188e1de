"""``chaos doctor [--json]``: what this machine supports, with the command that fixes each gap."""

from __future__ import annotations

import argparse
import json

from rich.table import Table
from rich.text import Text

from chaos.commands import out
from chaos.doctor import machine_checks
from chaos.registry import fault_plugins, rendezvous_plugins, runtime_plugins
from chaos.run_result import EXIT_FAIL, EXIT_PASS


def main(args: argparse.Namespace) -> int:
    """The machine checks as a table (or ``--json``); exit 1 when a required one fails."""
    checks = machine_checks()
    t = Table(title="what this machine supports")
    for col in ("check", "ok", "detail", "fix"):
        t.add_column(col, overflow="fold")
    for c in checks:
        mark = Text("yes", style="green") if c.ok else Text("no", style="red" if c.required else "yellow")
        t.add_row(c.name, mark, c.detail, "" if c.ok else c.fix)
    if args.json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        out.print(t)
        out.print(f"plug-ins loaded: {len(fault_plugins())} fault kinds, {len(runtime_plugins())} runtimes, "
                  f"{len(rendezvous_plugins())} rendezvous backends; `chaos plugins` lists each, where it comes "
                  "from and what it needs", highlight=False)
    return EXIT_PASS if all(c.ok or not c.required for c in checks) else EXIT_FAIL
