"""The history channel against a process that is not the run's (issue 29): it never reads the run's token, is
answered nothing before a hello that shows it, and cannot take the channel down with what it sends (a nesting
bomb, a 64 MiB line), with idle connections (a flood of them) or by exhausting the engine's descriptors.

Real sockets against a real server in a process of its own (tests/channel_server.py), so a traceback would show
in its stderr and its threads are counted alone; the token test runs a real engine and reads its run directory as
user ``nobody``. Each takes a few seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chaos
from chaos.channel import ChannelClient, parse_address

TOKEN = "5eb63bbbe01eeed093cb22bb8f5acdc3"
HERE = Path(__file__).resolve().parent
REPO = Path(chaos.__file__).resolve().parent.parent  # the code under test (its PYTHONPATH for the server process)


class Server:
    """tests/channel_server.py running: its address, the events it wrote, its thread count, its stderr."""

    def __init__(self, tmp_path: Path, nofile: int | None = None):
        self.out = tmp_path / "events.jsonl"
        self.out.touch()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, str(HERE / "channel_server.py"), TOKEN, str(self.out),
                                      *([str(nofile)] if nofile else [])],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.address, pid = self.proc.stdout.readline().split()
        self.pid = int(pid)
        self.host, self.port = parse_address(self.address)
        self.stderr = ""
        self.stats: dict[str, Any] | None = None

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.read_text().splitlines()]

    def events(self) -> list[dict[str, Any]]:
        return [e for e in self.lines() if "limit" not in e]

    def limits(self) -> list[str]:
        return [e["limit"] for e in self.lines() if "limit" in e]

    def threads(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def connect(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=5)

    def stop(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        if self.stats is not None:
            return self.stats
        with_stats: dict[str, Any] = {}
        try:
            self.proc.stdin.close()
            line = self.proc.stdout.readline()
            with_stats = json.loads(line) if line.strip() else {}
            self.proc.wait(10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.stderr = self.proc.stderr.read()
            self.stats = with_stats
        return with_stats


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    yield s
    s.stop()
    assert "Traceback" not in s.stderr, s.stderr


def legit_events(server: Server, tmp_path: Path, n: int = 3, name: str = "node0:1:a",
                 timeout_s: float = 15.0) -> list[dict[str, Any]]:
    """Send ``n`` events as a process of the run would (its token, its spool) and wait until they are written."""
    client = ChannelClient(server.address, name, str(tmp_path / f"spool-{name.replace(':', '-')}"), token=TOKEN)
    try:
        for i in range(n):
            client.send({"t": time.time(), "event": "step_completed", "step": i + 1, "from": name})
        deadline = time.monotonic() + timeout_s
        while True:
            mine = [e for e in server.events() if e.get("from") == name]
            if len(mine) >= n:
                return mine
            assert time.monotonic() < deadline, f"{len(mine)} of {n} events arrived; last error {client.last_error}"
            client.flush()
            time.sleep(0.05)
    finally:
        client.close()


def closed_unanswered(sock: socket.socket, timeout_s: float = 6.0) -> bool:
    """Whether the server closes ``sock`` without a byte of answer."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode() + b"\n"


def test_before_a_hello_with_the_token_nothing_is_answered_or_written(server: Server, tmp_path: Path) -> None:
    """A ping used to be answered without a token; an event before a hello, or after one with a wrong token, is
    never written; every such connection is closed unanswered."""
    forged = {"t": time.time(), "event": "checkpoint_loaded", "step": 7, "forged": True}
    with server.connect() as s:
        s.sendall(_line({"op": "ping", "t0": time.time()}))
        assert closed_unanswered(s), "a ping before the hello was answered"
    with server.connect() as s:
        s.sendall(_line({"op": "ev", "seq": 1, "e": forged}))
        assert closed_unanswered(s)
    with server.connect() as s:
        s.sendall(_line({"op": "hello", "sender": "x:1:y", "t0": time.time(), "token": "0" * 32}) +
                  _line({"op": "ev", "seq": 1, "e": forged}) + _line({"op": "ping", "t0": time.time()}))
        assert closed_unanswered(s)
    with server.connect() as s:  # a hello without a token at all
        s.sendall(_line({"op": "hello", "sender": "x:1:y", "t0": time.time()}) + _line({"op": "ev", "seq": 1,
                                                                                          "e": forged}))
        assert closed_unanswered(s)
    assert len(legit_events(server, tmp_path)) == 3
    assert not [e for e in server.events() if e.get("forged")]
    assert server.stop()["refused"] >= 4


def test_a_nesting_bomb_and_a_64_mib_line_cost_nothing(server: Server, tmp_path: Path) -> None:
    """``"[" * 200000`` before the hello printed a RecursionError traceback; a 64 MiB line was scanned again at
    every chunk (32 MiB: 4.7 s of CPU). Now both are refused at once (a hello is 64 KiB at most), an admitted
    sender's over-long or over-deep line is skipped, and the run's events keep arriving."""
    t0 = time.monotonic()
    with server.connect() as s:
        s.sendall(b"[" * 200000 + b"\n")
        assert closed_unanswered(s)

    def flood(payload_mib: int) -> None:
        with server.connect() as s, contextlib.suppress(OSError):  # closed by the server long before the end
            chunk = b"x" * (1 << 20)
            for _ in range(payload_mib):
                s.sendall(chunk)
            s.sendall(b"\n")

    big = threading.Thread(target=flood, args=(64,))
    big.start()
    big.join(30)
    assert not big.is_alive()
    # a sender with the token whose lines are hostile: skipped, and what it sends after them is written
    with server.connect() as s:
        s.sendall(_line({"op": "hello", "sender": "node1:2:b", "t0": time.time(), "token": TOKEN}))
        s.sendall(b'{"op":"ev","seq":1,"e":{"pad":"' + b"y" * (9 << 20) + b'"}}\n')
        s.sendall(b'{"op":"ev","seq":2,"e":' + b"[" * 200000 + b"\n")
        s.sendall(b'{"op":"ev","seq":3,"e":' + b'{"a":' * 100 + b"1" + b"}" * 100 + b"}\n")
        s.sendall(_line({"op": "ev", "seq": 4, "e": {"t": time.time(), "event": "step_completed", "from": "node1"}}))
        deadline = time.monotonic() + 10
        while not [e for e in server.events() if e.get("from") == "node1"]:
            assert time.monotonic() < deadline, "the event after the hostile lines never arrived"
            time.sleep(0.05)
    assert len(server.events()) == 1  # seq 1-3 skipped (too long, too deep, deeper than MAX_DEPTH)
    assert len(legit_events(server, tmp_path)) == 3
    assert time.monotonic() - t0 < 20
    server.stop()
    assert "Traceback" not in server.stderr and "RecursionError" not in server.stderr, server.stderr


def test_a_flood_of_idle_connections_holds_no_thread_and_keeps_no_one_out(server: Server, tmp_path: Path) -> None:
    """4000 idle connections used to be 4000 threads of a root process, each kept for good. Now they hold no
    thread, wait HELLO_TIMEOUT_S at most (the oldest closed beyond MAX_PENDING, recorded once), and the run's
    processes connect and send meanwhile."""
    idle = [server.connect() for _ in range(300)]
    try:
        time.sleep(0.5)
        assert server.threads() <= 5, "idle connections hold threads"
        assert len(legit_events(server, tmp_path, timeout_s=5)) == 3
        assert len(legit_events(server, tmp_path, name="node1:2:b", timeout_s=5)) == 3
        from chaos.channel import HELLO_TIMEOUT_S, MAX_PENDING

        assert 300 > MAX_PENDING and server.limits() == ["pending"]  # once, however many were closed
        deadline = time.monotonic() + HELLO_TIMEOUT_S + 3
        for s in idle:
            assert closed_unanswered(s, max(0.01, deadline - time.monotonic()))
    finally:
        for s in idle:
            s.close()


def test_the_accept_loop_survives_running_out_of_descriptors(tmp_path: Path) -> None:
    """At the descriptor limit ``accept`` fails (EMFILE): the accept thread used to end for good, and the run
    received no event again. Now the oldest connection still waiting for its hello is closed to make room, the
    loop goes on, and it is recorded once."""
    server = Server(tmp_path, nofile=48)
    idle: list[socket.socket] = []
    try:
        idle = [server.connect() for _ in range(100)]
        time.sleep(0.5)
        assert len(legit_events(server, tmp_path, timeout_s=15)) == 3
        assert "descriptors" in server.limits()
        for s in idle:
            s.close()
        idle = []
        assert len(legit_events(server, tmp_path, name="node1:2:b", timeout_s=10)) == 3
    finally:
        for s in idle:
            s.close()
        server.stop()
    assert "Traceback" not in server.stderr, server.stderr


def test_the_token_is_in_no_file_another_user_can_read(tmp_path: Path) -> None:
    """The token was in plan.yaml (0644, in a 0755 run directory): any user could read it and write the run's
    history (a forged checkpoint_loaded turned a pass into a fail). It is in the nodes' environment only now: a
    process of user nobody finds it in no file of the run directory (nor in the dry run's output)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to read the run directory as another user")
    from chaos.engine import Engine
    from chaos.loading import parse_scenario

    seen = tmp_path / "token"  # where the node writes the token it was given (tmp_path: root's alone)
    world = Path(tempfile.mkdtemp(prefix="torch-chaos-token-"))
    world.chmod(0o755)  # as a shared runs directory is: the run directory's own modes decide
    try:
        code = ("import os, sys; open(sys.argv[1], 'w').write(os.environ['CHAOS_CHANNEL_TOKEN']); "
                "print('step 1', flush=True)")
        scenario = parse_scenario(f"""\
name: token
checks: {{golden: false}}
cluster: {{mode: centralized, nodes: 1}}
workload: {{command: [python, -c, "{code}", {seen}], progress_regex: 'step (?P<step>\\d+)'}}
""")
        engine = Engine(scenario, out_dir=world)
        engine.run()
        token = seen.read_text()
        assert len(token) == 32
        reader = ("import os, sys\n"
                  "for d, _, files in os.walk(sys.argv[1]):\n"
                  "    for f in files:\n"
                  "        try:\n"
                  "            data = open(os.path.join(d, f), 'rb').read()\n"
                  "        except OSError:\n"
                  "            continue\n"
                  "        if sys.argv[2].encode() in data:\n"
                  "            print(os.path.join(d, f))\n")
        found = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable,
                                "-c", reader, str(engine.run_dir), token], capture_output=True, text=True,
                               timeout=60)
        assert found.returncode == 0, found.stderr
        assert found.stdout == "", f"user nobody read the run's token in: {found.stdout}"
        assert (engine.run_dir / "plan.yaml").exists()  # the record is still there, without the secret
    finally:
        shutil.rmtree(world, ignore_errors=True)


def test_admitted_connections_beyond_the_cap_are_refused_and_recorded_once() -> None:
    """The threads of admitted connections are bounded too (MAX_CONNECTIONS for the channel): beyond the cap a
    connection is closed, the limit recorded once, and a slot freed is used again."""
    from chaos.gate import Gate, Limits

    release = threading.Event()
    limits: list[str] = []

    def serve(conn: socket.socket, peer: str, payload: Any, rest: bytes) -> None:
        conn.sendall(b"in\n")
        release.wait(10)

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    gate = Gate(listener, admit=lambda line, peer: (line == b"me", None), serve=serve,
                limits=Limits(max_served=2), on_limit=lambda what, detail: limits.append(what))
    gate.start()
    port = listener.getsockname()[1]
    conns = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
    try:
        for c in conns:
            c.sendall(b"me\n")
            assert c.recv(3) == b"in\n"
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as extra:
                extra.sendall(b"me\n")
                assert closed_unanswered(extra)
        assert limits == ["served"] and len(gate.served()) == 2
        release.set()
        deadline = time.monotonic() + 5
        while gate.served():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as again:
            again.sendall(b"me\n")
            assert again.recv(3) == b"in\n"
    finally:
        release.set()
        for c in conns:
            c.close()
        gate.stop()
        listener.close()
