"""The storage layer and the faults that touch files never give anyone more than they had (issue 29).

A real FUSE mount in a temporary directory (as tests/test_storage_server.py) with an unprivileged user on the
other side (``nobody`` through ``setpriv``); planted symbolic and hard links that point out of the checkpoint
directory; and the validation of the paths a scenario may name."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from chaos.storage.layer import fuse_problem
from chaos.storage.mounts import is_mounted, unmount
from tests.fuse_mount import served

needs_fuse = pytest.mark.skipif(fuse_problem() is not None, reason=f"no FUSE here: {fuse_problem()}")
needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv (an unprivileged user on the other side)")


def _serve(mount: str, events: str, control: str) -> None:
    from chaos.storage.server import serve

    serve(mount, events, control, run_id=f"unit-test-sec-{os.getppid()}")


def mounted(base: Path) -> AbstractContextManager[Path]:
    """``base/ckpt`` served by the layer (its own contents, from underneath), unmounted after."""
    return served(base, _serve)


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


GROUP = 100  # a supplementary group of nobody's in one attempt: the layer takes the caller's groups too


def as_nobody(directory: Path) -> dict[str, bool]:
    """Which of :data:`ATTEMPTS` user nobody managed in ``directory`` (and, as a member of :data:`GROUP`, a
    write in a directory only that group may write)."""
    done = {}
    attempts = [(name, command, "--clear-groups") for name, command in ATTEMPTS.items()]
    attempts += [("group_write", 'echo ours > "$D/group/ours.pt"', f"--groups={GROUP}"),
                 ("group_write_without_the_group", 'echo ours > "$D/group/not.pt"', "--clear-groups")]
    for name, command, groups in attempts:
        proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", groups, "sh", "-c",
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
    (directory / "group").mkdir()
    os.chown(directory / "group", 0, GROUP)
    (directory / "group").chmod(0o770)
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
                        "create_in_root_dir": False, "setuid_copy": True, "setgid_copy": True, "write_own": True,
                        "group_write": True, "group_write_without_the_group": False}

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


# ------------------------------------------------------------------------------------ corrupt_checkpoint

def _refusal(directory: Path, mode: str) -> str | None:
    """Why corrupt_checkpoint refused, or None when it damaged something."""
    try:
        _corrupt(directory, mode)
    except RuntimeError as exc:
        return str(exc)
    return None


def _corrupt(directory: Path, mode: str) -> str:
    from chaos.faults.base import FaultContext
    from chaos.registry import fault_kind, fault_plugins

    spec = fault_plugins()["corrupt_checkpoint"].options(kind="corrupt_checkpoint", at_step=5, mode=mode)
    ctx = FaultContext(None, spec, None, directory, None, fault_id=0)  # type: ignore[arg-type]
    return fault_kind("corrupt_checkpoint").inject(ctx)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the run that a planted link names."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = elsewhere / "victim.bin"
    path.write_bytes(os.urandom(4096))
    return path


def _checkpoints(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ckpt_000100.pt").write_bytes(os.urandom(2048))


@pytest.mark.parametrize("mode", ["flip", "truncate"])
@pytest.mark.parametrize("through", ["plain", "fuse"])
def test_a_planted_link_to_a_file_outside_is_refused_and_the_file_is_untouched(
        mode: str, through: str, victim: Path, open_base: Path) -> None:
    ckpt = open_base / "ckpt"
    _checkpoints(ckpt)
    (ckpt / "ckpt_999999.pt").symlink_to(victim)
    before = _sha(victim)
    if through == "fuse":
        if fuse_problem() is not None:
            pytest.skip(f"no FUSE here: {fuse_problem()}")
        with mounted(open_base) as mount:
            why = _refusal(mount, mode)
    else:
        why = _refusal(ckpt, mode)
    assert _sha(victim) == before and victim.stat().st_size == 4096
    assert why is not None and f"ckpt_999999.pt is a symbolic link to {victim}, outside the checkpoint" in why


def test_a_link_planted_in_an_allowed_directory_or_on_the_way_is_refused(victim: Path, tmp_path: Path) -> None:
    """A checkpoint directory in allow_paths (absolute, outside the run) gets the same; and a checkpoint directory
    swapped for a link after the plan resolved it is not followed."""
    allowed = tmp_path / "data" / "ckpts"
    _checkpoints(allowed)
    (allowed / "ckpt_999999.pt").symlink_to(victim)
    before = _sha(victim)
    why = _refusal(allowed, "flip")
    assert _sha(victim) == before
    assert why is not None and "outside the checkpoint directory" in why
    (allowed / "ckpt_999999.pt").unlink()
    swapped = tmp_path / "data" / "moved"
    allowed.rename(swapped)
    allowed.symlink_to(victim.parent)  # the planned directory is now a link to elsewhere
    (victim.parent / "ckpt_5.pt").symlink_to(victim)
    (victim.parent / "ckpt_999999.pt").write_bytes(b"not the run's")
    why = _refusal(allowed, "truncate")
    assert _sha(victim) == before and (victim.parent / "ckpt_999999.pt").read_bytes() == b"not the run's"
    assert why is not None and "cannot be opened without following a link" in why


def test_a_hard_link_to_a_file_outside_is_refused_one_inside_is_damaged(victim: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    _checkpoints(ckpt)
    os.link(victim, ckpt / "ckpt_999999.pt")
    before = _sha(victim)
    why = _refusal(ckpt, "flip")
    assert _sha(victim) == before
    assert why is not None and "has 2 hard links and only 1 of them are in the checkpoint directory" in why
    (ckpt / "ckpt_999999.pt").unlink()
    os.link(ckpt / "ckpt_000100.pt", ckpt / "latest_000100.pt")  # both names inside: a checkpoint of the run's own
    size = (ckpt / "ckpt_000100.pt").stat().st_size
    assert "truncated" in _corrupt(ckpt, "truncate")
    assert (ckpt / "ckpt_000100.pt").stat().st_size == size // 2


def test_a_link_inside_the_checkpoint_directory_damages_its_target(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    _checkpoints(ckpt)
    (ckpt / "latest_000200.pt").symlink_to("ckpt_000100.pt")
    data = (ckpt / "ckpt_000100.pt").read_bytes()
    assert "ckpt_000100.pt" in _corrupt(ckpt, "flip")
    assert (ckpt / "ckpt_000100.pt").read_bytes() != data


def test_in_the_engine_a_refused_corruption_is_a_failed_fault_with_the_reason(victim: Path, tmp_path: Path) -> None:
    from chaos.scenario import make_fault
    from tests.test_engine_parts import Run

    run = Run(tmp_path, [make_fault(kind="corrupt_checkpoint", at_step=5)], nodes=1)
    ckpt = tmp_path / "ckpt"
    _checkpoints(ckpt)
    (ckpt / "ckpt_999999.pt").symlink_to(victim)
    run.plan.checkpoint_dir = ckpt
    before = _sha(victim)
    run.nodes.start_cluster()
    run.job("step_completed", step=5, pid=7)
    run.tick(now=1.0)
    engine = run.engine_events()
    assert _sha(victim) == before
    assert not [e for e in engine if e["event"] == "fault_injected"]
    [failed] = [e for e in engine if e["event"] == "fault_failed"]
    assert "Refused" in failed["why"] and "outside the checkpoint directory" in failed["why"]


# ------------------------------------------------------------------------------------ lost_writes

@needs_fuse
def test_lost_writes_follows_a_renamed_directory_and_never_truncates_through_the_link_left_in_its_place(
        open_base: Path, tmp_path: Path) -> None:
    """The workload writes step_5/model.pt (never fsynced), renames step_5 to kept, and puts a link to a directory
    outside where step_5 was: the power loss cuts kept/model.pt, and the file outside keeps every byte."""
    import sys

    from chaos.storage.control import StorageControl

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.pt").write_bytes(os.urandom(8192))
    before = _sha(outside / "model.pt")
    with mounted(open_base) as mount:
        code = (f"import os; d = {str(mount)!r}; os.mkdir(d + '/step_5'); "
                "open(d + '/step_5/model.pt', 'wb').write(b'x' * 1000); "
                f"os.rename(d + '/step_5', d + '/kept'); os.symlink({str(outside)!r}, d + '/step_5')")
        subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "CHAOS_NODE": "node1"})
        report = open_base / ".storage" / "lost_writes-1.json"
        StorageControl(open_base / ".storage").apply({"fault_id": 1, "kind": "lost_writes", "effect": "power_loss",
                                                      "node": "node1",
                                                      "paths": "*", "report": str(report)})
        said = _json(report)
    assert _sha(outside / "model.pt") == before
    assert said["truncated"] == [{"path": "kept/model.pt", "bytes": 1000, "kept": 0}]
    assert (open_base / "ckpt" / "kept" / "model.pt").stat().st_size == 0


def test_lost_writes_refuses_a_file_swapped_for_a_link_and_the_fault_does_not_happen(tmp_path: Path) -> None:
    from chaos.storage.rules import Rules

    backing, outside = tmp_path / "backing", tmp_path / "outside.bin"
    backing.mkdir()
    outside.write_bytes(b"y" * 5000)
    rules = Rules(backing)
    rules.check("open_write", "model.pt", "node1")
    (backing / "model.pt").write_bytes(b"x" * 100)
    rules.wrote("model.pt", "node1", 0, 100)
    (backing / "model.pt").unlink()
    (backing / "model.pt").symlink_to(outside)
    report = tmp_path / "report.json"
    rules.install({"version": 1, "rules": [{"fault_id": 1, "kind": "lost_writes", "effect": "power_loss",
                                            "node": "node1",
                                            "report": str(report)}]})
    assert outside.read_bytes() == b"y" * 5000
    [entry] = _json(report)["truncated"]
    assert entry["refused"] and "symbolic link" in entry["error"]


def test_state_follows_a_directory_rename(tmp_path: Path) -> None:
    from chaos.storage.rules import Rules

    rules = Rules(tmp_path)
    rules.wrote("a/b/model.pt", "node1", 0, 10)
    rules.wrote("a/other.pt", "node1", 0, 10)
    rules.wrote("c/old.pt", "node1", 0, 10)
    rules.renamed("a", "c")
    assert sorted(rules.files) == ["c/b/model.pt", "c/other.pt"]


# ------------------------------------------------------------------------------------ validation

SCENARIO = "name: t\ncluster: {{mode: elastic, nodes: 2}}\n{allow}workload: {{name: ddp-mlp}}\nfaults: [{fault}]\n"


@pytest.mark.parametrize("entry", ["/dev", "/etc", "/proc", "/usr", "/root", "/var/lib/docker", "/", "/sys/fs",
                                   "/var", "/run/user", "/lib64"])
def test_allow_paths_refuses_system_trees(entry: str) -> None:
    from chaos.loading import ScenarioInvalid, parse_scenario

    with pytest.raises(ScenarioInvalid, match=r"allow_paths\[0\]: .*(system directory|filesystem root)"):
        parse_scenario(SCENARIO.format(allow=f"allow_paths: [{entry}]\n", fault=""))


def test_allow_paths_refuses_a_link_to_a_system_tree_and_accepts_a_directory_of_ones_own(tmp_path: Path) -> None:
    from chaos.loading import ScenarioInvalid, parse_scenario

    (tmp_path / "innocent").symlink_to("/etc")
    with pytest.raises(ScenarioInvalid, match=r"allow_paths\[0\]: .* resolves to /etc\) is or holds the system"):
        parse_scenario(SCENARIO.format(allow=f"allow_paths: [{tmp_path / 'innocent'}]\n", fault=""))
    parse_scenario(SCENARIO.format(allow=f"allow_paths: [{tmp_path / 'data'}]\n", fault=""))


@pytest.mark.parametrize("fault", [
    "{kind: disk_full, at_step: 5, paths: '/etc/*'}",
    "{kind: io_error, at_step: 5, paths: '../x/*'}",
    "{kind: slow_io, at_step: 5, latency: 1ms, paths: 'a/../../b'}",
    "{kind: lost_writes, at_step: 5, target: 0, paths: /x}",
])
def test_storage_fault_paths_must_stay_in_the_checkpoint_directory(fault: str) -> None:
    from chaos.loading import ScenarioInvalid, parse_scenario

    with pytest.raises(ScenarioInvalid, match=r"faults\[0\]\.paths: expected a glob relative to the checkpoint"):
        parse_scenario(SCENARIO.format(allow="", fault=fault))
    parse_scenario(SCENARIO.format(allow="", fault="{kind: disk_full, at_step: 5, paths: 'step_*/*.pt'}"))


def test_the_layer_refuses_a_rule_whose_paths_leave_the_directory(tmp_path: Path) -> None:
    from chaos.storage.rules import RuleError, Rules

    with pytest.raises(RuleError, match="paths: expected a glob relative"):
        Rules(tmp_path).install({"version": 1, "rules": [{"fault_id": 1, "kind": "disk_full", "effect": "quota",
                                                          "paths": "/etc/*"}]})


# ------------------------------------------------------------------------------------ a rule that matched nothing

def test_a_storage_rule_that_matched_nothing_is_a_fault_that_did_not_happen(tmp_path: Path) -> None:
    """disk_full on paths the job never writes: the layer counts no match, the heal says so, and result.json has
    the fault as not injected (no_effect) with the reason, and the run does not pass."""
    from chaos.analysis.result_json import build_result
    from chaos.events import Ev, Source
    from chaos.loading import parse_scenario
    from chaos.storage.rules import Rules
    from tests.histories import H

    rules = Rules(tmp_path)
    rules.install({"version": 1, "rules": [{"fault_id": 0, "kind": "disk_full", "effect": "quota", "paths": "never/*"},
                                           {"fault_id": 1, "kind": "disk_full", "effect": "quota", "paths": "*.pt",
                                            "after_bytes": 10**9}]})
    rules.check("write", "step_5.pt", "node0", 100)
    assert rules.matched == {0: 0, 1: 1}

    scenario = parse_scenario(SCENARIO.format(allow="", fault="{kind: disk_full, at_step: 5, paths: 'never/*'}"))
    h = H().start(2).steps(1, 5).fault(0, kind="disk_full")
    h.events[-1]["details"] = {"paths": "never/*"}
    h.events[0]["plan"] = {"faults": [{"id": 0, "kind": "disk_full", "target": "storage"}]}
    h.steps(6, 10)
    h.events.append({"t": h.t, "source": Source.ENGINE, "event": Ev.FAULT_HEALED, "fault_id": 0,
                     "kind": "disk_full", "at_teardown": True, "restored": True, "matched": 0})
    events = h.finish(10).end()
    result = build_result(Path("r"), scenario, events, None)
    [fault] = result["faults"]
    assert fault["injected"] is False and fault["outcome"] == "no_effect"
    assert "matched no operation" in fault["why_not_injected"] and "never/*" in fault["why_not_injected"]
    assert result["verdict"] == "error" and "did not happen" in result["why"], result["why"]


def test_the_heal_reports_what_the_rule_matched(tmp_path: Path) -> None:
    from chaos.faults.base import FaultContext
    from chaos.registry import fault_kind, fault_plugins
    from tests.test_storage_faults import StandInServer

    control = tmp_path / "control"
    server = StandInServer(control, tmp_path)
    try:
        from chaos.storage.control import StorageControl

        storage = StorageControl(control)
        spec = fault_plugins()["disk_full"].options(kind="disk_full", at_step=5, paths="never/*")
        ctx = FaultContext(None, spec, None, None, None, fault_id=0, storage=storage)  # type: ignore[arg-type]
        fault_kind("disk_full").inject(ctx)
        (control / "matched.json").write_text(json.dumps({"0": 0}))  # as the server writes it
        assert fault_kind("disk_full").heal(ctx)["matched"] == 0  # type: ignore[index]
    finally:
        server.stop()


def test_lost_writes_whose_paths_matched_no_file_did_not_happen(tmp_path: Path) -> None:
    from tests.test_storage_faults import StandInServer, context, spec_of

    backing = tmp_path / "backing"
    backing.mkdir()
    server = StandInServer(tmp_path / "control", backing)
    try:
        from chaos.registry import fault_kind
        from chaos.storage.control import StorageControl

        storage = StorageControl(tmp_path / "control")
        server.rules.check("open_write", "step_1.pt", "node0")
        (backing / "step_1.pt").write_bytes(b"a" * 10)
        server.rules.wrote("step_1.pt", "node0", 0, 10)
        ctx = context(spec_of("lost_writes", target=0, paths="shards/*.distcp"), storage, node="node0")
        with pytest.raises(RuntimeError, match=r"paths 'shards/\*.distcp' matched no file the job wrote"):
            fault_kind("lost_writes").inject(ctx)
        assert storage.rules == {} and (backing / "step_1.pt").stat().st_size == 10
    finally:
        server.stop()
