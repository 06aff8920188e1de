"""A failed real-cluster test's rerun gets its shared runs made afresh (tests/conftest.py, tests/runs.py).

Shared runs are cached per session; before this, a rerun was handed the very run it had failed on, so a flaky run
failed twice and the rerun proved nothing (CI of 2026-12-03: elastic-freeze and store-freeze)."""

from __future__ import annotations

import pytest

INNER_CONFTEST = """
from tests.conftest import pytest_runtest_setup, pytest_runtest_teardown  # the hooks under test
"""

INNER_TESTS = """
import itertools

import pytest

from tests import runs

made = itertools.count(1)


def shared():
    return runs._shared("one run", lambda: ({"run": next(made)}, None))[0]["run"]


@pytest.mark.flaky(reruns=1)
def test_fails_on_the_first_run_only():
    assert shared() == 2


def test_a_later_test_shares_the_fresh_run():
    assert shared() == 2


def test_an_unrelated_first_attempt_keeps_the_cache():
    assert next(made) == 3
"""


def test_a_rerun_makes_its_runs_again_and_later_tests_share_the_new_one(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    out = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-q")
    outcomes = out.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("rerun"), outcomes.get("failed")) == (3, 1, None), outcomes
