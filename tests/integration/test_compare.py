"""The comparison table from real runs: every cell measured, conclusions derived from those cells."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.compare import write_comparison
from tests.comparison import assert_centralized_vs_elastic
from tests.runs import run_shipped
from tests.tiers import FULL

# The whole file waits for --full: compare is tested on recorded runs in the fast tier.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL]


def test_centralized_against_elastic(tmp_path: Path) -> None:
    _, central = run_shipped("centralized-crash")
    _, elastic = run_shipped("quickstart")
    paths = write_comparison([central, elastic], tmp_path / "cmp")
    assert_centralized_vs_elastic(paths)
