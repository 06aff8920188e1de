"""Terminal output that data cannot take over: :class:`SafeConsole` and :func:`escape_controls`."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console
from rich.segment import Segment

__all__ = ["SafeConsole", "escape_controls"]

# Characters a terminal acts on rather than shows: C0 controls but tab and newline (ESC starts colour, cursor,
# title and hyperlink sequences), DEL, C1 controls, and the bidirectional overrides that reorder what is shown.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with every character a terminal would act on shown as its escape (``\\x1b``, ``\\u202e``)."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


class SafeConsole(Console):
    """A rich Console whose printed data cannot drive the terminal.

    Scenario field names, worker output, a history's mechanisms and a run's platform string come from files
    anyone can write; an escape sequence in them would recolour, clear or retitle the user's terminal, or hide
    text (measured by a hostile sweep: an events.jsonl mechanism of ESC[2J cleared the screen under ``chaos
    report``). Every segment of text is escaped as it is rendered; rich's own styling comes from its styles and
    control segments, which pass unchanged."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            s if s.control else Segment(escape_controls(s.text), s.style, s.control) for s in buffer)
