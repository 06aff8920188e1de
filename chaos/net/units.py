"""The units a link impairment is given in: a tc rate (``10mbit``) and a delay (``5ms``), as numbers.

Shared by the link kinds' sweep axes (chaos/faults/bandwidth.py, chaos/faults/delay.py) and the interconnect sweep
(chaos/sweep.py), which plots them; standard library and chaos.spec only.
"""

from __future__ import annotations

import re

from chaos.spec import parse_duration

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")
_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def rate_bits(rate: str) -> float:
    """A tc rate in bits per second (``10mbit`` → 1e7; tc's ``mbps`` is megabytes per second)."""
    m = _RATE.match(rate)
    if m is None:
        raise ValueError(f"expected a tc rate such as 10mbit, 500kbit or 1gbit, got {rate!r}")
    return float(m.group(1)) * _BITS[m.group(2)]


def delay_seconds(value: str) -> float:
    """A delay such as ``5ms`` or ``0.02s`` in seconds (a bare number is seconds, as in a scenario)."""
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise ValueError(f"expected a delay such as 0ms, 5ms or 20ms, got {value!r}") from None
    if not isinstance(seconds, float) or seconds < 0:
        raise ValueError(f"expected a delay such as 0ms, 5ms or 20ms, got {value!r}")
    return seconds
