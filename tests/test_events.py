"""chaos.events is the one place that names events: declarations complete, writers true to them, no stray names."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import chaos
from chaos import probe
from chaos.events import FIELDS, EndReason, Ev, Source, required_fields
from tests.import_graph import SOURCE_SCANS_GROUP, parsed

CHAOS = Path(chaos.__file__).parent


def test_every_event_has_a_field_declaration_and_members_are_their_strings() -> None:
    assert set(FIELDS) == set(Ev)
    assert len({e.value for e in Ev}) == len(Ev)
    assert Ev.STEP_COMPLETED == "step_completed" and hash(Ev.STEP_COMPLETED) == hash("step_completed")
    assert json.dumps({"event": Ev.RUN_ENDED, "source": Source.ENGINE, "reason": EndReason.HUNG}) == \
        '{"event": "run_ended", "source": "engine", "reason": "hung"}'
    assert {"t", "source", "event"} <= required_fields(Ev.TEARDOWN)


def _string_constants(path: Path) -> set[str]:
    return {n.value for n in ast.walk(parsed(path)) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


@pytest.mark.xdist_group(SOURCE_SCANS_GROUP)  # the worker that parses chaos/ once for every such scan
def test_no_module_but_chaos_events_spells_an_event_name() -> None:
    names = {e.value for e in Ev}
    offenders = {}
    for path in sorted(CHAOS.rglob("*.py")):
        rel = str(path.relative_to(CHAOS))
        if rel == "events.py":
            continue
        found = _string_constants(path) & names
        if found:
            offenders[rel] = sorted(found)
    assert not offenders, f"use chaos.events.Ev instead of these literals: {offenders}"


CALLS = [
    (Ev.PROCESS_STARTED, lambda: probe.process_started()),
    (Ev.STEP_COMPLETED, lambda: probe.step_completed(3, loss=0.5, samples=4, duration_s=0.1)),
    (Ev.CHECKPOINT_SAVE_STARTED, lambda: probe.checkpoint_save_started(3, "c.pt")),
    (Ev.CHECKPOINT_WRITE_PROGRESS, lambda: probe.checkpoint_write_progress(3, "c.pt", 10, 20)),
    (Ev.CHECKPOINT_SAVE_FINISHED, lambda: probe.checkpoint_save_finished(3, "c.pt", "ab")),
    (Ev.CHECKPOINT_LOAD_STARTED, lambda: probe.checkpoint_load_started(3, "c.pt")),
    (Ev.CHECKPOINT_LOADED, lambda: probe.checkpoint_loaded(3, "c.pt", "ab")),
    (Ev.CHECKPOINT_DELETED, lambda: probe.checkpoint_deleted(3, "c.pt")),
    (Ev.CHECKPOINT_REJECTED, lambda: probe.checkpoint_rejected(3, "c.pt", "digest mismatch")),
    (Ev.RUN_FINISHED, lambda: probe.run_finished(3)),
]


@pytest.mark.parametrize(("event", "call"), CALLS, ids=[str(e) for e, _ in CALLS])
def test_each_probe_helper_writes_its_declared_fields(event: Ev, call: object, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    history = tmp_path / "events.jsonl"
    monkeypatch.setenv("CHAOS_EVENTS", str(history))
    monkeypatch.setenv("CHAOS_NODE", "node1")
    call()  # type: ignore[operator]
    [line] = [json.loads(x) for x in history.read_text().splitlines()]
    assert line["event"] == event and line["source"] == Source.WORKLOAD
    missing = required_fields(event) - set(line)
    assert not missing, f"{event} written without {missing}"
