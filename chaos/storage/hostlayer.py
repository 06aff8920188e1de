"""The storage layer on each node's own host, for runtimes whose nodes write the shared checkpoint directory from
their hosts (Slurm): there a FUSE mount on the engine's host would see none of their operations.

The runtime starts each node as ``python -m chaos.storage host --mount DIR ... -- <the node's command>``
(:func:`wrap`). That wrapper, on the node's host:

1. lazily unmounts a torch-chaos mount left at ``DIR`` on this host (a step killed with its server leaves a dead
   mount, ``ENOTCONN``, until someone unmounts it);
2. starts the server (``python -m chaos.storage host-serve``) as its child, with a mark of its own
   (``CHAOS_TREE=storage/<run>``, no ``CHAOS_NODE``): ``kill_worker`` looks for the node's marked processes and
   must not take the server for a worker;
3. waits until the mount answers, then ``exec``s the node's command: the command keeps the wrapper's pid, so it is
   the step's main process as without a layer (its exit code is the step's, signals reach it as before).

The server sends its events over the history channel (:class:`Link`; nothing is written to a shared history
file), holds a paused-on event until the engine acknowledges it there, and takes the storage faults' rules from the
engine's standing order ``storage_rules`` (every host's layer gets it, and a layer that connects later gets it
before it mounts), reporting the version it enforces back as the connection's ``storage_rules`` state
(:class:`chaos.storage.control.ChannelStorageControl` waits for every connected layer). It ends when its parent
(the node's command) is gone: it unmounts, and the FUSE loop returns. A server SIGKILLed with its step leaves a
dead mount; the next wrapper on that host, the runtime's teardown and ``chaos cleanup`` sweep those
(``python -m chaos.storage sweep``).

Standard library and mfusepy only, like the server: compute hosts have the nodes' Python, not the engine's.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from chaos.channel import ENV_CHANNEL, ENV_SPOOL_DIR, ENV_TOKEN, ChannelClient
from chaos.storage import libfuse
from chaos.storage.control import HOST_WHO, MATCHED_STATE, RULES_ORDER, RULES_STATE
from chaos.storage.mounts import chaos_mounts, is_mounted, served, unmount

TREE_VAR = "CHAOS_TREE"  # chaos.marks.TREE_VAR (not imported: chaos.marks needs psutil, absent on compute hosts)
NODE_VAR = "CHAOS_NODE"
MOUNT_WAIT_S = 10.0
CONNECT_WITHIN_S = 5.0
PARENT_POLL_S = 0.05
HOLD_TURN_S = 0.005


class Link:
    """The server's channel client, shared by libfuse's threads and the rules thread.

    :class:`~chaos.channel.ChannelClient` is not thread-safe, so every use takes one lock; a held operation waits
    for its acknowledgement in short turns (one non-blocking read each) instead of inside ``wait_ack``, so the
    rules thread can still take in a rule the engine installs while a save is held (a storage fault triggered on
    ``checkpoint_save_started``)."""

    def __init__(self, client: ChannelClient):
        self.client = client
        self.lock = threading.Lock()
        self.held: set[str] = set()  # every operation held now (one per rank saving): all said at a reconnect

    def connect(self, within_s: float) -> bool:
        """Connect before mounting (the welcome brings the rules standing now), trying until ``within_s``."""
        deadline = time.monotonic() + within_s
        while True:
            with self.lock:
                if self.client.flush():
                    return True
            if time.monotonic() >= deadline or isinstance(self.client.last_error, ConnectionRefusedError):
                return False
            time.sleep(0.1)

    def send(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.client.send(record)

    def hold(self, event_id: str, timeout_s: float, gone: Callable[[], bool] | None = None) -> str:
        """Wait for the engine's acknowledgement of ``event_id``: ``acked``, ``engine gone`` (its host refuses a
        reconnect), ``gone`` (the held caller is dying) or ``timeout``. A reconnect is tried when the client's
        back-off allows one, never in every turn: the lock is every operation's."""
        deadline = time.monotonic() + timeout_s
        next_check = 0.0
        with self.lock:
            self.held.add(event_id)
        try:
            while time.monotonic() < deadline:
                with self.lock:
                    c = self.client
                    c.waiting = sorted(self.held)  # said again in the hello if the connection drops meanwhile
                    if c.connected():
                        c.poll()
                    elif isinstance(c.last_error, ConnectionRefusedError):
                        return "engine gone"  # its host answers and nothing listens: the engine is dead
                    if c.took_ack(event_id):
                        return "acked"
                now = time.monotonic()
                if gone is not None and now >= next_check:
                    next_check = now + 0.02
                    if gone():
                        return "gone"
                time.sleep(HOLD_TURN_S)
            return "timeout"
        finally:
            with self.lock:
                self.held.discard(event_id)
                self.client.waiting = sorted(self.held) or None

    def rules(self) -> dict[str, Any] | None:
        """The rules the engine's standing order carries now (None: no order yet)."""
        with self.lock:
            c = self.client
            if c.connected():  # down: a reconnect when the back-off allows (the welcome brings the standing order)
                c.poll()
            document = c.orders.get(RULES_ORDER)
        return document if isinstance(document, dict) else None

    def applied(self, version: int) -> None:
        with self.lock:
            self.client.tell(RULES_STATE, version)

    def matched(self, counts: dict[int, int]) -> None:
        """The layer's match counts (told when a rules version is applied and when a rule first matches, so a
        layer that dies with its node has said that its rule acted)."""
        with self.lock:
            self.client.tell(MATCHED_STATE, {str(k): v for k, v in counts.items()})


def link_from_environment() -> Link:
    """This host's link to the engine, from the environment the runtime gave the node (the step's)."""
    address = os.environ.get(ENV_CHANNEL)
    if not address:
        raise RuntimeError(f"{ENV_CHANNEL} is not set: the layer on a node's host sends its events to the engine's "
                           "history channel, which only a run gives")
    sender = f"storage@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return Link(ChannelClient(address, sender, os.environ.get(ENV_SPOOL_DIR), who=HOST_WHO,
                              token=os.environ.get(ENV_TOKEN)))


def wrap(python: str, mount: str, events: str, run_id: str, command: list[str], pause_on: list[str],
         progress_regex: str | None, passthrough: bool = False) -> list[str]:
    """The node's command run through the layer on its host (what the runtime starts as the node)."""
    argv = [python, "-m", "chaos.storage", "host", "--mount", mount, "--events", events, "--run-id", run_id]
    if passthrough:
        argv.append("--passthrough")
    if pause_on:
        argv += ["--pause-on", ",".join(pause_on)]
    if progress_regex:
        argv += ["--progress-regex", progress_regex]
    return [*argv, "--", *command]


def host(mount: str, events: str, run_id: str, command: list[str], pause_on: str = "",
         progress_regex: str | None = None, passthrough: bool = False) -> int:
    """The wrapper: mount through a server of its own, then become the node's command. Returns only on failure
    (the exit status); on success the process is the command."""
    mount = os.path.abspath(mount)
    if not command:
        print("torch-chaos storage layer: no command after --", file=sys.stderr)
        return 2
    if not unmount(mount):  # a torch-chaos mount left at this path on this host (none: nothing to do)
        print(f"torch-chaos storage layer: a dead mount at {mount} on {socket.gethostname()} cannot be unmounted",
              file=sys.stderr)
        return 3
    os.makedirs(mount, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != NODE_VAR}
    env[TREE_VAR] = f"storage/{run_id}"
    argv = [sys.executable, "-m", "chaos.storage", "host-serve", "--mount", mount, "--events", events,
            "--run-id", run_id, "--parent", str(os.getpid())]
    if pause_on:
        argv += ["--pause-on", pause_on]
    if progress_regex:
        argv += ["--progress-regex", progress_regex]
    offer_r = offer_w = -1
    if passthrough:  # checked before the mount: the node's command must never run on the bare directory instead
        library, problems = libfuse.readiness()
        if library is None or problems:
            print(f"torch-chaos storage layer: storage.passthrough on {socket.gethostname()}: "
                  + "; ".join(problems), file=sys.stderr)
            return 3
        # ... and then by the kernel's own word at INIT, which the server writes into this pipe: a kernel that does
        # not offer passthrough makes the server unmount ~0.2 s later, and the command must not start meanwhile
        offer_r, offer_w = os.pipe()
        argv += ["--passthrough", "--offer-fd", str(offer_w)]
        env["FUSE_LIBRARY_PATH"] = library
    server = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, pass_fds=(offer_w,) if offer_w >= 0 else ())
    if offer_w >= 0:
        os.close(offer_w)
    deadline = time.monotonic() + MOUNT_WAIT_S
    offer = OfferReader(offer_r) if offer_r >= 0 else None
    try:
        while not (is_mounted(mount) and served(mount) and (offer is None or offer.answered())):
            if server.poll() is not None or time.monotonic() > deadline:
                return _gave_up(server, mount, "could not mount {mount} on {host} (server exit {code}); `chaos "
                                "doctor` on this host says what FUSE needs")
            time.sleep(0.02)
        if offer is not None and not offer.offered:
            return _gave_up(server, mount, "storage.passthrough on {host}: the kernel did not offer FUSE passthrough "
                            "at INIT (Linux >= 6.9 with CONFIG_FUSE_PASSTHROUGH=y); leave storage.passthrough out "
                            "to run on the server's path")
    finally:
        if offer is not None:
            offer.close()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)  # the server stays our child: it sees us (the command) go
    except OSError as exc:
        print(f"torch-chaos storage layer: cannot start {command[0]}: {exc}", file=sys.stderr)
        return 127


def _gave_up(server: subprocess.Popen[bytes], mount: str, why: str) -> int:
    """The node's command is not started: the server stopped, the mount gone, the reason said (exit status 3)."""
    if server.poll() is None:
        server.kill()
        server.wait()
    unmount(mount)
    print("torch-chaos storage layer: " + why.format(mount=mount, host=socket.gethostname(), code=server.poll()),
          file=sys.stderr)
    return 3


class OfferReader:
    """The host server's word on passthrough at INIT: one JSON line on a pipe (``{"offered": true}``), read without
    waiting. A server that ends or closes the pipe without it has answered: not offered."""

    def __init__(self, fd: int):
        self.fd, self._got, self.offered, self._done = fd, b"", False, False

    def answered(self) -> bool:
        while not self._done and select.select([self.fd], [], [], 0)[0]:
            chunk = os.read(self.fd, 4096)
            self._got += chunk
            if not chunk or b"\n" in self._got:
                self._done = True
                try:
                    self.offered = json.loads(self._got.partition(b"\n")[0]).get("offered") is True
                except (ValueError, AttributeError):
                    self.offered = False
        return self._done

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def watch_parent(parent: int, mount: str) -> None:
    """Unmount once the node's command (our parent) is gone: the FUSE loop then returns and the server ends."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    unmount(mount)


def serve_host(mount: str, events: str, run_id: str, parent: int, pause_on: frozenset[str],
               progress_regex: str | None, passthrough: bool = False, offer_fd: int | None = None) -> None:
    """The server on a node's host: connected before it mounts, so the rules standing now apply from the first
    operation; blocks until unmounted."""
    # lazy: mfusepy: the host layer is imported on hosts that may lack it until it serves
    from chaos.storage.server import serve

    link = link_from_environment()
    # connected first, so the rules standing now apply from the first operation; an engine that does not answer in
    # time: mount anyway (events are spooled and replayed, the rules come with the eventual welcome)
    link.connect(CONNECT_WITHIN_S)
    threading.Thread(target=watch_parent, args=(parent, mount), name="torch-chaos-storage-parent",
                     daemon=True).start()
    serve(mount, events, None, None, run_id, pause_on, None, progress_regex=progress_regex, link=link,
          passthrough=passthrough, offer_fd=offer_fd)


def sweep(run_id: str | None) -> list[str]:
    """``python -m chaos.storage sweep``: unmount this host's torch-chaos mounts (of one run), dead or served;
    the paths unmounted."""
    done = []
    for m in chaos_mounts():
        if (run_id is None or m.run_id == run_id) and unmount(m.path):
            done.append(m.path)
    return done
