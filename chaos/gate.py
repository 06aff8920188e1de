"""The door of a root process's TCP server: every connection shows who it is before it holds a thread.

Why: the history channel (:mod:`chaos.channel`) and the cluster agent (:mod:`chaos.cluster.agent`) run as root
and listen where more than their own clients reach (a shared login node's cluster interface, a docker bridge). Both
used to give each accepted connection a thread that then waited for its first line: anyone who could connect held
a thread (4000 idle connections: 4000 threads), or all of a fixed number of slots (the agent's 16), for as long as
the read timeout allowed, and at the descriptor limit the accept loop died for good.

Here one thread (:class:`Gate`) accepts and reads every connection's *first line* (the channel's ``hello``, the
agent's request, each carrying the token) without blocking, with a short deadline and a small size limit. Only a
connection whose first line ``admit`` takes gets a thread of its own (at most ``max_served`` at once). Until
then a connection costs a descriptor and a few bytes, and the waiting ones are bounded: beyond ``max_pending`` (or
``per_peer`` from one address) the oldest waiting one is closed, so a flood of idle connections cannot keep out a
client that sends its line at once. ``accept`` failing for want of descriptors (EMFILE, ENFILE) or memory closes
the oldest waiting connection and backs off; the loop never ends but by :meth:`Gate.stop`.

Standard library only: :mod:`chaos.channel` imports it, and that runs inside training processes and containers.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# accept() failures that mean "not now" (no descriptor, no memory): back off and keep accepting
_SCARCE = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.05, 1.0
POLL_S = 0.25  # the loop wakes at least this often (deadlines), and at once on stop()


@dataclass
class Limits:
    """What one connection may cost before and after it has shown its first line."""

    first_line_max: int = 64 << 10  # bytes of the first line (with its newline); longer: refused
    first_line_s: float = 3.0  # from accept to the first line's newline; later: closed unheard
    max_pending: int = 256  # connections waiting for their first line; beyond, the oldest is closed
    per_peer: int | None = None  # of those, from one address (None: no such limit; loopback clients share one)
    max_served: int = 1024  # connections admitted and holding a thread; beyond, a new one is refused


@dataclass
class _Pending:
    peer: str
    deadline: float
    buf: bytearray = field(default_factory=bytearray)


@dataclass
class GateStats:
    accepted: int = 0
    admitted: int = 0
    refused: int = 0  # admit said no (a wrong token, not the protocol)
    timed_out: int = 0  # no first line within first_line_s
    too_long: int = 0
    evicted: int = 0  # closed to make room (max_pending, per_peer, no descriptor left)
    over_capacity: int = 0  # admitted but max_served were busy
    accept_errors: int = 0  # accept() failed for want of descriptors or memory


# admit(first line without its newline, peer address) -> (True, payload for serve) or (False, answer or None)
Admit = Callable[[bytes, str], tuple[bool, Any]]
# serve(connection (blocking), peer, payload, bytes that came after the first line): runs in its own thread; the
# gate closes the connection when it returns
Serve = Callable[[socket.socket, str, Any, bytes], None]


class Gate:
    """Accepts on ``sock`` and reads each connection's first line in one thread; ``serve`` runs for the admitted.

    ``on_limit(what, detail)`` is told once per kind of limit reached (``pending``, ``per_peer``, ``served``,
    ``descriptors``, ``threads``; ``error``: the loop caught a bug of its own and went on): a flood is one line
    of the run's record, not one per connection.
    ``allowed(peer)`` (optional) is asked at accept: False closes the connection unread. ``too_long`` is
    answered to a first line over the limit (None: closed without an answer)."""

    def __init__(self, sock: socket.socket, *, admit: Admit, serve: Serve, limits: Limits | None = None,
                 name: str = "torch-chaos-gate", on_limit: Callable[[str, str], None] | None = None,
                 allowed: Callable[[str], bool] | None = None, too_long: bytes | None = None):
        self.sock = sock
        self.limits = limits or Limits()
        self._admit, self._serve, self._allowed, self._too_long = admit, serve, allowed, too_long
        self._on_limit = on_limit
        self.name = name
        self.stats = GateStats()
        self.limits_reached: set[str] = set()
        self.threads: dict[socket.socket, threading.Thread] = {}  # admitted connections being served
        self._lock = threading.Lock()
        self._pending: OrderedDict[socket.socket, _Pending] = OrderedDict()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._running = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        """Run the loop in a thread of its own."""
        self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self._thread.start()

    def run(self) -> None:
        """The accept-and-first-line loop; returns once :meth:`stop` was called (or the socket was closed)."""
        sel = selectors.DefaultSelector()
        self._running = True
        try:
            try:
                self.sock.setblocking(False)
                sel.register(self._wake_r, selectors.EVENT_READ, "wake")
                sel.register(self.sock, selectors.EVENT_READ, "listen")
            except (OSError, ValueError):  # stopped (or the socket closed) before the loop began
                return
            listening, resume_at, backoff = True, 0.0, BACKOFF_FIRST_S
            while not self._stopping.is_set():
                now = time.monotonic()
                if not listening and now >= resume_at:
                    try:
                        sel.register(self.sock, selectors.EVENT_READ, "listen")
                    except (OSError, ValueError):  # closed meanwhile
                        return
                    listening = True
                wait = POLL_S
                if self._pending:
                    wait = min(wait, max(0.0, next(iter(self._pending.values())).deadline - now))
                if not listening:
                    wait = min(wait, max(0.0, resume_at - now))
                try:
                    for key, _ in sel.select(wait):
                        if key.data == "wake":
                            with contextlib.suppress(OSError):
                                self._wake_r.recv(64)
                        elif key.data == "listen":
                            outcome = self._accept_some(sel)
                            if outcome == "closed":
                                return
                            if outcome == "scarce":
                                sel.unregister(self.sock)
                                listening, resume_at = False, time.monotonic() + backoff
                                backoff = min(BACKOFF_MAX_S, backoff * 2)
                            else:
                                backoff = BACKOFF_FIRST_S
                        elif isinstance(key.fileobj, socket.socket) and key.fileobj in self._pending:
                            self._read(sel, key.fileobj)
                    self._expire(sel)
                except Exception as exc:  # a bug here must not end the loop: that would end the server
                    self._limit("error", f"{type(exc).__name__}: {exc} (the loop goes on)")
                    time.sleep(0.05)
        finally:
            for conn in list(self._pending):
                self._drop(sel, conn)
            sel.close()
            self._stopped.set()

    def stop(self, wait_s: float = 2.0) -> None:
        """End the loop (waiting connections are closed); served ones go on until their ``serve`` returns."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(wait_s)
        elif self._thread is None and self._running:
            self._stopped.wait(wait_s)  # run() in a caller's thread (serve_forever): wait for it to return
        for s in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()

    # ------------------------------------------------------------------ the loop's parts
    def _limit(self, what: str, detail: str) -> None:
        with self._lock:
            first = what not in self.limits_reached
            self.limits_reached.add(what)
        if first and self._on_limit is not None:
            with contextlib.suppress(Exception):  # the record of a limit must not end the loop
                self._on_limit(what, detail)

    def _accept_some(self, sel: selectors.BaseSelector) -> str:
        """Accept what is waiting (a bounded batch: reads of waiting connections go on meanwhile). ``scarce``: no
        descriptor (or memory) for one more and nothing to free, pause; ``closed``: the socket is gone."""
        progress = False
        for _ in range(64):
            try:
                conn, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return "ok"
            except OSError as exc:
                if self._stopping.is_set() or exc.errno in (errno.EBADF, errno.EINVAL, errno.ENOTSOCK):
                    return "closed"
                if exc.errno in _SCARCE:
                    self.stats.accept_errors += 1
                    self._limit("descriptors", f"accept failed ({errno.errorcode.get(exc.errno or 0, exc)}): "
                                "the oldest connections still waiting for their first line are closed to make "
                                "room, accepting goes on")
                    if self._pending:  # a waiting connection's descriptor, for the next in the queue
                        self._evict(sel, next(iter(self._pending)))
                        return "ok"
                    return "ok" if progress else "scarce"
                continue  # ECONNABORTED, EPROTO, ...: that connection is gone, the next one is not
            progress = True
            peer = str(address[0]) if isinstance(address, tuple) else str(address)
            self.stats.accepted += 1
            if self._allowed is not None and not self._allowed(peer):
                with contextlib.suppress(OSError):
                    conn.close()
                continue
            lim = self.limits
            if lim.per_peer is not None:
                mine = [c for c, p in self._pending.items() if p.peer == peer]
                if len(mine) >= lim.per_peer:
                    self._limit("per_peer", f"more than {lim.per_peer} connections from {peer} waiting for their "
                                "first line: its oldest are closed")
                    self._evict(sel, mine[0])
            if len(self._pending) >= lim.max_pending:
                self._limit("pending", f"more than {lim.max_pending} connections waiting for their first line: "
                            "the oldest are closed")
                self._evict(sel, next(iter(self._pending)))
            try:
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ, "conn")
            except (OSError, ValueError):
                with contextlib.suppress(OSError):
                    conn.close()
                continue
            self._pending[conn] = _Pending(peer, time.monotonic() + lim.first_line_s)
        return "ok"

    def _read(self, sel: selectors.BaseSelector, conn: socket.socket) -> None:
        pending = self._pending[conn]
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(sel, conn)
            return
        start = len(pending.buf)  # where the newline search resumes: each byte is looked at once
        pending.buf += chunk
        cut = pending.buf.find(b"\n", start)
        if cut < 0 and chunk:
            if len(pending.buf) >= self.limits.first_line_max:
                self.stats.too_long += 1
                self._answer(sel, conn, self._too_long)
            return
        if cut < 0:  # closed by the peer after a last line without its newline: that is the line
            cut = len(pending.buf)
            if not cut:
                self._drop(sel, conn)
                return
        if cut + 1 > self.limits.first_line_max:
            self.stats.too_long += 1
            self._answer(sel, conn, self._too_long)
            return
        line, rest = bytes(pending.buf[:cut]), bytes(pending.buf[cut + 1:])
        self._unlist(sel, conn)
        try:
            ok, payload = self._admit(line, pending.peer)
        except Exception:  # a bug in admit refuses the connection, it does not end the loop
            ok, payload = False, None
        if not ok:
            self.stats.refused += 1
            self._answer(sel, conn, payload)
            return
        self._start(conn, pending.peer, payload, rest)

    def _start(self, conn: socket.socket, peer: str, payload: Any, rest: bytes) -> None:
        with self._lock:
            busy = len(self.threads) >= self.limits.max_served
        if busy:
            self.stats.over_capacity += 1
            self._limit("served", f"{self.limits.max_served} connections already served: a further one was refused")
            self._close(conn)
            return
        try:
            conn.setblocking(True)
        except OSError:
            self._close(conn)
            return
        thread = threading.Thread(target=self._run_serve, args=(conn, peer, payload, rest),
                                  name=f"{self.name}-conn", daemon=True)
        with self._lock:
            self.threads[conn] = thread
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread": the process is at its limit
            with self._lock:
                self.threads.pop(conn, None)
            self._limit("threads", f"no thread for a connection ({exc}): it was refused")
            self._close(conn)
            return
        self.stats.admitted += 1

    def _run_serve(self, conn: socket.socket, peer: str, payload: Any, rest: bytes) -> None:
        try:
            self._serve(conn, peer, payload, rest)
        finally:
            with self._lock:
                self.threads.pop(conn, None)
            self._close(conn)

    def _expire(self, sel: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while self._pending:
            conn, pending = next(iter(self._pending.items()))
            if pending.deadline > now:
                break  # in accept order, and every deadline is accept + first_line_s
            self.stats.timed_out += 1
            self._drop(sel, conn)

    def _evict(self, sel: selectors.BaseSelector, conn: socket.socket) -> None:
        self.stats.evicted += 1
        self._drop(sel, conn)

    def _answer(self, sel: selectors.BaseSelector, conn: socket.socket, answer: bytes | None) -> None:
        """A short refusal, sent only if the socket takes it at once (a peer that does not read is not waited
        for), then closed."""
        self._unlist(sel, conn)
        if answer:
            with contextlib.suppress(OSError):
                conn.send(answer)
        self._close(conn)

    def _unlist(self, sel: selectors.BaseSelector, conn: socket.socket) -> None:
        self._pending.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            sel.unregister(conn)

    def _drop(self, sel: selectors.BaseSelector, conn: socket.socket) -> None:
        self._unlist(sel, conn)
        self._close(conn)

    @staticmethod
    def _close(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.close()

    def served(self) -> list[tuple[socket.socket, threading.Thread]]:
        """The admitted connections being served, with their threads (to drain them at a stop)."""
        with self._lock:
            return list(self.threads.items())

    def pending(self) -> int:
        """How many connections wait for their first line (for tests and stats)."""
        return len(self._pending)
