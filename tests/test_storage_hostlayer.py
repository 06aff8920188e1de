"""The storage layer on a node's own host (chaos/storage/hostlayer.py), run for real on this machine: the wrapper
mounts through FUSE, becomes the node's command, sends what it sees over a real history channel, takes a storage
fault's rule from the engine's order, holds a paused-on save until the engine acknowledges it, and leaves no mount
behind (a dead one included). What Slurm adds (one host per node, srun) is in tests/integration/test_slurm_runtime.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chaos.channel import (
    CONNECT_TIMEOUT_S,
    ENV_CHANNEL,
    ENV_SPOOL_DIR,
    ENV_TOKEN,
    ChannelServer,
    listen,
    parse_address,
)
from chaos.marks import ENGINE_VAR, engine_mark
from chaos.plan import REPO_ROOT
from chaos.storage import control as control_module
from chaos.storage.control import ChannelStorageControl, StorageNotAcknowledged
from chaos.storage.hostlayer import HOST_WHO, RULES_STATE, OfferReader, wrap
from chaos.storage.mounts import chaos_mounts, fuse_problem, is_mounted, served

if fuse_problem() is not None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the storage layer: {fuse_problem()}", allow_module_level=True)
    pytest.skip(f"no FUSE here: {fuse_problem()}", allow_module_level=True)

TOKEN = "t0ken"
# The node's command: waits for "go" (outside the mount), saves, loads, and says what happened to its writes.
NODE = r"""
import os, sys, time
ckpt, out = sys.argv[1], sys.argv[2]
while not os.path.exists(out + ".go"):
    time.sleep(0.01)
try:
    with open(os.path.join(ckpt, "ckpt_7.pt"), "wb") as f:
        f.write(b"x" * 1000)
    with open(os.path.join(ckpt, "ckpt_7.pt"), "rb") as f:
        f.read()
    said = "ok"
except OSError as exc:
    said = f"errno {exc.errno}"
open(out, "w").write(said)
sys.exit(5)
"""


class Engine:
    """A real channel server, as the engine runs it: events in the order received."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.channel = ChannelServer(listen("127.0.0.1", 0), self.write, lambda **f: None, token=TOKEN)
        self.channel.start()

    def write(self, event: dict[str, Any]) -> None:
        with self.lock:
            self.events.append(event)

    def seen(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e.get("event") == name]

    def wait_for(self, name: str, timeout_s: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if found := self.seen(name):
                return found[0]
            time.sleep(0.01)
        raise AssertionError(f"no {name} in {self.events}")


@pytest.fixture
def engine() -> Any:
    e = Engine()
    yield e
    e.channel.stop(drain_s=0.2)


def run_id(tmp_path: Path) -> str:
    """One per test: ``sweep --run-id`` unmounts every mount of its run on the machine, another test's included."""
    return f"hl-{os.getpid()}-{tmp_path.name}"


def start_node(engine: Engine, tmp_path: Path, pause_on: list[str] | None = None,
               passthrough: bool = False) -> tuple[subprocess.Popen[bytes], Path, Path]:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir(exist_ok=True)
    env = {**os.environ, ENV_CHANNEL: engine.channel.address, ENV_TOKEN: TOKEN, ENV_SPOOL_DIR: str(tmp_path / "spool"),
           "CHAOS_NODE": "node0", "CHAOS_TREE": f"{run_id(tmp_path)}/node0", "PYTHONPATH": str(REPO_ROOT),
           ENGINE_VAR: engine_mark()}  # this test is their engine: no other test's no_leftovers takes them for its own
    argv = wrap(sys.executable, str(ckpt), str(tmp_path / "events.jsonl"), run_id(tmp_path),
                [sys.executable, "-c", NODE, str(ckpt), str(out)], pause_on or [], None, passthrough=passthrough)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    while not (is_mounted(str(ckpt)) and served(str(ckpt)) and server_pids(ckpt)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.02)
    return proc, ckpt, out


def finish(proc: subprocess.Popen[bytes], ckpt: Path) -> None:
    """The wrapper became the command (its exit status is the command's); the server saw it go and unmounted."""
    assert proc.wait(timeout=20) == 5
    deadline = time.monotonic() + 5
    while is_mounted(str(ckpt)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not is_mounted(str(ckpt)), "the server did not unmount after its node's command ended"


def test_a_host_layer_sends_what_it_sees_and_enforces_the_engines_rule(engine: Engine, tmp_path: Path) -> None:
    proc, ckpt, out = start_node(engine, tmp_path)
    control = ChannelStorageControl(engine.channel, tmp_path)
    control.apply({"fault_id": 1, "kind": "io_error", "effect": "error",
                   "ops": ["write"], "errno": "EIO", "paths": "*.pt"})
    assert control.described() == "rules v1 over the history channel, confirmed by the layers on 1 node host(s)"
    assert engine.channel.states(HOST_WHO, RULES_STATE) == [1]
    (tmp_path / "out.go").touch()
    finish(proc, ckpt)
    assert out.read_text() == "errno 5"  # EIO, from the rule the order carried
    failed = engine.wait_for("storage_op_failed")
    assert failed["node"] == "node0" and failed["errno"] == "EIO" and failed["fault_id"] == 1
    assert all(e["source"] == "storage" for e in engine.events)


def test_a_host_layers_match_counts_reach_the_engine_and_outlive_the_layer(engine: Engine, tmp_path: Path) -> None:
    """Whether a storage fault acted on the nodes' hosts (Slurm): before, the engine could not tell (``matched``
    was None there), so a rule whose paths matched nothing counted as injected. The counts are told when a rule
    first matches, so a layer that ended with its node (as a crash ends it) has still said so."""
    proc, ckpt, _out = start_node(engine, tmp_path)
    control = ChannelStorageControl(engine.channel, tmp_path)
    assert control.matched(1) is None  # no layer has counted anything yet
    control.apply({"fault_id": 1, "kind": "io_error", "effect": "error",
                   "ops": ["write"], "errno": "EIO", "paths": "*.pt"})
    control.apply({"fault_id": 2, "kind": "io_error", "effect": "error",
                   "ops": ["write"], "errno": "EIO", "paths": "nothing-*.bin"})
    assert control.matched(1) == 0 and control.matched(2) == 0
    (tmp_path / "out.go").touch()
    finish(proc, ckpt)  # the layer is gone with its node's command
    deadline = time.monotonic() + 5
    while control.matched(1) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert control.matched(1) == 1 and control.matched(2) == 0


def test_a_host_layer_records_a_save_and_a_load_and_holds_a_paused_on_save(engine: Engine, tmp_path: Path) -> None:
    proc, ckpt, out = start_node(engine, tmp_path, pause_on=["checkpoint_save_started"])
    (tmp_path / "out.go").touch()
    held = engine.wait_for("checkpoint_save_started")
    assert held["node"] == "node0" and held["step"] == 7 and isinstance(held.get("id"), str)
    time.sleep(0.3)
    assert not engine.seen("checkpoint_save_finished") and not out.exists()  # held inside its first write
    # the engine installs a rule while the save is held (a fault triggered on it): the layer takes it in meanwhile
    control = ChannelStorageControl(engine.channel, tmp_path)
    control.apply({"fault_id": 2, "kind": "slow_io", "effect": "slow",
                   "ops": ["read"], "latency_ms": 10, "paths": "*"})
    assert engine.channel.ack(held["id"])
    finish(proc, ckpt)
    assert out.read_text() == "ok"
    saved = engine.wait_for("checkpoint_save_finished")
    loaded = engine.wait_for("checkpoint_loaded")
    assert saved["sha256"] == loaded["sha256"] and saved["bytes"] == 1000 and saved["step"] == 7
    assert loaded["step"] == 7  # the digest of a save this layer saw


def test_a_host_layer_with_passthrough_starts_the_command_once_the_kernel_offered_it(engine: Engine,
                                                                                      tmp_path: Path) -> None:
    """storage.passthrough on a node's host: the wrapper runs the command only after the server said the kernel
    offered passthrough at INIT (a pipe between them); the command's bytes then never reach the server."""
    from tests.test_storage_passthrough import _missing

    if (why := _missing()) is not None:
        pytest.skip(f"no FUSE passthrough here: {why}")
    proc, ckpt, out = start_node(engine, tmp_path, passthrough=True)
    (tmp_path / "out.go").touch()
    finish(proc, ckpt)
    said = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    assert out.read_text() == "ok", said
    assert engine.wait_for("checkpoint_save_finished")["bytes"] == 1000
    summary = next(line for line in said.splitlines() if '"passthrough_opens"' in line)  # the server's last word
    assert '"offered": true' in summary and '"server_writes": 0' in summary, summary


@pytest.mark.parametrize(("written", "answered", "offered"), [
    (b'{"offered": true}\n', True, True),
    (b'{"offered": false}\n', True, False),
    (b'{"offered": tr', False, False),  # not all of it yet: the wrapper waits
    (None, True, False),  # the server closed the pipe without a word: it ended, nothing runs on the mount
    (b"garbage\n", True, False),
])
def test_the_wrapper_reads_inits_word_without_waiting(written: bytes | None, answered: bool, offered: bool) -> None:
    r, w = os.pipe()
    reader = OfferReader(r)
    assert not reader.answered()  # nothing written yet
    if written is not None:
        os.write(w, written)
    if written is None or answered:
        os.close(w)
        w = -1
    assert (reader.answered(), reader.offered) == (answered, offered)
    reader.close()
    if w >= 0:
        os.close(w)


def test_a_dead_mount_is_swept_by_the_next_wrapper_and_by_sweep(engine: Engine, tmp_path: Path) -> None:
    """A server SIGKILLed with its step (scancel) leaves a dead mount: the next node on the host mounts anyway,
    and ``python -m chaos.storage sweep`` (the runtime's teardown) removes what is left."""
    proc, ckpt, _ = start_node(engine, tmp_path)
    kill_server_of(ckpt)
    proc.kill()
    proc.wait(timeout=10)
    time.sleep(0.2)
    assert is_mounted(str(ckpt))  # dead: ENOTCONN until someone unmounts it
    proc, ckpt, _ = start_node(engine, tmp_path)
    assert [m.path for m in chaos_mounts()].count(str(ckpt)) == 1
    kill_server_of(ckpt)
    proc.kill()
    proc.wait(timeout=10)
    swept = subprocess.run([sys.executable, "-m", "chaos.storage", "sweep", "--run-id", run_id(tmp_path)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert swept.returncode == 0 and f"unmounted {ckpt}" in swept.stdout, swept
    assert not is_mounted(str(ckpt))


def test_a_layer_that_does_not_confirm_fails_the_fault(engine: Engine, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose layer is stopped (its node frozen with it) never confirms, nor does one given a rule it cannot
    enforce: the fault is not recorded as done, and the refused rule does not break the host's file operations."""
    monkeypatch.setattr(control_module, "ACK_TIMEOUT_S", 1.0)
    proc, ckpt, out = start_node(engine, tmp_path)
    # the layer says which rules it enforces once it is on the channel: before that no layer is connected and an
    # order stands without confirmation (by design), so stopping it earlier would test nothing (a loaded machine)
    deadline = time.monotonic() + 15
    # (connected for longer than a client waits for its welcome: on a loaded machine a client whose welcome came
    # late drops that connection and makes another, and with none connected the order stands unconfirmed)
    connected_since = None
    while connected_since is None or time.monotonic() - connected_since < 2 * CONNECT_TIMEOUT_S:
        assert time.monotonic() < deadline, "the node host's layer never joined the channel"
        if not engine.channel.states(HOST_WHO, RULES_STATE):
            connected_since = None
        elif connected_since is None:
            connected_since = time.monotonic()
        time.sleep(0.02)
    control = ChannelStorageControl(engine.channel, tmp_path)
    server = kill_server_of(ckpt, signal.SIGSTOP)
    try:
        with pytest.raises(StorageNotAcknowledged, match=r"1 of 1 node hosts' .* did not confirm .* \(0 did\)"):
            control.apply({"fault_id": 3, "kind": "io_error", "effect": "error", "paths": "*"})
    except BaseException:
        os.kill(server, signal.SIGCONT)
        (tmp_path / "out.go").touch()  # a failed check still lets the node finish and its layer unmount
        finish(proc, ckpt)
        raise
    os.kill(server, signal.SIGCONT)
    control.remove(3)  # the withdrawal reaches the thawed layer
    with pytest.raises(StorageNotAcknowledged):
        control.apply({"fault_id": 4, "kind": "no_such_kind", "paths": "*"})
    control.remove(4)
    (tmp_path / "out.go").touch()
    finish(proc, ckpt)
    assert out.read_text() == "ok" and not engine.seen("storage_op_failed")


def test_a_hello_names_every_held_operation(engine: Engine) -> None:
    """A host's layer holds several saves at once (one per rank): after a reconnect its hello names them all, and
    an acknowledgement given while it was away is answered at once."""
    import json
    import socket

    engine.channel.ack("a1")  # given while the holder was disconnected
    with socket.create_connection(parse_address(engine.channel.address), timeout=5) as conn:
        conn.sendall(json.dumps({"op": "hello", "sender": "storage@h:1:x", "t0": time.time(),
                                 "waiting": ["a1", "b2"], "who": HOST_WHO, "token": TOKEN}).encode() + b"\n")
        got = b""
        while got.count(b"\n") < 2:
            got += conn.recv(4096)
        ops = [json.loads(line) for line in got.splitlines()]
        assert ops[0]["op"] == "welcome" and ops[1] == {"op": "ack", "id": "a1"}
        engine.channel.ack("b2")  # b2 registered by the hello: it is answered on this connection
        while got.count(b"\n") < 3:
            got += conn.recv(4096)
        assert json.loads(got.splitlines()[2]) == {"op": "ack", "id": "b2"}


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def server_pids(ckpt: Path) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and b"host-serve" in _read(p / "cmdline") and str(ckpt).encode() in _read(p / "cmdline")]


def kill_server_of(ckpt: Path, sig: int = signal.SIGKILL) -> int:
    pids = server_pids(ckpt)
    assert len(pids) == 1, pids
    os.kill(pids[0], sig)
    return pids[0]


def test_the_host_layer_loads_with_the_standard_library_and_mfusepy_only() -> None:
    """A compute host has the nodes' Python (torch, numpy), not the engine's packages: the layer there must start
    without them. Before, chaos.storage.record imported the ``regex`` module (for progress_regex's time bound), and
    every Slurm run's storage layer would have failed to start on a host without it. Where it is missing, progress
    lines are matched with ``re`` on a bounded length of line (chaos.progress_regex)."""
    code = ("import sys, importlib.abc\n"
            "allowed = set(sys.stdlib_module_names) | {'chaos', 'mfusepy', '_cffi_backend'}\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] not in allowed:\n"
            "            raise ImportError(f'not on a compute host: {name}')\n"
            "sys.meta_path.insert(0, Block())\n"
            "import chaos.storage.__main__, chaos.storage.server, chaos.storage.hostlayer, chaos.storage.record\n"
            "from chaos.progress_regex import compile_progress, search\n"
            "m = search(compile_progress(r'step (?P<step>\\d+)'), 'epoch 0 | step 42 | loss 0.1')\n"
            "print(m.group('step'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "42", done.stderr[-3000:]
