"""How the engine writes and reads history lines (chaos.history.dumps_line, loads_line, FileTail) and parses the
channel's lines (chaos.channel.decode): orjson where it gives json's values, json's where it does not."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.channel import MAX_DEPTH, decode
from chaos.events import Ev
from chaos.history import FileTail, dumps_line, loads_line
from tests.tiers import examples

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=examples(300), deadline=None)
@given(record=st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_a_line_reads_back_as_json_wrote_it(record: dict[str, object]) -> None:
    line = dumps_line(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == record == loads_line(line)
    assert json.loads(line) == json.loads(json.dumps(record))


@dataclass
class Where:
    host: str


def test_what_orjson_writes_otherwise_is_written_as_json_dumps_would() -> None:
    when = datetime(2026, 12, 7, 1, 2, 3, tzinfo=timezone.utc)
    for value in (Where("h"), when, Path("/x"), 2**70, {1: "int key"}, {"a": {3}}):
        record = {"event": Ev.RUN_STARTED, "v": value}
        assert dumps_line(record) == (json.dumps(record, default=str) + "\n").encode(), value
    assert json.loads(dumps_line({"event": Ev.STEP_COMPLETED}))["event"] == "step_completed"


def test_non_finite_floats_are_written_as_null_and_read_back_where_json_takes_them() -> None:
    assert json.loads(dumps_line({"loss": math.nan, "x": math.inf})) == {"loss": None, "x": None}
    assert math.isnan(loads_line(b'{"loss": NaN}')["loss"])  # a line json wrote: still read


def test_the_history_tail_kept_open_reads_on_and_waits_for_a_file_not_there_yet(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = FileTail(path, keep_open=True)
    assert list(tail.read_new()) == []
    path.write_bytes(b'{"a": 1}\n{"b": NaN}\n{"c"')
    assert [list(e) for e in tail.read_new()] == [["a"], ["b"]]
    with path.open("ab") as f:
        f.write(b': 3}\nnot json\n\xff{"bad utf-8"}\n{"d": 4}\n')
    assert list(tail.read_new()) == [{"c": 3}, {"d": 4}]
    tail.close()
    with path.open("ab") as f:
        f.write(b'{"e": 5}\n')
    assert list(tail.read_new()) == [{"e": 5}]  # closed: opened again where it stopped
    tail.close()


@pytest.mark.parametrize("depth", [MAX_DEPTH, MAX_DEPTH + 1])
def test_the_channel_refuses_a_message_nested_too_deep_with_either_parser(depth: int) -> None:
    line = ('{"op": "ev", "e": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}").encode()
    for loads in (json.loads, loads_line):
        assert (decode(line, loads) == {}) is (depth > MAX_DEPTH)
    assert decode(b'{"op": "ev", "e": {"s": "[[[[' + b"[" * 100 + b'"}}', loads_line)["op"] == "ev"  # in a string
