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
from typing import Any

RULES_FILE = "rules.json"
APPLIED_FILE = "applied"
ACK_TIMEOUT_S = 5.0


class StorageNotAcknowledged(RuntimeError):
    """The storage layer did not confirm a rule change in time (it is not running, or it is stuck)."""


class StorageControl:
    def __init__(self, directory: Path):
        self.directory = directory
        self.version = 0
        self.rules: dict[int, dict[str, Any]] = {}

    def apply(self, rule: dict[str, Any]) -> None:
        """Install ``rule`` (it has ``fault_id`` and ``kind``) and return once the server enforces it."""
        self.rules[int(rule["fault_id"])] = rule
        self._publish()

    def remove(self, fault_id: int) -> None:
        """Remove a fault's rule (its heal) and return once the server no longer enforces it."""
        if self.rules.pop(fault_id, None) is not None:
            self._publish()

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
