"""Reading a history in parts while it is written (chaos.analysis.load.HistoryLoader, the report renderer's): the
history it returns at the end is the one a single read of the whole file gives, wherever the parts were cut."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chaos.history
from chaos.analysis.load import History, HistoryLoader, load_events
from chaos.history import LineReader
from tests.data.recorded import expand
from tests.tiers import examples

MAX_LINE = 300  # MAX_LINE_BYTES for these tests: a line over it is skipped unread, whatever splits it


def _step(node: str, step: int, t: float) -> dict[str, object]:
    return {"t": t, "source": "workload", "event": "step_completed", "node": node, "pid": 100 + int(node[-1]),
            "rank": int(node[-1]), "step": step, "loss": 1.0 / step, "samples": 16}


lines = st.one_of(
    st.builds(lambda n, s, t: json.dumps(_step(n, s, t)), st.sampled_from(["node0", "node1"]),
              st.integers(1, 50), st.floats(0, 100)),
    st.builds(lambda t: json.dumps({"t": t, "source": "engine", "event": "node_exited", "node": "node1", "code": 0}),
              st.floats(0, 100)),
    st.just(""),  # blank
    st.just('{"event": "step_comp'),  # torn
    st.just("[1, 2]"),  # no event
    st.just('{"event": "x", "t": "soon"}'),  # no usable t
    st.builds(lambda k: "x" * k, st.integers(MAX_LINE - 2, MAX_LINE + 40)),  # around the length limit
)


def _same(a: History, b: History) -> None:
    assert list(a) == list(b)
    assert len(a.steps) == len(b.steps)
    for column in ("t", "node", "step", "loss", "pid"):
        assert list(a.steps.values(column)) == list(b.steps.values(column))
    assert (a.unreadable.count, a.unreadable.lines) == (b.unreadable.count, b.unreadable.lines)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.lists(lines, max_size=40), ended=st.booleans(), cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_a_history_read_in_parts_is_the_history_read_whole(content: list[str], ended: bool, cuts: list[int],
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chaos.history, "MAX_LINE_BYTES", MAX_LINE)
    data = ("\n".join(content) + ("\n" if ended and content else "")).encode()
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"")
    loader = HistoryLoader(path)
    done = 0
    for cut in sorted({min(c, len(data)) for c in cuts}):  # the writer got this far: a read, mid-line or not
        with path.open("ab") as f:
            f.write(data[done:cut])
        done = cut
        loader.read()
    with path.open("ab") as f:
        f.write(data[done:])
    _same(loader.history(), load_events(path))


def test_a_recorded_run_s_history_read_in_parts_is_the_history_read_whole(tmp_path: Path) -> None:
    data = (expand("quickstart", tmp_path / "run") / "events.jsonl").read_bytes()
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"")
    loader = HistoryLoader(path)
    cuts = [0, 1, 4096, len(data) // 3 + 17, len(data) // 2, len(data) - 5, len(data)]
    for start, end in itertools.pairwise(cuts):
        with path.open("ab") as f:
            f.write(data[start:end])
        loader.read()
    whole = load_events(path)
    assert len(whole.steps) > 1000 and len(whole) > 50  # a real run's steps and other events
    _same(loader.history(), whole)


def test_a_line_cut_by_a_read_is_kept_for_the_next(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"a": 1}\n{"b"')
    reader = LineReader(path)
    assert [line for chunk in reader.read() for line in chunk] == [(1, b'{"a": 1}')]
    with path.open("a") as f:
        f.write(': 2}\n{"c": 3}')
    assert [line for chunk in reader.read() for line in chunk] == [(2, b'{"b": 2}')]
    assert [line for chunk in reader.read(final=True) for line in chunk] == [(3, b'{"c": 3}')]
    with pytest.raises(ValueError, match="read to its end"):
        list(reader.read())
    reader.close()


def test_a_history_that_is_no_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="not a regular file"):
        HistoryLoader(tmp_path)


def test_a_snapshot_is_the_history_of_the_lines_read_so_far_and_reading_goes_on(tmp_path: Path) -> None:
    data = (expand("quickstart", tmp_path / "run") / "events.jsonl").read_bytes()
    cut = len(data) // 2 + 11  # mid-line
    path, prefix = tmp_path / "events.jsonl", tmp_path / "prefix.jsonl"
    path.write_bytes(data[:cut])
    prefix.write_bytes(data[:data.rindex(b"\n", 0, cut) + 1])  # the whole lines of that part
    loader = HistoryLoader(path)
    loader.read()
    _same(loader.snapshot(), load_events(prefix))
    with path.open("ab") as f:
        f.write(data[cut:])
    _same(loader.history(), load_events(path))
