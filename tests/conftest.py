"""Shared fixtures: every test that starts processes must leave none behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chaos.runtimes.local import marked_processes


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    before = {p.pid for p in marked_processes(None)}
    yield
    left = [p for p in marked_processes(None) if p.pid not in before]
    assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"
