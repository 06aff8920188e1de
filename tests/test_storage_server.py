"""The storage layer's FUSE server on a real mount in a temporary directory: the events each operation produces
(node, step, sha256), a save cut short by a crash, holds, the engine's own operations, and the rules' outcomes.

No cluster is started: writers are short ``python -c`` processes with ``CHAOS_NODE`` set, as a node's are."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from chaos.history import _field_checks, readable
from chaos.storage.control import StorageControl, StorageNotAcknowledged
from chaos.storage.layer import fuse_problem
from chaos.storage.mounts import is_mounted, unmount
from chaos.storage.rules import PASS, Outcome, Rules
from tests.fuse_mount import served

if fuse_problem() is not None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the storage layer: {fuse_problem()}", allow_module_level=True)
    pytest.skip(f"no FUSE here: {fuse_problem()}", allow_module_level=True)


class ScriptedRules(Rules):
    """A stand-in for the storage fault kinds: outcomes chosen by file name, one stall held by rule 9."""

    def __init__(self, backing: Path):
        super().__init__(backing)
        self.synced_paths: list[str] = []

    def check(self, op: str, relpath: str, node: str | None, nbytes: int = 0) -> Outcome:
        if op == "write" and relpath.startswith("full"):
            return Outcome(errno="ENOSPC", fault_id=7)
        if op == "fsync" and relpath.startswith("slow"):
            return Outcome(delay_s=0.3, fault_id=8)
        if op == "fsync" and relpath.startswith("stall") and self.stalled(9):
            return Outcome(stall=True, fault_id=9)
        if op == "fsync" and relpath.startswith("latency") and self.stalled(10):
            return Outcome(delay_s=3600.0, delay_ids=(10,))  # a slow_io of an hour, healed after a second
        return PASS


def _serve(mount: str, events: str, control: str, pause_on: frozenset[str], engine_pid: int | None,
           rules: bool) -> None:
    from chaos.storage.server import serve

    serve(mount, events, control, run_id=f"unit-test-{os.getppid()}", pause_on=pause_on, engine_pid=engine_pid,
          rules_class=ScriptedRules if rules else Rules)


def mounted(tmp_path: Path, pause_on: frozenset[str] = frozenset(), engine_pid: int | None = None,
            rules: bool = False) -> AbstractContextManager[Path]:
    return served(tmp_path, _serve, pause_on, engine_pid, rules)


def start_as(code: str, node: str = "node1") -> subprocess.Popen[str]:
    """A process of ``node`` (its environment names it, as the plan's does) running ``code``."""
    return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "CHAOS_NODE": node},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def as_node(code: str, node: str = "node1") -> str:
    proc = start_as(code, node)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    return out


def events(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_save_rename_read_and_delete_are_recorded_with_node_step_and_digest(tmp_path: Path) -> None:
    payload = os.urandom(3 << 20)
    (tmp_path / "payload").write_bytes(payload)
    with mounted(tmp_path) as mount:
        as_node(f"""
import os
data = open({str(tmp_path / 'payload')!r}, 'rb').read()
with open({str(mount / 'ckpt_40.pt.tmp')!r}, 'wb') as f:
    f.write(data); f.flush(); os.fsync(f.fileno())
os.replace({str(mount / 'ckpt_40.pt.tmp')!r}, {str(mount / 'ckpt_40.pt')!r})
""")
        as_node(f"assert open({str(mount / 'ckpt_40.pt')!r}, 'rb').read(10)", node="node2")
        as_node(f"import os; os.unlink({str(mount / 'ckpt_40.pt')!r})")
    digest = hashlib.sha256(payload).hexdigest()
    got = [(e["event"], Path(e["path"]).name, e.get("step"), e["node"]) for e in events(tmp_path)]
    assert got == [
        ("checkpoint_save_started", "ckpt_40.pt.tmp", 40, "node1"),
        ("checkpoint_write_progress", "ckpt_40.pt.tmp", 40, "node1"),
        ("checkpoint_save_finished", "ckpt_40.pt.tmp", 40, "node1"),
        ("checkpoint_deleted", "ckpt_40.pt.tmp", 40, "node1"),
        ("checkpoint_save_finished", "ckpt_40.pt", 40, "node1"),
        ("checkpoint_loaded", "ckpt_40.pt", 40, "node2"),
        ("checkpoint_deleted", "ckpt_40.pt", 40, "node1"),
    ]
    by_event = {(e["event"], Path(e["path"]).name): e for e in events(tmp_path)}
    assert by_event["checkpoint_save_finished", "ckpt_40.pt.tmp"]["sha256"] == digest
    assert by_event["checkpoint_save_finished", "ckpt_40.pt"]["renamed_from"].endswith("ckpt_40.pt.tmp")
    assert by_event["checkpoint_loaded", "ckpt_40.pt"]["sha256"] == digest
    assert by_event["checkpoint_loaded", "ckpt_40.pt"]["bytes"] == len(payload)
    assert by_event["checkpoint_write_progress", "ckpt_40.pt.tmp"]["written"] >= 1 << 20
    assert all(e["source"] == "storage" and e["path"].startswith(str(tmp_path / "ckpt")) for e in events(tmp_path))
    assert all(readable(e, _field_checks()) for e in events(tmp_path)), "a line analysis would drop"
    assert not (tmp_path / "ckpt" / "ckpt_40.pt").exists()


def test_a_saves_digest_is_its_files_whether_written_in_order_out_of_order_or_by_two_writers(tmp_path: Path) -> None:
    """A save written in order is hashed as it arrives (chaos.storage.digests.Running); one written out of order,
    truncated, or with a second writer of the file at once falls back to reading the file back. Each digest in the
    history is the sha256 of the file's final bytes."""
    with mounted(tmp_path) as mount:
        as_node(f"""
import os
d = {str(mount)!r}
with open(d + '/in_order_1.pt', 'wb') as f:
    for i in range(5):
        f.write(bytes([i]) * 700_000)
with open(d + '/out_of_order_2.pt', 'wb') as f:
    f.write(b'a' * 300_000); f.seek(100); f.write(b'b' * 1000); f.seek(0, 2); f.write(b'c' * 5)
with open(d + '/truncated_3.pt', 'wb') as f:
    f.write(b'x' * 400_000); f.flush(); f.truncate(1000); f.seek(0, 2); f.write(b'y' * 10)
a = open(d + '/two_writers_4.pt', 'wb')
b = open(d + '/two_writers_4.pt', 'r+b')
a.write(b'1' * 200_000); a.flush(); b.seek(10); b.write(b'2' * 50); b.close(); a.write(b'3'); a.close()
""")
        finals = {name: hashlib.sha256((mount / name).read_bytes()).hexdigest()
                  for name in ("in_order_1.pt", "out_of_order_2.pt", "truncated_3.pt", "two_writers_4.pt")}
    saved = {Path(e["path"]).name: e["sha256"] for e in events(tmp_path) if e["event"] == "checkpoint_save_finished"}
    assert saved == finals


def test_a_save_cut_short_by_a_crash_never_finishes_and_a_foreign_file_loads_with_no_step(tmp_path: Path) -> None:
    with mounted(tmp_path) as mount:
        proc = start_as(f"""
import os, signal
f = open({str(mount / 'model.pt')!r}, 'wb')
f.write(os.urandom(2 << 20)); f.flush()
os.kill(os.getpid(), signal.SIGKILL)
""")
        proc.wait(30)
        assert proc.returncode == -9
        time.sleep(0.3)  # the kernel's release of the dead process's file reaches the server asynchronously
        as_node(f"open({str(mount / 'model.pt')!r}, 'rb').read(1)")
        size = (mount / "model.pt").stat().st_size
    names = [e["event"] for e in events(tmp_path)]
    assert names[0] == "checkpoint_save_started" and "checkpoint_save_finished" not in names, names
    assert all(readable(e, _field_checks()) for e in events(tmp_path)), "null steps are declared, not unreadable"
    [loaded] = [e for e in events(tmp_path) if e["event"] == "checkpoint_loaded"]
    assert loaded["step"] is None and loaded["bytes"] == size == 2 << 20  # torn: never saved completely
    # a number-less name takes the node's last recorded step: none was recorded here
    assert events(tmp_path)[0]["step"] is None


def test_a_held_save_waits_for_the_engine_acknowledgement(tmp_path: Path) -> None:
    with mounted(tmp_path, pause_on=frozenset({"checkpoint_save_started"})) as mount:
        proc = start_as(f"open({str(mount / 'ckpt_3.pt')!r}, 'wb').write(b'x' * 10)")
        deadline = time.monotonic() + 10
        while not events(tmp_path):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        [held] = events(tmp_path)
        assert held["event"] == "checkpoint_save_started" and held["id"]
        time.sleep(0.5)
        assert proc.poll() is None, "the writer went on before the acknowledgement"
        (tmp_path / "events.jsonl.acks" / held["id"]).touch()
        assert proc.wait(10) == 0
    assert [e["event"] for e in events(tmp_path)][-1] == "checkpoint_save_finished"


def test_the_engines_own_operations_are_neither_recorded_nor_ruled(tmp_path: Path) -> None:
    with mounted(tmp_path, engine_pid=os.getpid(), rules=True) as mount:
        (mount / "full_by_engine.pt").write_bytes(b"damage")  # ScriptedRules would refuse this write to a node
        assert (mount / "full_by_engine.pt").read_bytes() == b"damage"
    assert events(tmp_path) == []


def test_rules_outcomes_are_obeyed_and_rule_changes_acknowledged(tmp_path: Path) -> None:
    with mounted(tmp_path, rules=True) as mount:
        out = as_node(f"""
import errno, os
try:
    with open({str(mount / 'full_5.pt')!r}, 'wb') as f:
        f.write(b'x' * 100)
except OSError as exc:
    print(errno.errorcode[exc.errno])
""")
        assert "ENOSPC" in out
        t0 = time.monotonic()
        as_node(f"import os; f = open({str(mount / 'slow.pt')!r}, 'wb'); f.write(b'x'); os.fsync(f.fileno())")
        assert time.monotonic() - t0 >= 0.3
        control = StorageControl(tmp_path / ".storage")
        # returns once the server enforces version 1
        control.apply({"fault_id": 9, "kind": "fsync_stall", "effect": "stall_fsync"})
        assert (tmp_path / ".storage" / "applied").read_text() == "1"
        proc = start_as(f"import os; f = open({str(mount / 'stall.pt')!r}, 'wb'); f.write(b'x'); os.fsync(f.fileno())")
        time.sleep(0.5)
        assert proc.poll() is None, "fsync did not stall while the rule was installed"
        killed = start_as(f"import os; f = open({str(mount / 'stall2.pt')!r}, 'wb'); f.write(b'x'); "
                          "os.fsync(f.fileno())")
        time.sleep(0.5)
        killed.kill()  # a crash during a stalled fsync: the process dies now, not when the stall is healed
        assert killed.wait(5) == -9
        assert proc.poll() is None
        control.remove(9)
        assert proc.wait(10) == 0
    [failed] = [e for e in events(tmp_path) if e["event"] == "storage_op_failed"]
    assert failed["op"] == "write" and failed["errno"] == "ENOSPC" and failed["fault_id"] == 7
    assert failed["node"] == "node1"


def test_a_healed_latency_releases_the_operations_it_was_slowing(tmp_path: Path) -> None:
    """A slow_io whose latency is longer than the fault (validation bounds it by the deadline, no more) must not
    leave I/O sleeping after its heal: before, an fsync slowed by an hour's latency slept the hour whatever the
    heal, and the run hung after the fault was over."""
    with mounted(tmp_path, rules=True) as mount:
        control = StorageControl(tmp_path / ".storage")
        control.apply({"fault_id": 10, "kind": "slow_io", "effect": "slow"})
        proc = start_as(f"import os; f = open({str(mount / 'latency.pt')!r}, 'wb'); f.write(b'x'); "
                        "os.fsync(f.fileno())")
        time.sleep(1.0)
        assert proc.poll() is None, "fsync was not slowed while the rule was installed"
        healed = time.monotonic()
        control.remove(10)
        assert proc.wait(10) == 0
        assert time.monotonic() - healed < 5


def test_a_rule_change_without_a_server_is_an_error_not_a_silent_fault(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("chaos.storage.control.ACK_TIMEOUT_S", 0.2)
    with pytest.raises(StorageNotAcknowledged, match="did not confirm rules version 1"):
        StorageControl(tmp_path / "control").apply({"fault_id": 1, "kind": "io_error", "effect": "error"})


def _marked_server(tmp_path: Path, name: str, engine: int) -> tuple[subprocess.Popen[bytes], Path]:
    from chaos.marks import ENGINE_VAR, TREE_VAR
    from chaos.storage.layer import MARK_PREFIX

    mount = tmp_path / name
    mount.mkdir()
    (tmp_path / f"{name}.jsonl").touch()
    proc = subprocess.Popen([sys.executable, "-m", "chaos.storage", "serve", "--mount", str(mount), "--events",
                             str(tmp_path / f"{name}.jsonl"), "--run-id", name],
                            env={**os.environ, TREE_VAR: f"{MARK_PREFIX}/{name}", ENGINE_VAR: str(engine)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not is_mounted(str(mount)):
        assert proc.poll() is None and time.monotonic() < deadline, "the server did not mount"
        time.sleep(0.02)
    return proc, mount


# Marked integration for the exclusive lock, not for its length (~2 s): it plants an orphaned marked server on
# purpose, which another test's leftover check running beside it would rightly report as a leak.
@pytest.mark.integration
def test_cleanup_unmounts_orphaned_and_dead_mounts_and_leaves_a_live_engines_alone(tmp_path: Path) -> None:
    from chaos.storage.layer import cleanup

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid whose engine is gone
    orphan, orphan_mount = _marked_server(tmp_path, f"orphan-{os.getpid()}", gone.pid)
    crashed, crashed_mount = _marked_server(tmp_path, f"crashed-{os.getpid()}", os.getpid())
    live, live_mount = _marked_server(tmp_path, f"live-{os.getpid()}", os.getpid())
    crashed.kill()  # the server died: its mount answers "transport endpoint is not connected"
    crashed.wait(5)
    try:
        # Each run by name: a cleanup of every run would also take the unmarked mounts of this file's other tests,
        # which may be running at this moment in another pytest worker.
        runs = [f"orphan-{os.getpid()}", f"crashed-{os.getpid()}", f"live-{os.getpid()}"]
        removed = [r for run in runs for r in cleanup(run, only_orphans=True)]
        assert f"storage server {orphan.pid}" in removed
        assert f"storage mount {orphan_mount}" in removed and f"storage mount {crashed_mount}" in removed
        assert not is_mounted(str(orphan_mount)) and not is_mounted(str(crashed_mount))
        assert is_mounted(str(live_mount)) and live.poll() is None, "a live engine's layer was removed"
        assert not [r for run in runs for r in cleanup(run, only_orphans=True)]  # idempotent
    finally:
        unmount(str(live_mount))
        live.wait(5)
        orphan.wait(5)


def test_a_writer_killed_while_held_writes_nothing_more(tmp_path: Path) -> None:
    """The crash a hold was for: the data the kernel had already handed over is not written after the kill."""
    with mounted(tmp_path, pause_on=frozenset({"checkpoint_save_started"})) as mount:
        proc = start_as(f"open({str(mount / 'snapshot.pt')!r}, 'wb').write(b'x' * 4096)")
        deadline = time.monotonic() + 10
        while not events(tmp_path):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        [held] = events(tmp_path)
        proc.kill()
        proc.wait(10)
        (tmp_path / "events.jsonl.acks" / held["id"]).touch()
        time.sleep(0.5)
        assert (mount / "snapshot.pt").stat().st_size == 0
    assert [e["event"] for e in events(tmp_path)] == ["checkpoint_save_started"]


def test_every_reader_of_a_file_opened_at_once_is_a_load(tmp_path: Path) -> None:
    """Two ranks resuming open the snapshot together and share the page cache: the second's reads may never
    reach the server, and it still loaded the file (recorded at its close then)."""
    with mounted(tmp_path) as mount:
        as_node(f"open({str(mount / 'snapshot.pt')!r}, 'wb').write(b'y' * 300_000)")
        as_node(f"""
a, b = open({str(mount / 'snapshot.pt')!r}, 'rb'), open({str(mount / 'snapshot.pt')!r}, 'rb')
assert a.read() == b.read()
a.close(); b.close()
""", node="node2")
        time.sleep(0.3)  # releases arrive after close returned
    loads = [e for e in events(tmp_path) if e["event"] == "checkpoint_loaded"]
    assert len(loads) == 2 and {e["node"] for e in loads} == {"node2"}, loads
    assert all(e["sha256"] == hashlib.sha256(b"y" * 300_000).hexdigest() and e["step"] is None for e in loads)
