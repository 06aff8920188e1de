"""The history and control channel: workload events to the engine over TCP, holds acknowledged the same way.

Why: the history used to be one file every process appended to, and holds were acknowledged by files beside it.
That needs every node to see one filesystem with atomic ``O_APPEND`` — true on one host (and in containers that
mount the run directory), false across hosts on NFS or Lustre. Over the channel the engine is the only writer of
``events.jsonl`` (lines in the order it received them), so the nodes need no shared filesystem at all.

Standard library only: :mod:`chaos.probe` (imported in training processes and containers) holds the client; the
engine holds the server. One line of JSON per message, both ways:

* client → server: ``hello`` (``sender``, ``t0``, ``waiting``: a held event id still unacknowledged, ``who``:
  ``<node>-<local rank>`` for a worker, ``storage`` for a host's storage layer), ``ev`` (``seq``, ``e``: the
  event), ``clock`` (``offset``, ``rtt``, ``at``), ``ping`` (``t0``), ``state`` (``name``, ``value``: what this
  connection reports of itself, e.g. the storage rules version a host's layer enforces; said again after a
  reconnect);
* server → client: ``welcome`` (``have``: the highest ``seq`` of this sender already written, ``t1``, ``t2``),
  ``pong`` (``t0``, ``t1``, ``t2``), ``ack`` (``id``), ``order`` (``name``, ``spec``: the hang fault's order to
  this worker, null when withdrawn; the ones standing are sent again before a reconnect's ``welcome``).

The first line of a connection must be a ``hello`` with the run's token (``CHAOS_CHANNEL_TOKEN``, in the nodes'
environment only): anything else, ``ping`` included, closes the connection unanswered (:class:`ChannelServer`,
:mod:`chaos.gate` for the limits on what a connection may cost before and after).

**Nothing lost, nothing twice.** Every event gets the next ``seq`` of its sender (one sender = one process; a
restarted worker is a new sender) and is appended to the sender's local spool file *before* it is sent. When the
connection drops the client keeps spooling; at its next connect the engine's ``welcome`` says which ``seq`` it has,
and the client replays the rest from the spool. The engine drops any ``seq`` it already wrote (a replay that
overlaps what arrived before the drop).

**Clocks.** At each connect and then every :data:`CLOCK_EVERY_S` the client measures the engine's clock against its
own the NTP way (:func:`clock_offset`: four timestamps of one round trip). The engine records every measurement
(``clock_sync``) and, when a sender's offset is larger than the measurement can tell from zero (half the round
trip, and at least :data:`CORRECT_ABOVE_S`), rewrites that sender's ``t`` on the engine's clock (keeping its own
as ``t_sender``). On one host the offsets are within the round trip and nothing is rewritten.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

ENV_CHANNEL = "CHAOS_CHANNEL"  # host:port of the engine's channel server
ENV_TOKEN = "CHAOS_CHANNEL_TOKEN"  # the run's secret, shown in every hello: other processes cannot write its history
ENV_SPOOL_DIR = "CHAOS_SPOOL_DIR"  # where a sender keeps its spool (node-local); default: the temp directory
CLOCK_EVERY_S = 10.0  # a fresh clock measurement this often (at an event: the client has no thread of its own)
CORRECT_ABOVE_S = 0.001  # an offset below this is left alone (one host's clocks are one clock)
CONNECT_TIMEOUT_S = 1.0  # an engine slow to accept: the event is spooled meanwhile, never dropped
RETRY_S = 0.5  # after a failed connect, the next attempt waits this long (an event never waits for it) ...
RETRY_MAX_S = 8.0  # ... doubling up to this: an engine that stays unreachable costs a step one timeout per 8 s
# What one connection may cost the engine (a root process; docs/design.md, "The history channel"). Until its hello
# shows the run's token a connection holds no thread (chaos.gate): only its hello is read, within HELLO_TIMEOUT_S
# and HELLO_MAX bytes; every other op before it closes the connection.
MAX_LINE = 8 << 20  # an admitted sender's line; a longer one is skipped whole (its newline found, nothing kept)
MAX_SAID = 4096  # senders whose last states are kept after they close (a run has a few dozen)
HELLO_MAX = 64 << 10  # the hello line (a held id or a host's few: well under a kilobyte)
HELLO_TIMEOUT_S = 3.0  # from accept to the hello: a client sends it at once (its own wait for the welcome is 1 s)
MAX_DEPTH = 64  # nesting of one message; deeper is dropped (no parser's recursion limit reached, no traceback)
MAX_CONNECTIONS = 1024  # admitted connections (a thread each); beyond, refused and recorded once
MAX_PENDING = 256  # connections waiting for their hello; beyond, the oldest waiting is closed


def clock_offset(t0: float, t1: float, t2: float, t3: float) -> tuple[float, float]:
    """(offset, round trip) of one exchange, NTP style: the client sent at ``t0`` (its clock), the server received
    at ``t1`` and answered at ``t2`` (its clock), the client received at ``t3``. ``offset`` is what to add to the
    client's clock to get the server's; its error is at most half the round trip (the network's asymmetry)."""
    return ((t1 - t0) + (t2 - t3)) / 2, (t3 - t0) - (t2 - t1)


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def _line(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg, default=str, separators=(",", ":")) + "\n").encode()


def _too_deep(msg: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``msg`` nests deeper than ``limit`` (a walk with a stack of its own: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(msg, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        elif not isinstance(value, list):
            continue
        if depth > limit:
            return True
        stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))
    return False


def decode(line: bytes, loads: Callable[[bytes], Any] = json.loads) -> dict[str, Any]:
    """One line's message; ``{}`` (ignored by every reader) for anything but a JSON object of at most
    :data:`MAX_DEPTH` levels. ``"[" * 200000`` is json's RecursionError, caught here: a hostile line is no
    traceback in the run's output. ``loads``: the parser (the engine's server passes a faster one that falls back
    to json's; it must raise ValueError or RecursionError for what it refuses)."""
    try:
        msg = loads(line)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(msg, dict):
        return {}
    # A value nests no deeper than the line has opening brackets: the usual event (a few) needs no walk (~7 us).
    if line.count(b"[") + line.count(b"{") > MAX_DEPTH and _too_deep(msg):
        return {}
    return msg


class _Lines:
    """Newline-delimited messages from a socket (a partial line waits for the rest).

    Linear in what arrives: the newline is looked for only in bytes not looked at before, and a line longer than
    ``max_line`` is not kept (the buffer is emptied, the rest up to its newline dropped, the line read as ``{}``).
    ``rest``: bytes already read past a first line (the gate's)."""

    def __init__(self, sock: socket.socket, rest: bytes = b"", max_line: int = MAX_LINE,
                 loads: Callable[[bytes], Any] = json.loads):
        self.sock = sock
        self.loads = loads
        self.buf = bytearray(rest)
        self.max_line = max_line
        self._scanned = 0  # bytes of buf known to hold no newline
        self._skipping = False  # inside a line too long to keep

    def read(self, timeout_s: float | None) -> dict[str, Any] | None:
        """The next message; None on timeout (``0``: only what has arrived). Raises ``ConnectionError`` at end of
        stream."""
        while (cut := self.buf.find(b"\n", self._scanned)) < 0:
            self._scanned = len(self.buf)
            if len(self.buf) > self.max_line:
                self.buf.clear()
                self._scanned, self._skipping = 0, True
            before = self.sock.gettimeout()
            self.sock.settimeout(timeout_s)
            try:
                chunk = self.sock.recv(65536)
            except (TimeoutError, BlockingIOError):
                return None
            finally:  # a read that must not wait leaves the socket as it was: a later sendall may block again
                self.sock.settimeout(before)
            if not chunk:
                raise ConnectionError("closed by peer")
            self.buf += chunk
        line = bytes(self.buf[:cut])
        del self.buf[:cut + 1]
        self._scanned = 0
        if self._skipping:
            self._skipping = False
            return {}
        return decode(line, self.loads)


class ChannelClient:
    """One process's sender: spool, send, replay on reconnect, measure the clock, wait for acknowledgements.

    Not thread-safe by itself: :mod:`chaos.probe` calls it under its lock. Never raises for a network problem: a
    training step must not fail because the engine's host hiccups."""

    def __init__(self, address: str, sender: str, spool_dir: str | None = None, who: str | None = None,
                 token: str | None = None):
        self.address = parse_address(address)
        self.sender = sender
        self.token = token
        self.who = who  # "<node>-<local rank>" of a worker: the hang orders addressed to it reach it
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in sender)
        self.spool_path = ""
        self._spool = -1  # no spool anywhere writable: events are still sent, only a replay is impossible
        # the fallback is this user's own (0700): events are not for other users to read or to squat on
        for directory in (spool_dir, os.path.join(_tmp(), f"torch-chaos-spool-{os.getuid()}")):
            if not directory:
                continue
            try:
                os.makedirs(directory, mode=0o700, exist_ok=True)
                path = os.path.join(directory, f"{safe}.jsonl")
                self._spool = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                self.spool_path = path
                break
            except OSError:
                continue
        self.seq = 0
        self.sock: socket.socket | None = None
        self._lines: _Lines | None = None
        self._next_try = 0.0
        self._retry_s = RETRY_S
        self._next_clock = 0.0
        self._acked: set[str] = set()
        self.orders: dict[str, dict[str, Any]] = {}  # standing orders to this process (the hang fault's), by name
        self.states: dict[str, Any] = {}  # what this process reports of itself (``tell``), said again at a reconnect
        # the held event id not yet acknowledged, told again at a reconnect (a list: a host's storage layer holds
        # several operations at once, one per rank saving)
        self.waiting: str | list[str] | None = None
        self.connects = 0
        self.replayed = 0
        self.unsent = False  # events spooled since the connection was last up (replayed at the next connect)
        self.last_error: BaseException | None = None  # why the last connect failed

    # ------------------------------------------------------------------ sending
    def send(self, event: dict[str, Any]) -> None:
        """Spool the event, then send it (or leave it spooled until the next connect)."""
        self.seq += 1
        data = _line({"op": "ev", "seq": self.seq, "e": event})
        spooled = False
        if self._spool >= 0:
            try:
                os.write(self._spool, data)  # first: whatever happens to the connection, the event is kept
                spooled = True
            except OSError:  # a full disk on the node must not fail the training step; the send still goes
                pass
        if self.sock is None:
            if not self._connected():
                self.unsent = True
                return
            if spooled:
                return  # connected now: the connect replayed the spool, this event included
            # not in the spool, so not in the replay: sent now, after what the replay sent
        try:
            self.sock.sendall(data)
            if time.monotonic() >= self._next_clock:
                self._measure("periodic")
        except (OSError, ValueError, KeyError, TypeError):
            self.unsent = True
            self._drop()

    def tell(self, name: str, value: Any) -> bool:
        """Report ``name`` = ``value`` of this process to the engine (not an event: the engine keeps the latest per
        connection, e.g. the rules version a storage layer enforces); whether it went out now (else at the next
        connect)."""
        self.states[name] = value
        if not self._connected():
            return False
        assert self.sock is not None
        try:
            self.sock.sendall(_line({"op": "state", "name": name, "value": value}))
            return True
        except OSError:
            self._drop()
            return False

    def flush(self) -> bool:
        """Connect now if down (replaying what was spooled); whether the engine has everything sent so far."""
        return self._connected(force=True) and not self.unsent

    def _connected(self, force: bool = False, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
        if self.sock is not None:
            return True
        if not force and time.monotonic() < self._next_try:
            return False
        try:
            self._connect(timeout_s)
            return True
        except (OSError, ValueError, KeyError, TypeError) as exc:  # refused, timed out, or not our engine answering
            self.last_error = exc
            self._drop()
            self._next_try = time.monotonic() + self._retry_s
            self._retry_s = min(RETRY_MAX_S, self._retry_s * 2)
            return False

    def _connect(self, timeout_s: float) -> None:
        sock = socket.create_connection(self.address, timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self._lines = sock, _Lines(sock)
        # The engine sends the standing orders again before its welcome: they replace ours only once it came (an
        # engine that accepts but does not answer in time must not look like one that withdrew a hang).
        standing, self.orders = self.orders, {}
        t0 = time.time()
        try:
            sock.sendall(_line({"op": "hello", "sender": self.sender, "t0": t0, "waiting": self.waiting,
                                "who": self.who, "token": self.token}))
            welcome = self._expect("welcome", timeout_s)
        except BaseException:
            self.orders = standing
            raise
        offset, rtt = clock_offset(t0, welcome["t1"], welcome["t2"], time.time())
        sock.sendall(_line({"op": "clock", "offset": offset, "rtt": rtt, "at": "connect"}))
        for name, value in self.states.items():
            sock.sendall(_line({"op": "state", "name": name, "value": value}))
        self._next_clock = time.monotonic() + CLOCK_EVERY_S
        self.connects += 1
        self._retry_s = RETRY_S
        have = int(welcome.get("have", 0))
        if have < self.seq:
            self._replay(have)
        self.unsent = False

    def _replay(self, have: int) -> None:
        """Send the spooled events after ``have`` (the engine's last seq of this sender), in order."""
        assert self.sock is not None
        if not self.spool_path:
            return
        with open(self.spool_path, "rb") as fh:
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break
                try:
                    seq = int(json.loads(raw)["seq"])
                except (ValueError, KeyError, TypeError):
                    continue
                if seq > have:
                    self.sock.sendall(raw)
                    self.replayed += 1

    def _measure(self, at: str) -> None:
        assert self.sock is not None
        t0 = time.time()
        self.sock.sendall(_line({"op": "ping", "t0": t0}))
        pong = self._expect("pong", CONNECT_TIMEOUT_S)
        offset, rtt = clock_offset(t0, pong["t1"], pong["t2"], time.time())
        self.sock.sendall(_line({"op": "clock", "offset": offset, "rtt": rtt, "at": at}))
        self._next_clock = time.monotonic() + CLOCK_EVERY_S

    def _expect(self, op: str, timeout_s: float) -> dict[str, Any]:
        """Read until a message ``op`` arrives (acknowledgements met on the way are kept)."""
        assert self._lines is not None
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {op} from the engine")
            msg = self._lines.read(left)
            if msg is None:
                raise TimeoutError(f"no {op} from the engine")
            if msg.get("op") == op:
                return msg
            self._note(msg)

    def _note(self, msg: dict[str, Any]) -> None:
        op = msg.get("op")
        if op == "ack" and isinstance(msg.get("id"), str):
            self._acked.add(msg["id"])
        elif op == "order" and isinstance(msg.get("name"), str):
            if isinstance(msg.get("spec"), dict):
                self.orders[msg["name"]] = msg["spec"]
            else:
                self.orders.pop(msg["name"], None)

    def poll(self) -> None:
        """Take in what the engine sent meanwhile (orders, late acknowledgements) without waiting: one ``recv``
        when there is nothing. Also keeps the receive buffer empty, so this process's exit closes its connection
        cleanly (unread data would make the kernel reset it, and the engine could lose the last events)."""
        if self.sock is None or self._lines is None:
            return
        try:
            while (msg := self._lines.read(0.0)) is not None:
                self._note(msg)
        except OSError:
            self._drop()

    def connected(self) -> bool:
        """Whether the connection is up, trying a reconnect (replaying the spool) when the back-off allows one."""
        return self._connected()

    def took_ack(self, event_id: str) -> bool:
        """Whether ``event_id`` was acknowledged (as read by :meth:`poll`); forgotten once said. For a holder that
        waits in turns with other threads (a host's storage layer) instead of in :meth:`wait_ack`."""
        if event_id in self._acked:
            self._acked.discard(event_id)
            return True
        return False

    def engine_gone(self) -> bool:
        """Whether the engine is gone: the connection is down and a reconnect is refused (nothing listens)."""
        if self.sock is not None:
            return False
        return not self._connected(force=True, timeout_s=0.5) and isinstance(self.last_error, ConnectionRefusedError)

    def _drop(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
        self.sock, self._lines = None, None

    # ------------------------------------------------------------------ holds
    def wait_ack(self, event_id: str, timeout_s: float) -> str:
        """Hold until the engine acknowledges ``event_id``; returns ``acked``, ``timeout`` or ``engine gone``.

        A dropped connection is retried at once (the hold needs the engine); a refused one means the engine is
        gone, and the job goes on rather than sitting out the timeout (a dead engine never freezes training)."""
        self.waiting = event_id
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if event_id in self._acked:
                    self._acked.discard(event_id)
                    return "acked"
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout"
                if self.sock is None:
                    if self._connected(force=True, timeout_s=max(0.05, min(CONNECT_TIMEOUT_S, left))):
                        continue
                    if isinstance(self.last_error, ConnectionRefusedError):
                        return "engine gone"  # its host answers and nothing listens: the engine is dead
                    time.sleep(min(max(left, 0.0), 0.2))  # unreachable or slow: try again until the timeout
                    continue
                assert self._lines is not None
                try:
                    msg = self._lines.read(min(left, 0.5))
                except OSError:  # ConnectionError included: reconnect and say again what we wait for
                    self._drop()
                    continue
                if msg is not None:
                    self._note(msg)
        finally:
            self.waiting = None

    def close(self) -> None:
        self._drop()
        if self._spool >= 0:
            with contextlib.suppress(OSError):
                os.close(self._spool)
            self._spool = -1


def _tmp() -> str:
    import tempfile

    return tempfile.gettempdir()


# ---------------------------------------------------------------------- the engine's side
class _Sender:
    """What the engine knows of one sender: the last seq written and the clock correction applied."""

    def __init__(self, name: str):
        self.name = name
        self.have = 0
        self.correction = 0.0
        self.best_rtt = 0.0  # the shortest round trip measured (0: none yet)
        self.connects = 0


class ChannelServer:
    """Accepts senders, writes their events through ``write`` (the history's one writer) in the order received,
    and acknowledges held events when the engine says so (:meth:`ack`).

    One thread (:class:`chaos.gate.Gate`) accepts every connection and reads its hello; a connection whose hello
    shows the run's token gets a thread of its own that reads the rest (a node has a handful of senders: its agent
    and its ranks). Before that hello nothing is answered, not even a ``ping``: a process without the token writes
    nothing and hears nothing. ``write`` must be thread-safe; ``record`` writes the channel's own facts
    (``clock_sync``); ``on_limit(what, detail)`` is told once per limit reached (a flood of connections, no
    descriptor left), for the run's history."""

    def __init__(self, sock: socket.socket, write: Callable[[dict[str, Any]], None],
                 record: Callable[..., Any], token: str | None = None,
                 on_limit: Callable[[str, str], None] | None = None, loads: Callable[[bytes], Any] = json.loads):
        self.sock = sock
        self.loads = loads  # the parser of every line (see decode): this module itself loads nothing but json
        self.token = token  # when set, a connection whose hello does not show it is closed unheard
        self.sock.listen(512)
        self.address = "{}:{}".format(*sock.getsockname()[:2])
        self._write, self._record = write, record
        self._lock = threading.Lock()
        self._senders: dict[str, _Sender] = {}
        self._waiting: dict[str, socket.socket] = {}  # held event id → the connection of the process holding
        self._released: set[str] = set()  # acknowledged ids (a holder reconnecting is answered at once)
        self._held: set[str] = set()  # every held id that came over the channel
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._who: dict[socket.socket, str] = {}  # a worker's connection → "<node>-<local rank>"
        self._states: dict[socket.socket, dict[str, Any]] = {}  # what each connection said of itself (``state``)
        # What each sender last said of itself, kept after its connection closed (``said``): a host's storage layer
        # that counted a fault's matches and then died with its node still counts (sender name, who) -> states.
        self._said: dict[tuple[str, str], dict[str, Any]] = {}
        self._orders: dict[str, tuple[str, dict[str, Any]]] = {}  # standing order name → (who, spec)
        self._stopping = False
        self._counts = {"connections": 0, "events": 0, "duplicates": 0, "acks": 0}
        from chaos.gate import Gate, Limits  # lazy: the probe imports this module and loads nothing of the server

        self._gate = Gate(sock, admit=self._admit, serve=self._serve, name="torch-chaos-channel",
                          limits=Limits(first_line_max=HELLO_MAX, first_line_s=HELLO_TIMEOUT_S,
                                        max_pending=MAX_PENDING, max_served=MAX_CONNECTIONS),
                          on_limit=on_limit)

    @property
    def stats(self) -> dict[str, int]:
        """Counts for the history's ``channel_closed``: ``connections`` admitted, ``refused`` (a wrong or missing
        token, anything but a hello first, no hello in time, a hello too long, closed to make room or beyond
        the limits)."""
        g = self._gate.stats
        with self._lock:
            return {**self._counts, "refused": g.refused + g.timed_out + g.too_long + g.evicted + g.over_capacity}

    def start(self) -> None:
        self._gate.start()

    def _admit(self, line: bytes, peer: str) -> tuple[bool, Any]:
        """The gate's question: is this first line a hello with the run's token? Nothing is answered to one that
        is not (a stranger learns nothing, not even that this is a channel)."""
        t1 = time.time()
        msg = decode(line, self.loads)
        if msg.get("op") != "hello":
            return False, None
        if self.token is not None:
            given = msg.get("token")
            if not isinstance(given, str) or not hmac.compare_digest(
                    given.encode("utf-8", "surrogatepass"), self.token.encode()):
                return False, None
        return True, (msg, t1)

    def _serve(self, conn: socket.socket, peer: str, admitted: tuple[dict[str, Any], float], rest: bytes) -> None:
        with self._lock:
            self._conns[conn] = threading.current_thread()
            self._counts["connections"] += 1
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            keepalive(conn)
            lines = _Lines(conn, rest, loads=self.loads)
            sender = self._hello(conn, *admitted)
            while True:
                msg = lines.read(None)
                assert msg is not None
                op = msg.get("op")
                if op == "ev":
                    self._event(sender, msg, conn)
                elif op == "ping":
                    t1 = time.time()
                    self._send(conn, {"op": "pong", "t0": msg.get("t0"), "t1": t1, "t2": time.time()})
                elif op == "clock":
                    self._clock(sender, msg)
                elif op == "state" and isinstance(msg.get("name"), str):
                    with self._lock:
                        self._states.setdefault(conn, {})[msg["name"]] = msg.get("value")
                        who = self._who.get(conn)
                        if who is not None and (len(self._said) < MAX_SAID or (sender.name, who) in self._said):
                            self._said.setdefault((sender.name, who), {})[msg["name"]] = msg.get("value")
        except (OSError, ValueError, AssertionError):
            pass
        finally:
            with self._lock:
                self._conns.pop(conn, None)
                self._who.pop(conn, None)
                self._states.pop(conn, None)
                for held in [i for i, c in self._waiting.items() if c is conn]:
                    del self._waiting[held]
            with contextlib.suppress(OSError):
                conn.close()

    def _hello(self, conn: socket.socket, msg: dict[str, Any], t1: float) -> _Sender:
        name = str(msg.get("sender"))
        with self._lock:
            sender = self._senders.setdefault(name, _Sender(name))
            sender.connects += 1
            said = msg.get("waiting")  # one held id (a probe), or several (a host's storage layer)
            held = [said] if isinstance(said, str) else [w for w in said if isinstance(w, str)] \
                if isinstance(said, list) else []
            answer_now = [w for w in held if w in self._released]
            for w in held:
                if w not in self._released:
                    self._waiting[w] = conn
            who = msg.get("who")
            if isinstance(who, str):
                self._who[conn] = who
                for order, (target, spec) in self._orders.items():  # before the welcome: the client counts on it
                    if target == who:
                        self._send(conn, {"op": "order", "name": order, "spec": spec})
            self._send(conn, {"op": "welcome", "have": sender.have, "t1": t1, "t2": time.time()})
            for w in answer_now:
                self._send(conn, {"op": "ack", "id": w})
        return sender

    def _event(self, sender: _Sender, msg: dict[str, Any], conn: socket.socket) -> None:
        seq, event = msg.get("seq"), msg.get("e")
        if not isinstance(seq, int) or not isinstance(event, dict):
            return
        with self._lock:  # one lock for dedupe and write: receive order is write order
            if seq <= sender.have:
                self._counts["duplicates"] += 1
                held = event.get("id")
                if isinstance(held, str) and held not in self._released:
                    self._waiting.setdefault(held, conn)
                return
            sender.have = seq
            if sender.correction and isinstance(event.get("t"), (int, float)):
                event["t_sender"] = event["t"]
                event["t"] = event["t"] + sender.correction
            held = event.get("id")
            if isinstance(held, str):
                self._waiting[held] = conn
                self._held.add(held)
            self._counts["events"] += 1
            self._write(event)

    def _clock(self, sender: _Sender, msg: dict[str, Any]) -> None:
        offset, rtt = msg.get("offset"), msg.get("rtt")
        if not isinstance(offset, (int, float)) or not isinstance(rtt, (int, float)):
            return
        with self._lock:
            corrected = abs(offset) > max(CORRECT_ABOVE_S, rtt / 2)
            # a measurement whose round trip is far longer than this sender's best (a busy engine or node) is
            # recorded but does not move the correction: its error bound is that much wider
            if rtt <= 2 * sender.best_rtt or sender.best_rtt == 0.0:
                sender.correction = float(offset) if corrected else 0.0
            else:
                corrected = sender.correction != 0.0
            sender.best_rtt = min(sender.best_rtt or float(rtt), float(rtt))
            node, _, rest = sender.name.partition(":")
            self._record(sender=sender.name, node=node, pid=int(rest.split(":")[0]) if rest[:1].isdigit() else None,
                         offset_s=float(offset), rtt_s=float(rtt), corrected=corrected, at=str(msg.get("at")))

    def _send(self, conn: socket.socket, msg: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(_line(msg))

    def ack(self, event_id: str) -> bool:
        """Acknowledge a held event; False when it did not come over the channel (a file-mode writer's)."""
        with self._lock:
            conn = self._waiting.pop(event_id, None)
            known = event_id in self._held  # a holder that died since needs no file either
            self._released.add(event_id)
            if conn is not None:
                self._send(conn, {"op": "ack", "id": event_id})
                self._counts["acks"] += 1
        return known

    def order(self, name: str, who: str, spec: dict[str, Any] | None) -> int:
        """Give (``spec``) or withdraw (None) the standing order ``name`` to the worker ``who`` (``<node>-<local
        rank>``): sent to its connections now, and again to any that connects later. Returns how many
        connections it was sent to."""
        with self._lock:
            if spec is None:
                self._orders.pop(name, None)
            else:
                self._orders[name] = (who, spec)
            conns = [c for c, w in self._who.items() if w == who]
            for conn in conns:
                self._send(conn, {"op": "order", "name": name, "spec": spec})
        return len(conns)

    def states(self, who: str, name: str) -> list[Any]:
        """What each live connection of ``who`` last said of ``name`` (None: nothing yet), one entry per
        connection: the engine waits on these (every host's storage layer enforcing a rules version)."""
        with self._lock:
            return [self._states.get(c, {}).get(name) for c, w in self._who.items() if w == who]

    def said(self, who: str, name: str) -> list[Any]:
        """What every sender of ``who`` ever connected last said of ``name``, closed connections included (one
        entry per sender that said it): counts a layer reported before its host's node died still count."""
        with self._lock:
            return [states[name] for (_, w), states in self._said.items() if w == who and name in states]

    def stop(self, drain_s: float = 1.0) -> dict[str, Any]:
        """Stop accepting, give open connections ``drain_s`` to deliver what they sent, close; returns the
        counts (for the history's ``channel_closed``)."""
        self._stopping = True
        self._gate.stop()  # no connection is admitted after this: the threads below are all there will be
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
        deadline = time.monotonic() + drain_s
        for conn, thread in self._gate.served():
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                thread.join(0.5)
        stats = self.stats
        with self._lock:
            return {**stats, "senders": len(self._senders),
                    "reconnections": sum(max(0, s.connects - 1) for s in self._senders.values())}


KEEPALIVE_IDLE_S, KEEPALIVE_EVERY_S, KEEPALIVE_PROBES = 5, 2, 3


def keepalive(conn: socket.socket) -> None:
    """A peer whose host is gone or cut off (a lost host, a partition) never closes its connection: TCP keepalive
    ends it after ~11 s of silence, so it stops counting among the live connections (``states``) and holders. A
    stopped process's kernel still answers: a frozen node keeps its connection."""
    with contextlib.suppress(OSError, AttributeError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_EVERY_S)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (the address the runtime's nodes reach; never all interfaces)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock
