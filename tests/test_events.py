"""chaos.events is the one place that names events: declarations complete, writers true to them, no stray names."""

from __future__ import annotations

import ast
import json
import types
import typing
from pathlib import Path

import pytest

import chaos
from chaos import probe
from chaos.events import FIELDS, STORAGE_FIELDS, EndReason, Ev, Event, Line, Source, required_fields
from tests.import_graph import SOURCE_SCANS_GROUP, parsed

CHAOS = Path(chaos.__file__).parent


def test_every_event_has_a_field_declaration_and_members_are_their_strings() -> None:
    assert set(FIELDS) == set(Ev)
    assert len({e.value for e in Ev}) == len(Ev)
    assert Ev.STEP_COMPLETED == "step_completed" and hash(Ev.STEP_COMPLETED) == hash("step_completed")
    assert json.dumps({"event": Ev.RUN_ENDED, "source": Source.ENGINE, "reason": EndReason.HUNG}) == \
        '{"event": "run_ended", "source": "engine", "reason": "hung"}'
    assert {"t", "source", "event"} <= required_fields(Ev.TEARDOWN)


def _members(hint: object) -> set[object]:
    """The types a field's annotation allows: the members of a union (``int | None`` is {int, None}), else itself."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return set().union(*(_members(a) for a in typing.get_args(hint)))
    return {hint}


def test_event_is_the_exact_union_of_every_events_declared_fields() -> None:
    """One declaration per field: ``Event`` (what a history reader gets) holds every field some event declares,
    typed as the union of that field's declarations, and nothing else. A field two events declare with different
    types is fine when Event allows both (``step``: int on a workload save, null from the storage watcher); a field
    added to one event and forgotten in Event, a type widened in one place only, or a field in Event that no event
    declares (a reader's typo made legal) fails here."""
    declared: dict[str, set[object]] = {}
    for cls in (Line, *FIELDS.values(), *STORAGE_FIELDS.values()):
        for name, hint in typing.get_type_hints(cls).items():
            declared.setdefault(name, set()).update(_members(hint))
    union = {name: _members(hint) for name, hint in typing.get_type_hints(Event).items()}
    assert Event.__required_keys__ == frozenset()  # type: ignore[attr-defined]  # which fields: by the event
    assert sorted(set(declared) - set(union)) == [], "declared by an event, missing in chaos.events.Event"
    assert sorted(set(union) - set(declared)) == [], "in chaos.events.Event, declared by no event"
    differ = {name: (sorted(map(str, union[name])), sorted(map(str, types_))) for name, types_ in declared.items()
              if union[name] != types_}
    assert differ == {}, "Event's type of a field is not the union of its declarations (Event's, declared)"


def test_the_union_check_sees_a_type_declared_in_one_place_only() -> None:
    class Widened(Line):
        step: float

    assert _members(typing.get_type_hints(Widened)["step"]) == {float}
    assert not {float} <= _members(typing.get_type_hints(Event)["step"])
    assert _members(int | None) == {int, type(None)}


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
