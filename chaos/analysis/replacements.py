"""Why each node replacement happened, read from the history (``chaos.reports`` explains the replacement count).

A crash of one node can be followed by more replacements than one: the replaced node (or another one) may exit
again by itself, e.g. a torchrun agent giving up on its rendezvous round, or a job that fails to load its
checkpoint. A bare "node replacements 3" for one crash reads like a miscount; each replacement is explained here by
the exit that preceded it and the fault, if any, that acted on that node since its previous start.
"""

from __future__ import annotations

from typing import Any

from chaos.analysis.load import Event, of_kinds
from chaos.events import Ev


def replacement_causes(events: list[Event]) -> list[dict[str, Any]]:
    """One entry per replacement (``node_started`` with ``replacement: true``), in order: ``node``, ``t``,
    ``exit_code`` (of the node's exit before it; None when the history has none) and the fault that acted on the
    node since its previous start (``fault_id``, ``fault_kind``; None: the node exited without a fault on it)."""
    out: list[dict[str, Any]] = []
    started: dict[str, float] = {}  # node → t of its latest start
    exits: dict[str, Event] = {}  # node → its latest exit
    faults: list[Event] = []
    for e in of_kinds(events, Ev.NODE_STARTED, Ev.NODE_EXITED, Ev.FAULT_INJECTED):
        kind, node = e.get("event"), e.get("node")
        if kind == Ev.FAULT_INJECTED:
            faults.append(e)
        elif kind == Ev.NODE_EXITED and isinstance(node, str):
            exits[node] = e
        elif kind == Ev.NODE_STARTED and isinstance(node, str):
            if e.get("replacement"):
                since = started.get(node, float("-inf"))
                ex = exits.get(node)
                until = ex["t"] if ex is not None and ex["t"] >= since else e["t"]
                fault = next((f for f in reversed(faults)
                              if f.get("target") == node and since <= f["t"] <= until), None)
                out.append({"node": node, "t": e["t"],
                            "exit_code": ex.get("code") if ex is not None and ex["t"] >= since else None,
                            "fault_id": fault.get("fault_id") if fault else None,
                            "fault_kind": fault.get("kind") if fault else None})
            started[node] = e["t"]
    return out


def explain_replacements(causes: list[dict[str, Any]]) -> str | None:
    """One sentence: how many replacements, and what each group of them followed. None without replacements."""
    if not causes:
        return None
    groups: dict[tuple[Any, ...], int] = {}
    for c in causes:
        key = (c["fault_id"], c["fault_kind"], c["node"], c["exit_code"])
        groups[key] = groups.get(key, 0) + 1
    parts = []
    for (fid, kind, node, code), n in groups.items():
        exit_text = f"exit code {code}" if code is not None else "no exit recorded"
        if fid is not None:
            parts.append(f"{n} after fault #{fid} ({kind} of {node}, {exit_text})")
        else:
            parts.append(f"{n} after {node} exited by itself ({exit_text}, no fault on it since its previous start)")
    total = len(causes)
    return f"{total} node replacement{'s' if total != 1 else ''}: " + "; ".join(parts)
