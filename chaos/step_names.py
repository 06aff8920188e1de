"""Numbers in checkpoint names that are no step: dates and times of day.

The storage layer reads a save's step from its path and the analysis reads one from a file name (histories from
before the layer said); both blank these first. Standard library only, so either side imports it.
"""

from __future__ import annotations

import re

# A date or a time of day in a name (Ray Train's `checkpoint_2026-12-06_14-50-04.714704`, `run-20261206-142948`):
# its numbers are no step (at step 12 the month of December would pass for it).
_DATE = r"(?:19|20)\d{2}[-_.]?(?:0[1-9]|1[0-2])[-_.]?(?:0[1-9]|[12]\d|3[01])"
_TIME = r"(?:[01]\d|2[0-3])[-_:.]?[0-5]\d[-_:.]?[0-5]\d"
TIMESTAMP = re.compile(rf"(?<!\d)(?:{_DATE}(?:[T_-]?{_TIME})?|(?:[01]\d|2[0-3])[-:][0-5]\d[-:][0-5]\d)"
                       r"(?:\.\d+)?(?!\d)")


def blank_timestamps(text: str) -> str:
    """``text`` with every date and time of day replaced by ``_`` (their digits are then no number of it)."""
    return TIMESTAMP.sub("_", text)
