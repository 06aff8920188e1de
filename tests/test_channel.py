"""The history channel (chaos/channel.py): events reach the engine once each and in order, across a dropped
connection and an engine that is not listening yet; holds are acknowledged over it; clocks are measured and a
measurably skewed sender is corrected. In-process server and client on loopback: each test takes well under a
second."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chaos.channel import ChannelClient, ChannelServer, clock_offset, listen


class Engine:
    """A channel server writing into a list, as the engine's history writer would into events.jsonl."""

    def __init__(self, port: int = 0, token: str | None = None):
        self.lines: list[dict[str, Any]] = []
        self.clocks: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.server = ChannelServer(listen("127.0.0.1", port), self._write, self._record, token=token)
        self.server.start()
        self.address = self.server.address

    def _write(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.lines.append(event)

    def _record(self, **fields: Any) -> None:
        with self._lock:
            self.clocks.append(fields)

    def wait_for(self, n: int, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while len(self.lines) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        return list(self.lines)

    def cut_connections(self) -> None:
        """The engine's host hiccups: every open connection is reset, the engine's state stays."""
        for conn in list(self.server._conns):
            conn.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def engine() -> Any:
    e = Engine()
    yield e
    e.server.stop(drain_s=0.2)


def _client(engine: Engine, tmp_path: Path, name: str = "node0:1:a") -> ChannelClient:
    return ChannelClient(engine.address, name, str(tmp_path / "spool"))


def test_clock_offset_is_the_ntp_estimate() -> None:
    # the server's clock is 5 s ahead; 10 ms each way, 10 ms inside the server
    offset, rtt = clock_offset(100.0, 105.01, 105.02, 100.03)
    assert offset == pytest.approx(5.0) and rtt == pytest.approx(0.02)


def test_events_arrive_in_order_and_the_clock_is_measured_at_connect(engine: Engine, tmp_path: Path) -> None:
    c = _client(engine, tmp_path)
    for i in range(1, 6):
        c.send({"t": time.time(), "event": "step_completed", "step": i})
    lines = engine.wait_for(5)
    assert [e["step"] for e in lines] == [1, 2, 3, 4, 5]
    assert all("t_sender" not in e for e in lines)  # one host: nothing corrected
    (sync,) = engine.clocks
    assert sync["at"] == "connect" and sync["node"] == "node0" and sync["pid"] == 1 and not sync["corrected"]
    assert abs(sync["offset_s"]) <= max(sync["rtt_s"], 0.001)


def test_a_dropped_connection_is_replayed_from_the_spool_without_duplicates(engine: Engine, tmp_path: Path) -> None:
    c = _client(engine, tmp_path)
    for i in range(1, 4):
        c.send({"t": time.time(), "event": "e", "i": i})
    engine.wait_for(3)
    engine.cut_connections()
    time.sleep(0.05)
    for i in range(4, 9):  # the first may vanish into the reset connection; the spool keeps it
        c.send({"t": time.time(), "event": "e", "i": i})
        time.sleep(0.01)
    assert c.flush()
    engine.wait_for(8)
    time.sleep(0.1)
    assert [e["i"] for e in engine.lines] == list(range(1, 9))
    assert c.connects >= 2


def test_a_replay_of_what_the_engine_has_is_dropped(engine: Engine, tmp_path: Path) -> None:
    c = _client(engine, tmp_path)
    for i in range(1, 4):
        c.send({"t": time.time(), "event": "e", "i": i})
    engine.wait_for(3)
    assert c.sock is not None
    c._replay(0)  # everything again, as a client that never heard the engine's welcome would
    c.send({"t": time.time(), "event": "e", "i": 4})
    engine.wait_for(4)
    time.sleep(0.05)
    assert [e["i"] for e in engine.lines] == [1, 2, 3, 4]
    assert engine.server.stats["duplicates"] == 3


def test_events_sent_before_the_engine_listens_are_spooled_and_delivered(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = ChannelClient(f"127.0.0.1:{port}", "node1:2:b", str(tmp_path / "spool"))
    started = time.monotonic()
    for i in range(1, 4):
        c.send({"t": time.time(), "event": "e", "i": i})  # refused: spooled, never raised, never waited
    assert time.monotonic() - started < 0.5 and c.unsent
    e = Engine(port)
    try:
        assert c.flush()
        assert [x["i"] for x in e.wait_for(3)] == [1, 2, 3]
    finally:
        e.server.stop(drain_s=0.2)


def test_a_hold_is_acknowledged_over_the_channel(engine: Engine, tmp_path: Path) -> None:
    c = _client(engine, tmp_path)
    c.send({"t": time.time(), "event": "step_completed", "step": 3, "id": "h1"})
    engine.wait_for(1)
    threading.Timer(0.1, engine.server.ack, ["h1"]).start()
    started = time.monotonic()
    assert c.wait_ack("h1", timeout_s=5) == "acked"
    assert 0.05 < time.monotonic() - started < 2
    assert engine.server.ack("unknown") is False  # not the channel's: the engine touches the ack file instead


def test_a_hold_survives_a_dropped_connection(engine: Engine, tmp_path: Path) -> None:
    """The ack sent while the holder was reconnecting is answered again at its hello."""
    c = _client(engine, tmp_path)
    c.send({"t": time.time(), "event": "step_completed", "step": 3, "id": "h2"})
    engine.wait_for(1)
    engine.cut_connections()
    time.sleep(0.05)
    engine.server.ack("h2")  # nobody to send it to: remembered
    assert c.wait_ack("h2", timeout_s=5) == "acked"
    assert len(engine.lines) == 1


def test_a_dead_engine_releases_a_hold_at_once(engine: Engine, tmp_path: Path) -> None:
    c = _client(engine, tmp_path)
    c.send({"t": time.time(), "event": "step_completed", "step": 3, "id": "h3"})
    engine.wait_for(1)
    engine.server.stop(drain_s=0.0)
    engine.cut_connections()
    started = time.monotonic()
    assert c.wait_ack("h3", timeout_s=10) == "engine gone"
    assert time.monotonic() - started < 1


def test_a_skewed_sender_is_corrected_to_the_engine_clock(engine: Engine) -> None:
    host, port = engine.address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b'{"op":"hello","sender":"node2:7:c","t0":1}\n')
        s.recv(4096)  # welcome
        for msg in ({"op": "clock", "offset": 5.0, "rtt": 0.001, "at": "connect"},
                    {"op": "ev", "seq": 1, "e": {"t": 100.0, "event": "e"}}):
            s.sendall((json.dumps(msg) + "\n").encode())
        (line,) = engine.wait_for(1)
    assert line["t"] == pytest.approx(105.0) and line["t_sender"] == 100.0
    assert engine.clocks[0]["corrected"] is True and engine.clocks[0]["offset_s"] == 5.0


def test_the_probe_over_the_channel_holds_and_flushes(engine: Engine, tmp_path: Path) -> None:
    """A real process: its events arrive, its held step waits for the engine's ack, nothing is written to the
    history file it was given (the engine is its only writer)."""
    history = tmp_path / "events.jsonl"
    env = {**os.environ, "CHAOS_EVENTS": str(history), "CHAOS_CHANNEL": engine.address, "CHAOS_NODE": "node0",
           "CHAOS_SPOOL_DIR": str(tmp_path / "spool"), "CHAOS_PAUSE_AT_STEPS": "2", "CHAOS_PAUSE_TIMEOUT_S": "20",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code = "from chaos import probe\nfor s in (1, 2, 3): probe.step_completed(s, loss=0.5)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    held = engine.wait_for(2, timeout_s=20)
    time.sleep(0.3)
    assert proc.poll() is None and len(engine.lines) == 2  # held after step 2
    engine.server.ack(held[1]["id"])
    assert proc.wait(timeout=20) == 0
    assert [e["step"] for e in engine.wait_for(3)] == [1, 2, 3]
    assert not history.exists()


def test_the_scheduler_acks_over_the_channel_what_came_over_it_and_by_file_the_rest(
        engine: Engine, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from chaos.engine.scheduler import FaultScheduler

    c = _client(engine, tmp_path)
    c.send({"t": time.time(), "source": "workload", "event": "step_completed", "step": 3, "id": "over"})
    engine.wait_for(1)
    stub = SimpleNamespace(channel=engine.server, _acks_dir=tmp_path)
    FaultScheduler.release(stub, [{"source": "workload", "id": "over"},  # type: ignore[arg-type]
                                  {"source": "storage", "id": "by-file"}])
    assert c.wait_ack("over", timeout_s=5) == "acked"
    assert (tmp_path / "by-file").exists() and not (tmp_path / "over").exists()


def test_an_engine_that_never_answers_holds_only_until_the_timeout(tmp_path: Path) -> None:
    """Connected but never welcomed (an engine too busy to accept): events are spooled, not lost, and a hold ends
    at CHAOS_PAUSE_TIMEOUT_S instead of blocking the job."""
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(16)  # the kernel completes connects; nobody reads or answers
        c = ChannelClient(f"127.0.0.1:{mute.getsockname()[1]}", "node0:3:d", str(tmp_path / "spool"))
        c.send({"t": time.time(), "event": "step_completed", "step": 1, "id": "h4"})
        assert c.unsent
        started = time.monotonic()
        assert c.wait_ack("h4", timeout_s=1.5) == "timeout"
        assert 1.4 < time.monotonic() - started < 2.5
        # a standing order (a hang) survives a reconnect the engine does not answer: it is not withdrawn by silence
        c.orders["hang0"] = {"mode": "main_thread"}
        assert not c.flush() and c.orders == {"hang0": {"mode": "main_thread"}}
    assert Path(c.spool_path).read_text().count("\n") == 1


def test_a_process_whose_clock_is_5_s_ahead_lands_on_the_engine_clock(engine: Engine, tmp_path: Path) -> None:
    """The whole path with a real skew: the probe in a process whose ``time.time`` runs 5 s ahead measures the
    offset at connect, and the engine writes its events on the engine's clock (keeping the sender's)."""
    env = {**os.environ, "CHAOS_EVENTS": str(tmp_path / "events.jsonl"), "CHAOS_CHANNEL": engine.address,
           "CHAOS_NODE": "node1", "CHAOS_SPOOL_DIR": str(tmp_path / "spool"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code = ("import time\n_real = time.time\ntime.time = lambda: _real() + 5.0\n"
            "from chaos import probe\nprobe.step_completed(1, loss=0.5)\n")
    before = time.time()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=30)
    (line,) = engine.wait_for(1)
    (sync,) = engine.clocks
    assert sync["corrected"] and sync["offset_s"] == pytest.approx(-5.0, abs=0.05)
    assert line["t_sender"] - line["t"] == pytest.approx(5.0, abs=0.05)
    assert before <= line["t"] <= time.time()


def test_a_hang_order_reaches_its_worker_over_the_channel_and_is_withdrawn(engine: Engine, tmp_path: Path) -> None:
    """The hang fault's order goes over the channel too: the worker's main thread blocks at its step while the
    order stands and goes on when it is withdrawn; no order file is involved."""
    env = {**os.environ, "CHAOS_EVENTS": str(tmp_path / "events.jsonl"), "CHAOS_CHANNEL": engine.address,
           "CHAOS_NODE": "node1", "LOCAL_RANK": "0", "CHAOS_SPOOL_DIR": str(tmp_path / "spool"),
           "CHAOS_PAUSE_AT_STEPS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code = "from chaos import probe\nfor s in (1, 2): probe.step_completed(s, loss=0.5)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        (held,) = engine.wait_for(1, timeout_s=20)  # held at step 1: the order lands before it goes on
        engine.server.order("hang-node1-0", "node1-0", {"fault_id": 4, "t": time.time()})
        engine.server.ack(held["id"])
        started = engine.wait_for(2)
        assert started[1]["event"] == "hang_started" and started[1]["fault_id"] == 4
        time.sleep(0.3)
        assert proc.poll() is None and len(engine.lines) == 2  # stuck at step 1
        engine.server.order("hang-node1-0", "node1-0", None)
        assert proc.wait(timeout=20) == 0
        released = engine.wait_for(4)
        assert [e["event"] for e in released[2:]] == ["hang_released", "step_completed"]
        assert released[2]["why"] == "healed"
    finally:
        proc.kill()


def test_a_process_without_the_runs_token_writes_nothing_and_hears_nothing(tmp_path: Path) -> None:
    """Any local process can reach loopback (and a container any bridge gateway): only a hello with the run's
    token (CHAOS_CHANNEL_TOKEN, in the nodes' environment) is answered and its events written."""
    e = Engine(token="s3cret")
    try:
        stranger = ChannelClient(e.address, "stranger", str(tmp_path / "a"), token="guess")
        stranger.send({"event": "step_completed", "step": 1})
        assert not stranger.flush() and e.server.stats["refused"] >= 1
        member = ChannelClient(e.address, "member", str(tmp_path / "b"), token="s3cret")
        member.send({"event": "step_completed", "step": 2})
        assert [ev["step"] for ev in e.wait_for(1)] == [2]
        time.sleep(0.1)
        assert [ev["step"] for ev in e.lines] == [2]
        member.close()
        stranger.close()
    finally:
        e.server.stop(drain_s=0.2)


def test_an_event_the_spool_could_not_keep_is_still_sent_at_the_connect(engine: Engine, tmp_path: Path) -> None:
    """No writable spool (or a full disk): the event that opens the connection is sent after the replay."""
    client = ChannelClient(engine.address, "nospool", str(tmp_path / "s"))
    os.close(client._spool)
    client._spool, client.spool_path = -1, ""
    for step in (1, 2, 3):
        client.send({"event": "step_completed", "step": step})
    assert [ev["step"] for ev in engine.wait_for(3)] == [1, 2, 3]
    client.close()
