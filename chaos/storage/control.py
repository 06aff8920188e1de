"""The engine's side of the storage layer's rules file: install or remove a storage fault's rule and wait until
the server enforces it (docs/design.md, "The storage layer").

A fault whose rule the server never acknowledged did not happen: :meth:`StorageControl.apply` raises, and the
engine records ``fault_failed`` instead of a fault that silently never acted.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.channel import ChannelServer

RULES_FILE = "rules.json"
APPLIED_FILE = "applied"
MATCHED_FILE = "matched.json"  # {fault_id: operations its rule matched}, written by the server before ``applied``
ACK_TIMEOUT_S = 5.0
# The channel protocol between the engine and every host layer (chaos.storage.hostlayer):
HOST_WHO = "storage"  # the ``who`` of every host layer's connection: the rules order goes to all of them
RULES_ORDER = "storage_rules"  # the engine's standing order: {"version": n, "rules": [...]}
RULES_STATE = "storage_rules"  # what a layer reports back: the version it enforces
MATCHED_STATE = "storage_matched"  # and how many operations each fault's rule matched there: {"<fault_id>": n}



class StorageNotAcknowledged(RuntimeError):
    """The storage layer did not confirm a rule change in time (it is not running, or it is stuck)."""


class StorageControl:
    """The rules of the layer on the engine's host, through ``rules.json`` and ``applied`` in the run directory."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.version = 0
        self.rules: dict[int, dict[str, Any]] = {}
        self.enforced_by = "the storage layer on the engine's host"

    def described(self) -> str:
        """How the current rules reached the layer (for a fault's mechanism)."""
        return f"rules.json v{self.version}"

    def apply(self, rule: dict[str, Any]) -> None:
        """Install ``rule`` (it has ``fault_id`` and ``kind``) and return once the server enforces it."""
        self.rules[int(rule["fault_id"])] = rule
        self._publish()

    def remove(self, fault_id: int) -> None:
        """Remove a fault's rule (its heal) and return once the server no longer enforces it."""
        if self.rules.pop(fault_id, None) is not None:
            self._publish()

    def matched(self, fault_id: int) -> int | None:
        """How many operations the fault's rule matched while it was installed (None: the layer did not say)."""
        try:
            counts = json.loads((self.directory / MATCHED_FILE).read_text())
        except (OSError, ValueError):
            return None
        value = counts.get(str(fault_id)) if isinstance(counts, dict) else None
        return value if isinstance(value, int) else None

    def _publish(self) -> None:
        self.version += 1
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".{RULES_FILE}.tmp"
        tmp.write_text(json.dumps({"version": self.version, "rules": list(self.rules.values())}))
        os.replace(tmp, self.directory / RULES_FILE)
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if int((self.directory / APPLIED_FILE).read_text().strip() or 0) >= self.version:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.01)
        raise StorageNotAcknowledged(
            f"the storage layer did not confirm rules version {self.version} within {ACK_TIMEOUT_S:g}s")


class ChannelStorageControl(StorageControl):
    """The rules of the layers on the nodes' hosts (:mod:`chaos.storage.hostlayer`): a standing order over the history
    channel to every host's layer, confirmed once each connected layer reports the version it enforces.

    A layer that connects later gets the order before it mounts. A layer that does not answer in time (its host
    frozen with the node, or gone) makes the fault ``fault_failed``, as a silent rules file does. With no layer
    connected (every node between incarnations) the order stands and nobody needs to confirm it now."""

    def __init__(self, channel: ChannelServer, directory: Path):
        super().__init__(directory)
        self.channel = channel
        self.enforced_by = "no node host's storage layer yet (the rule stands for the next to mount)"

    def described(self) -> str:
        return f"rules v{self.version} over the history channel, confirmed by {self.enforced_by}"

    def matched(self, fault_id: int) -> int | None:
        """The operations the fault's rule matched on every node host's layer, those since gone included (each
        layer's last count, told when it applied a version and when the rule first matched there); None when no
        layer has said (none mounted yet, or one from before the counts were told)."""
        said = [c for c in self.channel.said(HOST_WHO, MATCHED_STATE) if isinstance(c, dict)]
        if not said:
            return None
        return sum(v for c in said if isinstance(v := c.get(str(fault_id), 0), int))

    def _publish(self) -> None:
        self.version += 1
        self.channel.order(RULES_ORDER, HOST_WHO, {"version": self.version, "rules": list(self.rules.values())})
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while True:
            said = self.channel.states(HOST_WHO, RULES_STATE)
            behind = [v for v in said if not isinstance(v, int) or v < self.version]
            if not behind:
                self.enforced_by = (f"the layers on {len(said)} node host(s)" if said
                                    else "no node host's storage layer yet (the rule stands for the next to mount)")
                return
            if time.monotonic() > deadline:  # those that did confirm enforce it until the withdrawal reaches them
                raise StorageNotAcknowledged(
                    f"{len(behind)} of {len(said)} node hosts' storage layers did not confirm rules version "
                    f"{self.version} within {ACK_TIMEOUT_S:g}s ({len(said) - len(behind)} did)")
            time.sleep(0.01)
