"""What the history channel measured (chaos/channel.py): the clocks of the senders against the engine's, and
what the channel carried. result.json's ``channel``; the reports state the skew from it.

Everything comes from the history (``clock_sync`` lines, one per measurement, and ``channel_closed``), so a
report recomputed from the run directory says the same as the run did.
"""

from __future__ import annotations

import statistics
from typing import Any

from chaos.events import Ev
from chaos.history import Event


def channel_summary(events: list[Event]) -> dict[str, Any] | None:
    """``{transport, senders, measurements, max_abs_offset_s, offset_error_s, max_offset_sender, median_rtt_s,
    max_rtt_s, corrected_senders, connections, reconnections, events, duplicates, acks}``; None for a history
    written without the channel (a probe appending to the file, or an engine from before it).

    A sender's offset is its measurement with the shortest round trip (NTP's filter: a measurement's error is at
    most half its round trip, and a round trip stretched by a busy engine or node says little). The skew is the
    largest such offset over the senders, ``offset_error_s`` that measurement's half round trip."""
    syncs = [e for e in events if e.get("event") == Ev.CLOCK_SYNC and isinstance(e.get("offset_s"), (int, float))
             and isinstance(e.get("rtt_s"), (int, float))]
    closed = next((e for e in events if e.get("event") == Ev.CHANNEL_CLOSED), None)
    if not syncs and closed is None:
        return None
    best: dict[Any, Event] = {}
    for e in syncs:
        sender = e.get("sender")
        if sender not in best or e["rtt_s"] < best[sender]["rtt_s"]:
            best[sender] = e
    worst = max(best.values(), key=lambda e: abs(e["offset_s"]), default=None)
    rtts = [e["rtt_s"] for e in syncs]
    out: dict[str, Any] = {
        "transport": "tcp",
        "senders": len(best),
        "measurements": len(syncs),
        "max_abs_offset_s": abs(worst["offset_s"]) if worst else None,
        "offset_error_s": worst["rtt_s"] / 2 if worst else None,
        "max_offset_sender": worst.get("sender") if worst else None,
        "median_rtt_s": statistics.median(rtts) if rtts else None,
        "max_rtt_s": max(rtts) if rtts else None,
        "corrected_senders": len({e.get("sender") for e in syncs if e.get("corrected") is True}),
    }
    for key in ("connections", "reconnections", "events", "duplicates", "acks"):
        value = closed.get(key) if closed else None
        out[key] = value if isinstance(value, int) else None
    return out


def skew_sentence(channel: dict[str, Any] | None) -> str | None:
    """One line for the reports: the measured skew between the nodes' clocks and the engine's."""
    if not channel or channel.get("max_abs_offset_s") is None:
        return None
    corrected = channel.get("corrected_senders") or 0
    return (f"clock skew: largest offset {channel['max_abs_offset_s'] * 1e3:.3f} ms "
            f"± {channel['offset_error_s'] * 1e3:.3f} ms over {channel['senders']} senders "
            f"({channel['measurements']} measurements, median round trip {channel['median_rtt_s'] * 1e3:.3f} ms); "
            + (f"{corrected} sender(s) corrected to the engine's clock" if corrected else
               "within the measurement, no timestamp corrected"))
