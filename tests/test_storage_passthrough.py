"""storage.passthrough: the per-inode table, library discovery, the scenario policy's refusals (fast), and one real
mount with kernel passthrough (root, a kernel that offers it and libfuse >= 3.17, else skipped saying which) that
checks a torch.save-like save and a load give the events the server's path gives, with zero server writes."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.storage import libfuse
from chaos.storage.passthrough import InodeTable


def _table(fail: int | None = None) -> tuple[InodeTable, list[int]]:
    closed: list[int] = []
    ids = iter(range(1, 100))

    def open_backing(fd: int) -> int:
        if fail is not None:
            raise OSError(fail, os.strerror(fail))
        return next(ids)

    return InodeTable(open_backing, closed.append), closed


def test_one_backing_id_per_inode_shared_and_closed_at_the_last_release(tmp_path: Path) -> None:
    f = tmp_path / "a"
    f.write_bytes(b"x")
    table, closed = _table()
    fd1, fd2 = os.open(f, os.O_RDONLY), os.open(f, os.O_RDONLY)
    try:
        assert table.opened(fd1) == 1 and table.opened(fd2) == 1  # the kernel: a second id for one inode is EIO
        table.released(fd1)
        assert closed == [] and table.passes_through(fd2)
        table.released(fd2)
        assert closed == [1] and table.inodes == {}
        assert (table.passthrough_opens, table.slow_opens) == (2, 0)
    finally:
        os.close(fd1), os.close(fd2)


def test_a_refused_ioctl_puts_the_inode_on_the_servers_path_and_counts_it(tmp_path: Path) -> None:
    f = tmp_path / "a"
    f.write_bytes(b"x")
    table, closed = _table(fail=errno.EPERM)
    fd = os.open(f, os.O_RDONLY)
    try:
        assert table.opened(fd) == 0 and not table.passes_through(fd)
        assert (table.passthrough_opens, table.slow_opens, table.failures) == (0, 1, ["EPERM"])
        table.released(fd)
        assert closed == []
    finally:
        os.close(fd)


def test_directories_never_pass_through(tmp_path: Path) -> None:
    table, _ = _table()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert table.opened(fd) == 0 and table.slow_opens == 0
    finally:
        os.close(fd)


def test_library_discovery_order_and_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv(libfuse.ENV_VAR, str(tmp_path / "nothing.so"))
    monkeypatch.setattr(libfuse, "_system", lambda: ["/nonexistent/libfuse3.so.3"])
    assert libfuse.cache_dir() == tmp_path / "torch-chaos" / f"libfuse-{libfuse.VERSION}"
    assert [origin for _, origin in libfuse.candidates()] == [f"${libfuse.ENV_VAR}", "system"]
    path, why = libfuse.find()
    assert path is None and "build-libfuse" in why and "not loadable" in why


def test_build_says_which_tool_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(libfuse.shutil, "which", lambda name: None if name == "ninja" else "/usr/bin/" + name)
    with pytest.raises(libfuse.BuildError, match=r"ninja not found.*ninja-build"):
        libfuse.build()


# ---------------------------------------------------------------------------------------------- the scenario policy
def _scenario(storage: dict, faults: list | None = None, workload: dict | None = None) -> str:
    from chaos.scenario import Scenario

    doc = {"name": "pt", "workload": workload or {"command": ["python", "train.py"], "checkpoint_dir": "ckpt",
                                         "progress_regex": r"step (?P<step>\d+)"},
           "storage": storage, "faults": faults or []}
    try:
        Scenario.model_validate(doc)
    except ValueError as exc:
        return str(exc)
    return ""


def test_passthrough_is_off_by_default_and_accepted_alone() -> None:
    from chaos.scenario import Scenario

    plain = {"name": "x", "workload": {"command": ["true"], "progress_regex": r"step (?P<step>\d+)"}}
    assert Scenario.model_validate(plain).storage.passthrough is False
    assert _scenario({"passthrough": True}) == ""
    assert _scenario({"passthrough": True}, [{"kind": "fsync_stall", "at": 5, "duration": 1}]) == ""
    assert _scenario({"passthrough": True}, [{"kind": "io_error", "at": 5, "ops": ["fsync", "rename"]}]) == ""


@pytest.mark.parametrize(("storage", "faults", "said"), [
    ({"layer": "inotify"}, [], "storage.passthrough: needs storage.layer fuse or auto"),
    ({}, [{"kind": "disk_full", "at": 5}], "faults[0]: disk_full acts on the data path"),
    ({}, [{"kind": "io_error", "at": 5}], "faults[0]: io_error acts on the data path"),
    ({}, [{"kind": "slow_io", "at": 5, "latency": "10ms", "ops": ["read"]}], "slow_io acts on the data path"),
    ({}, [{"kind": "crash", "target": 0, "on": {"event": "checkpoint_save_started"}}],
     "checkpoint_save_started is held"),
])
def test_passthrough_refusals_name_the_field_and_why(storage: dict, faults: list, said: str) -> None:
    message = _scenario({"passthrough": True, **storage}, faults)
    assert said in message and "storage.passthrough" in message


def test_explore_bounds_that_could_draw_a_refused_fault_are_refused() -> None:
    from chaos.scenario import Scenario

    doc = {"name": "pt", "storage": {"passthrough": True},
           "workload": {"command": ["python", "t.py"], "checkpoint_dir": "ckpt",
                        "progress_regex": r"step (?P<step>\d+)"},
           "explore": {"kinds": ["io_error", "fsync_stall"], "events": ["checkpoint_save_started"]}}
    with pytest.raises(ValueError) as raised:
        Scenario.model_validate(doc)
    said = str(raised.value)
    assert "explore.kinds: io_error may be generated acting on the data path" in said
    assert "fsync_stall" not in said and "explore.events: checkpoint_save_started" in said


def test_a_machine_without_passthrough_stops_a_run_that_asks_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import chaos.storage.layer as layer
    from chaos.doctor import unmet
    from chaos.scenario import Scenario

    monkeypatch.setattr(layer, "passthrough_problems", lambda: ["not root: a FUSE backing file needs CAP_SYS_ADMIN"])
    doc = {"name": "pt", "workload": {"command": ["python", "t.py"], "checkpoint_dir": "ckpt",
                                      "progress_regex": r"step (?P<step>\d+)"}}
    assert not any(c.name.startswith("storage passthrough") for c in unmet(Scenario.model_validate(doc)))
    doc["storage"] = {"passthrough": True}
    scenario = Scenario.model_validate(doc)
    found = [c for c in unmet(scenario) if c.name.startswith("storage passthrough")]
    assert found and "CAP_SYS_ADMIN" in found[0].detail and "build-libfuse" in found[0].fix
    assert layer.needs_fuse(scenario) and layer.choose(scenario) == "fuse"  # never the inotify watcher instead


# ---------------------------------------------------------------------------------------------- a real mount
def _missing() -> str | None:
    if os.geteuid() != 0:
        return "not root (a backing file needs CAP_SYS_ADMIN)"
    from chaos.storage.libfuse import passthrough_problems

    problems = passthrough_problems()
    return "; ".join(problems) if problems else None


@pytest.mark.integration
def test_a_save_and_a_load_pass_through_with_the_slow_paths_events(tmp_path: Path) -> None:
    if (why := _missing()) is not None:
        pytest.skip(f"no FUSE passthrough here: {why}")
    library, _ = libfuse.find()
    mount, control, events = tmp_path / "ckpt", tmp_path / "control", tmp_path / "events.jsonl"
    mount.mkdir()
    control.mkdir()
    events.touch()
    env = {**os.environ, "FUSE_LIBRARY_PATH": str(library), "CHAOS_NODE": "node0"}
    server = subprocess.Popen([sys.executable, "-m", "chaos.storage", "serve", "--mount", str(mount), "--events",
                               str(events), "--control", str(control), "--run-id", f"pt-test-{os.getpid()}",
                               "--passthrough"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    from chaos.storage.mounts import is_mounted, unmount

    try:
        deadline = time.monotonic() + 10
        while not (is_mounted(str(mount)) and (control / "passthrough.json").exists()):
            assert server.poll() is None and time.monotonic() < deadline, server.stdout.read() if server.stdout else ""
            time.sleep(0.02)
        data = os.urandom(9 << 20)
        save = (f"import os,sys; d=sys.stdin.buffer.read(); f=open('{mount}/ckpt_7.pt.tmp','wb'); f.write(d); "
                "f.flush(); "
                f"os.fsync(f.fileno()); f.close(); os.rename('{mount}/ckpt_7.pt.tmp','{mount}/ckpt_7.pt'); "
                f"assert open('{mount}/ckpt_7.pt','rb').read()==d")
        subprocess.run([sys.executable, "-c", save], input=data, env={**os.environ, "CHAOS_NODE": "node0"},
                       check=True, timeout=30)
    finally:
        unmount(str(mount))
        out = server.communicate(timeout=15)[0].decode(errors="replace")
    assert server.returncode == 0, out
    status = json.loads((control / "passthrough.json").read_text())
    assert status["offered"] is True and status["passthrough_opens"] >= 2, status
    assert status["server_writes"] == 0 and status["server_reads"] == 0, status  # the kernel moved every byte
    sha = hashlib.sha256(data).hexdigest()
    got = [json.loads(line) for line in events.read_text().splitlines()]
    kinds = [(e["event"], Path(e["path"]).name) for e in got]
    assert ("checkpoint_save_started", "ckpt_7.pt.tmp") in kinds
    finished = [e for e in got if e["event"] == "checkpoint_save_finished" and e["path"].endswith("ckpt_7.pt")]
    assert [(e["sha256"], e["bytes"]) for e in finished] == [(sha, len(data))]
    loaded = [e for e in got if e["event"] == "checkpoint_loaded"]
    assert [(Path(e["path"]).name, e["sha256"], e["bytes"]) for e in loaded] == [("ckpt_7.pt", sha, len(data))]
    assert all(e["node"] == "node0" for e in got)
    assert not any(e["event"] == "checkpoint_write_progress" for e in got)  # no bytes seen: none (documented)
