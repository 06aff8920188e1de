"""Headless Chromium for the report tests, started as this machine needs it (no sandbox as root, and no background
networking: the closed network refuses Chromium's own connections, many at a time)."""

from __future__ import annotations

import shutil
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def launch(playwright: Any) -> Any:
    """A Chromium browser of ``sync_playwright()``'s (close it when done)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
