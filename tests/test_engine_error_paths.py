"""The engine's error paths, with a runtime whose calls raise (no process is started): an engine error keeps its
traceback in the history, and a teardown that raises still closes storage, heartbeat, channel and history and
still gets its result.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.engine import core
from chaos.engine.heartbeat import Heartbeat
from chaos.history import HistoryWriter, read_history
from chaos.loading import parse_scenario
from chaos.runtimes.local import LocalRuntime
from chaos.storage.layer import StorageLayer


class EngineBug(RuntimeError):
    pass


def _raise(what: str) -> Any:
    def call(*_: Any, **__: Any) -> Any:
        raise EngineBug(what)
    return call


def test_an_engine_error_and_a_raising_teardown_still_close_everything_and_write_the_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[str] = []

    def spy(cls: type, name: str) -> None:
        original = getattr(cls, name)

        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            closed.append(f"{cls.__name__}.{name}")
            return original(self, *args, **kwargs)
        monkeypatch.setattr(cls, name, wrapped)

    for cls, name in ((StorageLayer, "stop"), (Heartbeat, "stop"), (core.RunParts, "close_channel"),
                      (HistoryWriter, "close")):
        spy(cls, name)
    monkeypatch.setattr("chaos.doctor.require", lambda scenario: None)
    monkeypatch.setattr(LocalRuntime, "prepare", _raise("prepare failed"))
    monkeypatch.setattr(LocalRuntime, "teardown", _raise("teardown failed"))
    scenario = parse_scenario("name: errors\nworkload: {name: ddp-mlp}\nchecks: {golden: false}\n")
    engine = core.Engine(scenario, out_dir=tmp_path, html_report=False)

    result = engine.run()

    assert closed == ["StorageLayer.stop", "Heartbeat.stop", "RunParts.close_channel", "HistoryWriter.close"]
    written = json.loads((engine.run_dir / "result.json").read_text())
    assert written["verdict"] == "error" and result.verdict == "error"
    assert written["why"] == "engine error: EngineBug: prepare failed"
    events = read_history(engine.run_dir / "events.jsonl")
    [ended] = [e for e in events if e["event"] == "run_ended"]
    assert "Traceback" in ended["traceback"] and "EngineBug: prepare failed" in ended["traceback"]
    [teardown] = [e for e in events if e["event"] == "teardown"]
    [failed] = teardown["failed"]
    assert failed["step"] == "runtime teardown" and failed["why"] == "EngineBug: teardown failed"
    assert "Traceback" in failed["traceback"]
    assert teardown["killed"] == 0
    assert any("teardown: runtime teardown failed (EngineBug: teardown failed)" in line for line in engine.log)
