"""Which real-cluster tests gate every change, and which wait for ``python -m pytest --full`` (the whole matrix).

The gate (plain ``python -m pytest``, what CI runs) keeps one real run for every runtime, fault family and use
(docs/testing.md, "The gate"); every other real run carries the ``full`` mark, in its own test file, so what a
file leaves to ``--full`` is read where its tests are. ``tests/test_suite_coverage.py`` checks the gate still holds
what it must. A parametrized test puts the gate's cases in the gate and marks the rest, with :func:`tiered`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

FULL = pytest.mark.full


def tiered(values: Iterable[Any], gate: Iterable[Any]) -> list[Any]:
    """``values`` as parameters for ``pytest.mark.parametrize``: those in ``gate`` as they are, the rest marked
    ``full``. A name in ``gate`` that is not among ``values`` is a mistake (a renamed scenario would silently leave
    the gate), so it raises at collection."""
    values, gate = list(values), set(gate)
    unknown = gate - set(values)
    if unknown:
        raise ValueError(f"gate names {sorted(unknown)} that are not parameters of this test: {values}")
    return [v if v in gate else pytest.param(v, marks=FULL) for v in values]


# Whether this session runs the whole matrix (``--full``): set by tests/conftest.py in pytest_configure, in the
# controller and in every xdist worker, before any test module is imported.
_full_run = [False]


def set_full_run(full: bool) -> None:
    _full_run[0] = full


def examples(n: int) -> int:
    """How many examples a property-based test draws: ``n`` in the whole matrix, a sixth (at least 20) otherwise.

    The fuzzers' depth is what finds the rare input; every session still runs each property (20 examples or more,
    a fresh draw each session), and ``--full`` the depth it was written with. A sixth since issue 30 (a third
    before): the fast tier's CPU budget on 2 cores. Read at decoration time, so only valid once conftest has
    configured the session."""
    return n if _full_run[0] else max(20, n // 6)
