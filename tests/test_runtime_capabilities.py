"""Every capability a runtime declares is backed by its own code (chaos/runtimes/capability.py, ``BACKING``)."""

from __future__ import annotations

from typing import ClassVar

import pytest

from chaos.capabilities import CAPABILITIES, FREEZE, KILL, NODE_NETWORK
from chaos.registry import runtime_plugins
from chaos.runtimes.base import Runtime
from chaos.runtimes.capability import BACKING, unbacked


@pytest.mark.parametrize("name", sorted(runtime_plugins()))
def test_each_registered_runtime_implements_what_it_declares(name: str) -> None:
    assert unbacked(runtime_plugins()[name], Runtime) == []


def test_every_backed_capability_is_a_documented_one() -> None:
    assert set(BACKING) <= set(CAPABILITIES)


def test_a_runtime_that_declares_what_it_left_on_the_default_is_caught() -> None:
    class Boasting(Runtime):  # says it freezes and has networks, implements only kill
        name = "boasting"
        capabilities: ClassVar[frozenset[str]] = frozenset({KILL, FREEZE, NODE_NETWORK})

        def start_node(self, node): ...  # type: ignore[no-untyped-def]
        def exit_code(self, name): ...  # type: ignore[no-untyped-def]
        def kill(self, name): return "SIGKILL"  # type: ignore[no-untyped-def]
        def kill_workers(self, name, sig=9, local_rank=None): ...  # type: ignore[no-untyped-def]
        def freeze(self, name): ...  # type: ignore[no-untyped-def]
        def teardown(self): return []  # type: ignore[no-untyped-def]

    # freeze is overridden but thaw is not: the pair is what backs FREEZE
    Boasting.thaw = Runtime.thaw  # type: ignore[method-assign]
    assert unbacked(Boasting, Runtime) == ["freeze: freeze/thaw", "node_network: net_enter"]
