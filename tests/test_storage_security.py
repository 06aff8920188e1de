"""The storage layer and the faults that touch files never give anyone more than they had (issue 29).

A real FUSE mount in a temporary directory (as tests/test_storage_server.py) with an unprivileged user on the
other side (``nobody`` through ``setpriv``); planted symbolic and hard links that point out of the checkpoint
directory; and the validation of the paths a scenario may name."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from chaos.storage.layer import fuse_problem
from chaos.storage.mounts import is_mounted, unmount

needs_fuse = pytest.mark.skipif(fuse_problem() is not None, reason=f"no FUSE here: {fuse_problem()}")
needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv (an unprivileged user on the other side)")


def _serve(mount: str, events: str, control: str) -> None:
    from chaos.storage.server import serve

    serve(mount, events, control, run_id=f"unit-test-sec-{os.getppid()}")


@contextmanager
def mounted(base: Path) -> Iterator[Path]:
    """``base/ckpt`` served by the layer (its own contents, from underneath), unmounted after."""
    mount, control = base / "ckpt", base / ".storage"
    mount.mkdir(exist_ok=True)
    control.mkdir(exist_ok=True)
    (base / "events.jsonl").touch()
    proc = multiprocessing.get_context("fork").Process(
        target=_serve, args=(str(mount), str(base / "events.jsonl"), str(control)))
    proc.start()
    try:
        deadline = time.monotonic() + 10
        while not is_mounted(str(mount)):
            assert proc.is_alive() and time.monotonic() < deadline, "the server did not mount"
            time.sleep(0.02)
        yield mount
    finally:
        unmount(str(mount))
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
            unmount(str(mount))


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A directory every user may traverse (pytest's tmp_path is root's 0700)."""
    base = Path(tempfile.mkdtemp(prefix="chaos-sec-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for m in (base / "ckpt",):
            if is_mounted(str(m)):
                unmount(str(m))
        shutil.rmtree(base, ignore_errors=True)


# What user nobody tries, each a shell command (no Python: the test's interpreter may be where nobody cannot go).
ATTEMPTS = {
    "append": 'echo x >> "$D/ckpt_1.pt"',
    "chown": 'chown nobody "$D/ckpt_1.pt"',
    "chmod": 'chmod 0666 "$D/ckpt_1.pt"',
    "delete": 'rm -f "$D/sub/ckpt_2.pt"',
    "create_in_root_dir": ': > "$D/new.pt"',
    "setuid_copy": 'cp /usr/bin/id "$D/open/id" && chmod 4755 "$D/open/id"',
    "setgid_copy": 'cp /usr/bin/id "$D/open/id2" && chmod 2755 "$D/open/id2"',
    "write_own": 'echo mine > "$D/open/mine.pt"',
}


def as_nobody(directory: Path) -> dict[str, bool]:
    """Which of :data:`ATTEMPTS` user nobody managed in ``directory``."""
    done = {}
    for name, command in ATTEMPTS.items():
        proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sh", "-c",
                               command], env={"D": str(directory), "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=30)
        done[name] = proc.returncode == 0
    return done


def plant(directory: Path) -> None:
    """Root's files as a checkpoint directory has them: 0644 files, a 0755 subdirectory, one open 0777 one."""
    (directory / "ckpt_1.pt").write_bytes(b"root's checkpoint")
    (directory / "ckpt_1.pt").chmod(0o644)
    (directory / "sub").mkdir(mode=0o755)
    (directory / "sub" / "ckpt_2.pt").write_bytes(b"another")
    (directory / "open").mkdir()
    (directory / "open").chmod(0o777)
    directory.chmod(0o755)


@needs_fuse
@needs_root
def test_an_unprivileged_user_gets_through_the_layer_exactly_the_rights_it_has_on_the_plain_directory(
        open_base: Path) -> None:
    plain = open_base / "plain"
    plain.mkdir()
    plant(plain)
    expected = as_nobody(plain)
    assert expected == {"append": False, "chown": False, "chmod": False, "delete": False,
                        "create_in_root_dir": False, "setuid_copy": True, "setgid_copy": True, "write_own": True}

    (open_base / "ckpt").mkdir()
    plant(open_base / "ckpt")
    with mounted(open_base) as mount:
        got = as_nobody(mount)
        made = {name: os.stat(mount / "open" / name) for name in ("id", "id2", "mine.pt")}
        root_file = os.stat(mount / "ckpt_1.pt")
        still_there = (mount / "sub" / "ckpt_2.pt").exists()
    assert got == expected
    assert (open_base / "ckpt" / "ckpt_1.pt").read_bytes() == b"root's checkpoint"
    assert (root_file.st_uid, stat.S_IMODE(root_file.st_mode)) == (0, 0o644)
    assert still_there
    nobody = int(subprocess.run(["id", "-u", "nobody"], capture_output=True, text=True).stdout)
    for name, st in made.items():  # the caller's files, never root's; never a setuid/setgid one from a user
        assert st.st_uid == nobody, name
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), f"{name}: {stat.filemode(st.st_mode)}"
    # and after the run, executing the copy as nobody is still nobody
    out = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                          str(open_base / "ckpt" / "open" / "id")], capture_output=True, text=True).stdout
    assert "euid=0" not in out and f"uid={nobody}(" in out, out


@needs_fuse
def test_the_mount_asks_the_kernel_to_check_permissions() -> None:
    from chaos.storage.server import mount_options

    assert mount_options("r")["default_permissions"] is True


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _json(path: Path) -> Any:
    return json.loads(path.read_text())
