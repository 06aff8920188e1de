"""TORCH_CHAOS_CLUSTER_LANES (tests/conftest.py): N real clusters at once, one per lane; a bad value is a usage
error, not a traceback in every worker."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.conftest import LANES_ENV, _cluster_lanes, _lane


def test_two_lanes_hold_two_tests_and_a_third_waits(tmp_path: Path) -> None:
    share = str(tmp_path / "share")
    entered = threading.Event()

    def third() -> None:
        with _lane(share, 2):
            entered.set()

    with _lane(share, 2), _lane(share, 2):  # both lanes taken, neither waited
        assert sorted(p.name for p in tmp_path.iterdir()) == ["share.lane0", "share.lane1"]
        waiter = threading.Thread(target=third, daemon=True)
        waiter.start()
        assert not entered.wait(0.3)  # no third lane
    assert entered.wait(5)  # it got one once they were released
    waiter.join(5)


@pytest.mark.parametrize("value", ["0", "two", "-1", "²"])
def test_a_lane_count_that_is_not_a_positive_whole_number_is_a_usage_error(
        value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LANES_ENV, value)
    with pytest.raises(pytest.UsageError, match=LANES_ENV):
        _cluster_lanes()


def test_one_lane_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LANES_ENV, raising=False)
    assert _cluster_lanes() == 1
