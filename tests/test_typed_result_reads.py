"""The run's figures are read by attribute outside result.json's serializer and loader (issue 31: ``recovery_s`` was
read by string key in 16 files), and the loader reads every schema it claims to."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chaos.analysis.result_model import FAULT_FIGURES, RESULT_SCHEMA_VERSION, ResultModel, ResultUnreadable

CHAOS = Path(__file__).resolve().parents[1] / "chaos"
# The one serializer (builds result.json's content) and the one loader (reads it into objects).
SERIALIZER_AND_LOADER = {CHAOS / "analysis" / "result_json.py", CHAOS / "analysis" / "result_model.py"}
# The result's figures: per fault, and for the whole run (none of them is also an event's field).
FIGURES = (*FAULT_FIGURES, "goodput", "median_step_s", "training_time_s", "steps_completed", "step_executions",
           "node_replacements")
KEYED_READ = re.compile(r"""(\[|\.get\(\s*)["'](?P<name>""" + "|".join(FIGURES) + r""")["']""")


def test_no_figure_is_read_by_string_key_outside_the_serializer_and_the_loader() -> None:
    found = []
    for path in sorted(CHAOS.rglob("*.py")):
        if path in SERIALIZER_AND_LOADER:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if (m := KEYED_READ.search(line)) is not None:
                found.append(f"{path.relative_to(CHAOS.parent)}:{number}: {m.group('name')} read by key")
    assert found == [], "read the figure by attribute (chaos.analysis.result_model):\n" + "\n".join(found)


def test_the_check_itself_finds_a_keyed_read() -> None:
    assert KEYED_READ.search('recoveries = [f["recovery_s"] for f in faults]')
    assert KEYED_READ.search("first.get('lost_steps')")
    assert not KEYED_READ.search("recoveries = [f.recovery_s for f in faults]")


@pytest.mark.parametrize("name", ["corrupt-latest-checkpoint", "plain-ddp-crash"])  # schema 11 and 6 as recorded
def test_the_loader_reads_the_recorded_result_files_of_older_schemas(name: str) -> None:
    path = Path(__file__).parent / "data" / "histories" / name / "result.json"
    data = json.loads(path.read_text())
    model = ResultModel.from_dict(data)
    assert model.schema_version == data["schema_version"] <= RESULT_SCHEMA_VERSION
    assert model.verdict == data["verdict"] and len(model.faults) == len(data["faults"])
    for fault, raw in zip(model.faults, data["faults"], strict=True):
        assert fault.recovery_s == raw["recovery_s"] and fault.injected is raw.get("injected", True)
    assert {n: v.ok for n, v in model.checkpoint.items()} == {n: v["ok"] for n, v in data["checkpoint"].items()}


def test_the_loader_refuses_a_newer_schema_and_another_shape_with_a_sentence() -> None:
    with pytest.raises(ResultUnreadable, match=f"newer than this torch-chaos reads \\({RESULT_SCHEMA_VERSION}\\)"):
        ResultModel.from_dict({"schema_version": RESULT_SCHEMA_VERSION + 1, "verdict": "pass"})
    with pytest.raises(ResultUnreadable, match="no verdict"):
        ResultModel.from_dict({"faults": []})
    with pytest.raises(ResultUnreadable, match="another shape"):
        ResultModel.from_dict({"verdict": "pass", "faults": [{"kind": "crash"}]})
