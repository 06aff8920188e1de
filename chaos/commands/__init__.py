"""The subcommands of ``chaos`` / ``torch-chaos``: one module per subcommand, each with ``main(args) -> int``.

``chaos/cli.py`` holds the argument parser and imports only the module of the subcommand chosen
(``chaos.commands.<name>``): so each module imports what its command needs at its top (the engine, the analysis,
matplotlib, hypothesis), and ``chaos --help`` or ``chaos validate`` loads none of what the others need. This package
itself holds what every command prints with, so it stays light: the CLI's ``main`` uses it for its own errors.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rich.text import Text

from chaos.terminal import SafeConsole

if TYPE_CHECKING:
    from chaos.loading import ScenarioInvalid

EXIT_INTERRUPTED = 130
# Whether this process is the command's own (``chaos.cli.entry``: the ``chaos`` script, ``python -m chaos``), not a
# test or a program that calls ``chaos.cli.main`` and goes on: only then may a command change process-wide settings
# (the garbage collector's, in ``chaos run``).
_own_process = [False]


def claim_process() -> None:
    _own_process[0] = True


def process_is_ours() -> bool:
    return _own_process[0]

# No markup and no emoji codes: what the consoles print is mostly what users and their jobs wrote (scenario names,
# paths, a worker's last lines such as "[rank0]: ..."), which rich would otherwise read as styles (dropping the text,
# or failing on a stray "[/...]") and ":name:" as emoji. Styled words are Text spans (error, styled).
out = SafeConsole(width=None if sys.stdout.isatty() else 120, markup=False, emoji=False)
err = SafeConsole(stderr=True, soft_wrap=True, markup=False, emoji=False)  # one error per line: file:line: field: why


def styled(style: str, word: str, rest: str = "") -> Text:
    """``word`` in ``style``, then ``rest`` as it is."""
    return Text.assemble((word, style), " " if rest else "", rest)


def error(message: str) -> None:
    """``error <message>`` on stderr, the message exactly as given."""
    err.print(styled("red", "error", message), highlight=False)


def scenario_errors(exc: ScenarioInvalid) -> None:
    """Each error of a scenario, then what could not be checked before they are fixed (a note, not an error)."""
    for e in exc.errors:
        error(str(e))
    if exc.later:
        err.print(f"note: {exc.later}", style="dim", highlight=False)
