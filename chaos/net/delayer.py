"""Userspace packet delayer for an NFQUEUE queue: network delay on kernels without ``sch_netem``.

The kernel here has no ``sch_netem``, so ``tc qdisc ... netem delay`` is impossible. Instead, inside a node's
network namespace, an iptables rule hands packets to a netfilter queue::

    iptables -A INPUT -i eth0 -j NFQUEUE --queue-num 3 --queue-bypass

and this process, run in the same namespace, binds that queue, holds each packet for ``delay ± jitter`` and then
accepts it::

    nsenter --net=/run/netns/NAME python -m chaos.net.delayer --queue 3 --delay-ms 100 --jitter-ms 10

It prints exactly one line ``ready`` to stdout once the queue is bound (the caller waits for it before or after
adding the rule), and on exit one line of JSON: ``{"packets": n, "enobufs": k, "mean_delay_ms": x}``. SIGTERM or
SIGINT accept every held packet at once, unbind the queue and exit 0. If ``libnetfilter_queue.so.1`` cannot be
loaded or the queue cannot be bound it prints one line to stderr and exits 2.

Only the standard library is used (``ctypes`` against libnetfilter_queue, Debian package ``libnetfilter-queue1``),
because the process runs with the host's Python inside the namespace; nothing from :mod:`chaos` is imported.

Design notes:

* Ordering. netem draws every packet's delay independently, so with jitter it reorders packets. We don't: a
  packet's release time is ``max(now + delay + uniform(-jitter, +jitter), previous packet's release time)``
  (never before ``now``), so the queue stays FIFO and TCP sees no reordering (which would otherwise trigger
  spurious fast retransmits and make "delay" look like loss). The cost: jitter only ever adds to a burst's
  delay, since a packet can't overtake one held longer.
* Batch verdicts. Because release order equals queue order, packets are released with
  ``nfq_set_verdict_batch(id)``, which accepts every packet in the kernel queue up to ``id``. One verdict covers a
  whole due burst, and a packet whose queue message was lost (the netlink socket overflowed: ``ENOBUFS``, counted
  in ``enobufs``) is released with the next packet after it instead of sitting in the kernel forever.
* Only metadata is copied (``NFQNL_COPY_META``): the packet id is all we need. ``NFQA_CFG_F_GSO`` is set so large
  GSO packets are queued whole rather than segmented for us.
* ``--max-queue`` is the kernel queue's length; beyond it the kernel drops packets (the queue is not fail-open,
  so an overloaded delayer shows up as loss rather than as packets silently skipping the delay).
* Queue on ingress (``INPUT``/``PREROUTING`` in the delayed node's namespace, or ``FORWARD`` in a router
  namespace), not on ``OUTPUT``. A locally sent packet held in the queue still belongs to its TCP socket, and TCP
  Small Queues then lets only about two packets per connection sit "below" TCP at a time (netem avoids this with
  ``skb_orphan_partial``, which NFQUEUE has no equivalent for): with a 100 ms delay on ``OUTPUT``, a bulk TCP
  transfer crawls at ~20 packets/s. Received packets are orphaned in ``ip_rcv`` before ``PREROUTING``, so on
  ingress bulk transfers run at full window. Either placement adds the delay to every round trip once.
* Use ``--queue-bypass`` on the rule: while no process has the queue bound (before start, after exit, after
  SIGKILL) packets pass undelayed instead of being dropped. On SIGKILL the packets held at that moment are
  dropped by the kernel (TCP retransmits them); on SIGTERM they are accepted.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import random
import select
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Sequence
from types import FrameType
from typing import Any

LIBRARY = "libnetfilter_queue.so.1"
INSTALL_HINT = "apt-get install -y libnetfilter-queue1"
EXIT_SETUP_FAILED = 2

NF_ACCEPT = 1  # linux/netfilter.h
NFQNL_COPY_META = 1  # enum nfqnl_config_mode: NFQNL_COPY_NONE, NFQNL_COPY_META, NFQNL_COPY_PACKET
NFQA_CFG_F_GSO = 1 << 2  # linux/netfilter/nfnetlink_queue.h
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
RCVBUF_BYTES = 32 * 1024 * 1024
RECV_BUFFER_BYTES = 1 << 16  # metadata-only messages are a few hundred bytes
DRAIN_BATCH = 512  # messages read per wakeup before due packets are released again
ID_HALF_RANGE = 0x7FFFFFFF  # the kernel compares packet ids modulo 2**32 (nfq_id_after)

# int cb(struct nfq_q_handle *qh, struct nfgenmsg *nfmsg, struct nfq_data *nfad, void *data)
NfqCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class SetupError(RuntimeError):
    """The library could not be loaded or the queue could not be bound."""


def load_library(name: str = LIBRARY) -> ctypes.CDLL:
    """Load libnetfilter_queue and declare the signatures used here."""
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SetupError(f"cannot load {name} ({exc}); install it: {INSTALL_HINT}") from None
    vp, c_int, u8, u16, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "nfq_open": (vp, []),
        "nfq_close": (c_int, [vp]),
        "nfq_bind_pf": (c_int, [vp, u16]),
        "nfq_unbind_pf": (c_int, [vp, u16]),
        "nfq_create_queue": (vp, [vp, u16, NfqCallback, vp]),
        "nfq_destroy_queue": (c_int, [vp]),
        "nfq_fd": (c_int, [vp]),
        "nfq_handle_packet": (c_int, [vp, ctypes.POINTER(ctypes.c_char), c_int]),
        "nfq_set_mode": (c_int, [vp, u8, ctypes.c_uint]),
        "nfq_set_queue_maxlen": (c_int, [vp, u32]),
        "nfq_set_queue_flags": (c_int, [vp, u32, u32]),
        "nfq_set_verdict_batch": (c_int, [vp, u32, u32]),
        "nfq_get_msg_packet_hdr": (vp, [vp]),
    }
    for fname, (restype, argtypes) in signatures.items():
        try:
            func = getattr(lib, fname)
        except AttributeError:
            raise SetupError(f"{name} lacks {fname}; install a current one: {INSTALL_HINT}") from None
        func.restype = restype
        func.argtypes = argtypes
    return lib


def _errno_text() -> str:
    err = ctypes.get_errno()
    return f"{errno.errorcode.get(err, err)}: {os.strerror(err)}" if err else "unknown error"


class Delayer:
    """Holds the packets of one NFQUEUE queue for ``delay ± jitter`` seconds each, in FIFO order."""

    def __init__(
        self,
        lib: ctypes.CDLL,
        queue_num: int,
        delay_s: float,
        jitter_s: float = 0.0,
        rng: random.Random | None = None,
        max_queue: int = 20000,
    ) -> None:
        self.lib = lib
        self.queue_num = queue_num
        self.delay_s = delay_s
        self.jitter_s = jitter_s
        self.rng = rng if rng is not None else random.Random()
        self.max_queue = max_queue
        self.packets = 0  # packets seen (and released)
        self.enobufs = 0  # socket overflows: queue messages the kernel could not deliver to us
        self.callback_errors = 0
        self._held_total_s = 0.0
        self._released = 0
        self._held: deque[tuple[float, int, float]] = deque()  # (release_at, packet_id, arrived_at)
        self._last_release = 0.0
        self._last_id: int | None = None
        self._stop = False
        self._h: int | None = None  # struct nfq_handle *
        self._qh: int | None = None  # struct nfq_q_handle *
        self._fd = -1
        self._buf = (ctypes.c_char * RECV_BUFFER_BYTES)()
        self._callback = NfqCallback(self._on_packet)  # must stay referenced while the queue exists

    # -- setup / teardown -------------------------------------------------------------------------------------

    def open(self) -> None:
        """Bind the queue; raises :class:`SetupError` (after cleaning up) when that fails."""
        lib = self.lib
        h = lib.nfq_open()
        if not h:
            raise SetupError(f"nfq_open failed ({_errno_text()}); are we root, is nfnetlink_queue available?")
        self._h = h
        try:
            lib.nfq_unbind_pf(h, socket.AF_INET)  # a no-op on current kernels; errors don't matter
            if lib.nfq_bind_pf(h, socket.AF_INET) < 0:
                raise SetupError(f"nfq_bind_pf(AF_INET) failed ({_errno_text()})")
            qh = lib.nfq_create_queue(h, self.queue_num, self._callback, None)
            if not qh:
                raise SetupError(
                    f"nfq_create_queue({self.queue_num}) failed ({_errno_text()}); is another process bound to it?"
                )
            self._qh = qh
            if lib.nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0:
                raise SetupError(f"nfq_set_mode(COPY_META) failed ({_errno_text()})")
            if lib.nfq_set_queue_maxlen(qh, self.max_queue) < 0:
                raise SetupError(f"nfq_set_queue_maxlen({self.max_queue}) failed ({_errno_text()})")
            lib.nfq_set_queue_flags(qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO)  # optional: older kernels lack it
            self._fd = lib.nfq_fd(h)
            self._enlarge_rcvbuf()
            os.set_blocking(self._fd, False)
        except BaseException:
            self.close()
            raise

    def _enlarge_rcvbuf(self) -> None:
        sock = socket.socket(fileno=os.dup(self._fd))  # a dup: closing it leaves the library's socket alone
        try:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)  # root may exceed rmem_max
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        except OSError:
            pass  # the default buffer works, with more ENOBUFS under load
        finally:
            sock.close()

    def close(self) -> None:
        """Destroy the queue and close the handle (packets still in the kernel queue are then dropped)."""
        if self._qh is not None:
            self.lib.nfq_destroy_queue(self._qh)
            self._qh = None
        if self._h is not None:
            self.lib.nfq_close(self._h)
            self._h = None
            self._fd = -1

    def stop(self) -> None:
        self._stop = True

    # -- packets ----------------------------------------------------------------------------------------------

    def _on_packet(self, qh: int | None, nfmsg: int | None, nfad: int | None, data: int | None) -> int:
        try:
            hdr = self.lib.nfq_get_msg_packet_hdr(nfad)
            if not hdr:
                return 0
            packet_id = int.from_bytes(ctypes.string_at(hdr, 4), "big")  # struct nfqnl_msg_packet_hdr.packet_id
            now = time.monotonic()
            hold = self.delay_s
            if self.jitter_s > 0:
                hold += self.rng.uniform(-self.jitter_s, self.jitter_s)
            release_at = max(now + max(hold, 0.0), self._last_release)  # FIFO: never before the previous one
            self._last_release = release_at
            self._held.append((release_at, packet_id, now))
            self._last_id = packet_id
            self.packets += 1
        except Exception:
            self.callback_errors += 1
        return 0

    def _accept_through(self, packet_id: int) -> None:
        """Accept every packet in the kernel queue up to and including ``packet_id`` (modulo 2**32)."""
        if self._qh is not None:
            self.lib.nfq_set_verdict_batch(self._qh, packet_id & 0xFFFFFFFF, NF_ACCEPT)

    def release_due(self, now: float) -> None:
        last_id: int | None = None
        held = self._held
        while held and held[0][0] <= now:
            _, last_id, arrived_at = held.popleft()
            self._held_total_s += now - arrived_at
            self._released += 1
        if last_id is not None:
            self._accept_through(last_id)

    def drain(self, limit: int = DRAIN_BATCH) -> None:
        """Read and handle up to ``limit`` queue messages that are waiting on the socket."""
        for _ in range(limit):
            try:
                n = os.readv(self._fd, [self._buf])
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # messages were lost; the batch verdicts release their packets
                    self.enobufs += 1
                    continue
                raise
            if n <= 0:
                return
            self.lib.nfq_handle_packet(self._h, self._buf, n)

    def accept_all(self) -> None:
        """Accept every packet held or waiting, including ones not read yet, and forget them."""
        self.drain(limit=self.max_queue + DRAIN_BATCH)
        now = time.monotonic()
        for _, _, arrived_at in self._held:
            self._held_total_s += now - arrived_at
            self._released += 1
        self._held.clear()
        # Packets still in flight to our socket have ids after the last one read: accept half the id space ahead.
        base = self._last_id if self._last_id is not None else 0
        self._accept_through(base + ID_HALF_RANGE)

    def run(self, wakeup_fd: int | None = None) -> None:
        """Hold and release packets until :meth:`stop` is called (from a signal handler)."""
        watched = [self._fd] if wakeup_fd is None else [self._fd, wakeup_fd]
        while not self._stop:
            now = time.monotonic()
            self.release_due(now)
            timeout = max(self._held[0][0] - now, 0.0) if self._held else None
            readable, _, _ = select.select(watched, [], [], timeout)
            if wakeup_fd is not None and wakeup_fd in readable:
                try:
                    while os.read(wakeup_fd, 512):
                        pass
                except BlockingIOError:
                    pass
            if self._fd in readable:
                self.drain()

    def summary(self) -> dict[str, Any]:
        mean_ms = 1000.0 * self._held_total_s / self._released if self._released else 0.0
        return {"packets": self.packets, "enobufs": self.enobufs, "mean_delay_ms": round(mean_ms, 3)}


# -- CLI ------------------------------------------------------------------------------------------------------


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.net.delayer",
        description="Hold each packet of an NFQUEUE queue for delay ± jitter, then accept it (FIFO, no reordering).",
    )
    parser.add_argument("--queue", type=int, required=True, help="NFQUEUE queue number (0-65535)")
    parser.add_argument("--delay-ms", type=float, required=True, help="mean added one-way delay in milliseconds")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="uniform jitter ± this many milliseconds")
    parser.add_argument("--seed", type=int, default=None, help="seed for the jitter draws")
    parser.add_argument("--max-queue", type=int, default=20000, help="kernel queue length (packets) before drops")
    args = parser.parse_args(argv)
    if not 0 <= args.queue <= 0xFFFF:
        parser.error("--queue must be in 0..65535")
    if args.delay_ms < 0 or args.jitter_ms < 0:
        parser.error("--delay-ms and --jitter-ms must not be negative")
    if args.max_queue < 1:
        parser.error("--max-queue must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        lib = load_library()
        delayer = Delayer(
            lib,
            args.queue,
            delay_s=args.delay_ms / 1000.0,
            jitter_s=args.jitter_ms / 1000.0,
            rng=random.Random(args.seed),
            max_queue=args.max_queue,
        )
        delayer.open()
    except SetupError as exc:
        print(f"chaos.net.delayer: {exc}", file=sys.stderr, flush=True)
        return EXIT_SETUP_FAILED

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        delayer.stop()

    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        print("ready", flush=True)
        delayer.run(wakeup_fd=wake_r)
    finally:
        try:
            delayer.accept_all()
        finally:
            delayer.close()
            signal.set_wakeup_fd(-1)
            os.close(wake_r)
            os.close(wake_w)
            print(json.dumps(delayer.summary()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
