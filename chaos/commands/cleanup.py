"""``chaos cleanup``: remove what runs whose engine died left behind."""

from __future__ import annotations

import argparse

from chaos.cleanup import cleanup
from chaos.commands import error, out
from chaos.engine.core import RUN_ID
from chaos.run_result import EXIT_PASS, EXIT_USAGE


def main(args: argparse.Namespace) -> int:
    """Remove leftovers of dead engines (``--run-id``: one run's; ``--all``: live runs' too); a bad run id is a
    usage error before anything is touched."""
    if args.run_id is not None and not RUN_ID.fullmatch(args.run_id):
        error(f"--run-id {args.run_id!r}: not a run id (a run directory's name, such as "
              "20261201-113130-quickstart-f534b9); without --run-id, cleanup removes what dead engines left")
        return EXIT_USAGE
    removed = cleanup(args.run_id, only_orphans=not args.all and args.run_id is None)
    for line in removed:
        out.print(f"removed {line}", highlight=False)
    out.print(f"removed {len(removed)} leftover torch-chaos object(s)", highlight=False)
    return EXIT_PASS
