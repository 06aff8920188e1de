"""Analysis computes the same figures, whatever the history's storage (tests/analysis_corpus.py says how recorded).

Each recorded history is analysed as a plain event list (as tests build them) and loaded from a file (as
``chaos report`` reads it, into the column-per-field step table); every figure must equal the one recorded from
the dict-per-event analysis it replaced.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.analysis_corpus import figures, load_corpus, loaded

CORPUS = load_corpus()


def test_corpus_covers_hand_built_and_soak_histories() -> None:
    names = [h["name"] for h in CORPUS]
    assert sum(n.startswith("hand-built-") for n in names) >= 20 and sum(n.startswith("soak-") for n in names) >= 3


@pytest.mark.parametrize("history", CORPUS, ids=[h["name"] for h in CORPUS])
def test_figures_equal_the_recorded_ones(history: dict[str, Any]) -> None:
    events = history["events"]
    assert figures(events) == history["figures"]
    assert figures(loaded(events)) == history["figures_loaded"]
