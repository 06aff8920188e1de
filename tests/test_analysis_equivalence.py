"""Analysis computes the same figures, whatever the history's storage (tests/analysis_corpus.py says how recorded).

Each recorded history is analysed as a plain event list (as tests and the golden cache build them) and loaded from
a file (as ``chaos report`` reads it, into the column-per-field step table); every figure must equal the one
recorded from the dict-per-event analysis it replaced. The recorded real runs (tests/data/histories) must also
give the very same result.json content.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.analysis.run import analyze
from chaos.loading import ScenarioInvalid
from tests.analysis_corpus import figures, load_corpus, loaded, recorded_history_figures
from tests.data.recorded import expand, recorded_names

CORPUS = load_corpus()


def test_corpus_covers_hand_built_soak_and_every_recorded_history() -> None:
    names = [h["name"] for h in CORPUS]
    assert sum(n.startswith("hand-built-") for n in names) >= 20 and sum(n.startswith("soak-") for n in names) >= 3
    assert sorted(h["recorded"] for h in CORPUS if "recorded" in h) == recorded_names()


@pytest.mark.parametrize("history", [h for h in CORPUS if "events" in h],
                         ids=[h["name"] for h in CORPUS if "events" in h])
def test_figures_equal_the_recorded_ones(history: dict[str, Any]) -> None:
    events = history["events"]
    assert figures(events) == history["figures"]
    assert figures(loaded(events)) == history["figures_loaded"]


@pytest.mark.parametrize("history", [h for h in CORPUS if "recorded" in h],
                         ids=[h["name"] for h in CORPUS if "recorded" in h])
def test_recorded_runs_give_the_same_figures_and_result(history: dict[str, Any], tmp_path: Path) -> None:
    run_dir = expand(history["recorded"], tmp_path)
    now = recorded_history_figures(run_dir)
    assert now["figures"] == history["figures"]
    assert now["figures_loaded"] == history["figures_loaded"]
    try:
        result = analyze(run_dir)
    except ScenarioInvalid as exc:  # a loading problem, not analysis: the figures above were still compared
        pytest.skip(f"this code cannot load the recording's scenario.yaml: {exc}")
    # the same content; a later schema version only adds keys a recording's history has no events for
    now_result = json.loads(json.dumps(result, default=str))
    assert now_result.pop("schema_version") >= history["result"]["schema_version"]
    assert now_result == {k: v for k, v in history["result"].items() if k != "schema_version"}
