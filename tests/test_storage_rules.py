"""The storage layer's rules (chaos/storage/rules.py), driven the way the server drives them: ``check`` before an
operation, ``wrote``/``synced``/``renamed``/``truncated`` after it, ``install`` for each new rules.json.

Pure except lost_writes, which truncates real files in a temporary backing directory. Each rule is shown to act
(the broken input it catches) beside the operations it must leave alone (no false alarm).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.storage.rules import PASS, Outcome, RuleError, Rules


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def rules_with(tmp_path: Path, *rules: dict[str, Any], clock: Clock | None = None) -> Rules:
    r = Rules(tmp_path, clock=clock or Clock())
    r.install({"version": 1, "rules": list(rules)})
    return r


def write(r: Rules, backing: Path, relpath: str, data: bytes, node: str | None = "node0", offset: int = 0) -> Outcome:
    """What the server does for one write: ask, and if allowed, write the bytes and say so."""
    outcome = r.check("write", relpath, node, len(data))
    if outcome.errno is None:
        path = backing / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "r+b" if path.exists() else "wb") as f:
            f.seek(offset)
            f.write(data)
        r.wrote(relpath, node, offset, len(data))
    return outcome


def create(r: Rules, backing: Path, relpath: str, node: str | None = "node0") -> Outcome:
    outcome = r.check("open_write", relpath, node)
    if outcome.errno is None:
        (backing / relpath).touch()
    return outcome


def rename(r: Rules, backing: Path, old: str, new: str, node: str | None = "node0") -> None:
    assert r.check("rename", old, node) is PASS
    (backing / old).replace(backing / new)
    r.renamed(old, new)


# ---------------------------------------------------------------------------------------------------- basics

def test_no_rules_pass_everything(tmp_path: Path) -> None:
    r = Rules(tmp_path)
    for op in ("open_write", "open_read", "write", "read", "fsync", "rename", "unlink", "release"):
        assert r.check(op, "step_1.pt", "node0", 10) is PASS


def test_unknown_kind_or_errno_is_refused_before_anything_changes(tmp_path: Path) -> None:
    r = rules_with(tmp_path, {"fault_id": 0, "kind": "disk_full", "effect": "quota"})
    with pytest.raises(RuleError, match="an effect among"):
        r.install({"version": 2, "rules": [{"fault_id": 1, "kind": "melt"}]})  # a rule without an effect
    with pytest.raises(RuleError, match="an effect among"):
        r.install({"version": 2, "rules": [{"fault_id": 1, "kind": "melt", "effect": "melt"}]})
    with pytest.raises(RuleError, match="EBOGUS"):
        r.install({"version": 2, "rules": [{"fault_id": 1, "kind": "io_error", "effect": "error", "errno": "EBOGUS"}]})
    with pytest.raises(RuleError, match="operation"):
        r.install({"version": 2, "rules": [{"fault_id": 1, "kind": "io_error", "effect": "error", "ops": ["chmod"]}]})
    assert r.version == 1 and [x["fault_id"] for x in r.rules] == [0]


def test_paths_glob_and_node_filter(tmp_path: Path) -> None:
    r = rules_with(tmp_path, {"fault_id": 0, "kind": "io_error", "effect": "error", "paths": "*.pt", "node": "node1"})
    assert r.check("write", "step_1.pt", "node1", 5).errno == "EIO"
    assert r.check("write", "sub/step_1.pt", "node1", 5).errno == "EIO"  # `*` crosses directories
    assert r.check("write", "step_1.pt.sha256", "node1", 5) is PASS
    assert r.check("write", ".step_1.pt.tmp", "node1", 5) is PASS
    assert r.check("write", "step_1.pt", "node0", 5) is PASS
    assert r.check("write", "step_1.pt", None, 5) is PASS  # an unknown caller is not node1


# ---------------------------------------------------------------------------------------------------- disk_full

def test_disk_full_from_the_moment_of_injection(tmp_path: Path) -> None:
    r = rules_with(tmp_path, {"fault_id": 3, "kind": "disk_full", "effect": "quota", "after_bytes": 0})
    assert r.check("write", "a.pt", "node0", 1) == Outcome(errno="ENOSPC", fault_id=3)
    # opening, reading, renaming, syncing and empty writes still work on a full disk
    for op in ("open_write", "open_read", "read", "fsync", "rename", "unlink"):
        assert r.check(op, "a.pt", "node0", 10) is PASS
    assert r.check("write", "a.pt", "node0", 0) is PASS


def test_disk_full_counts_bytes_written_after_injection_only(tmp_path: Path) -> None:
    r = Rules(tmp_path)
    write(r, tmp_path, "old.pt", b"x" * 1000)  # before the fault: not counted
    r.install({"version": 1, "rules": [{"fault_id": 0, "kind": "disk_full", "effect": "quota",
                                        "after_bytes": 100, "paths": "*.pt"}]})
    assert write(r, tmp_path, "a.pt", b"x" * 60).errno is None
    assert write(r, tmp_path, "b.txt", b"x" * 500).errno is None  # not a matching path: not counted
    assert write(r, tmp_path, "a.pt", b"x" * 40, offset=60).errno is None  # exactly full
    assert write(r, tmp_path, "a.pt", b"x", offset=100).errno == "ENOSPC"
    # the counter survives a new rules.json that keeps the rule (another fault added)
    r.install({"version": 2, "rules": [*r.rules, {"fault_id": 1, "kind": "slow_io", "effect": "slow",
                                                  "latency_ms": 1}]})
    assert r.check("write", "a.pt", "node0", 1).errno == "ENOSPC"
    # healed: writes go through; injected again later: counts from zero again
    r.install({"version": 3, "rules": []})
    assert write(r, tmp_path, "a.pt", b"y" * 50).errno is None
    r.install({"version": 4, "rules": [{"fault_id": 0, "kind": "disk_full", "effect": "quota", "after_bytes": 100}]})
    assert r.check("write", "a.pt", "node0", 100) is PASS


# ---------------------------------------------------------------------------------------------------- io_error

def test_io_error_default_ops_and_errno(tmp_path: Path) -> None:
    r = rules_with(tmp_path, {"fault_id": 0, "kind": "io_error", "effect": "error"})
    for op in ("open_write", "open_read", "write", "read", "fsync", "rename"):
        assert r.check(op, "a.pt", "node0", 1) == Outcome(errno="EIO", fault_id=0), op
    assert r.check("release", "a.pt", "node0") is PASS  # closing a handle never fails
    assert r.check("unlink", "a.pt", "node0") is PASS


def test_io_error_chosen_ops_errno_and_count(tmp_path: Path) -> None:
    r = rules_with(tmp_path, {"fault_id": 2, "kind": "io_error", "effect": "error",
                              "ops": ["fsync", "open_read"], "errno": "EROFS",
                              "count": 2})
    assert r.check("write", "a.pt", "node0", 1) is PASS
    assert r.check("open_write", "a.pt", "node0") is PASS
    assert r.check("open_read", "a.pt", "node0").errno == "EROFS"
    assert r.check("fsync", "a.pt", "node0").errno == "EROFS"
    assert r.check("fsync", "a.pt", "node0") is PASS  # the first two only


def test_io_error_probability_is_a_fraction_and_replays(tmp_path: Path) -> None:
    def failures(seed_fault: int) -> list[bool]:
        r = rules_with(tmp_path, {"fault_id": seed_fault, "kind": "io_error", "effect": "error",
                                  "ops": ["read"], "probability": 0.3})
        return [r.check("read", "a.pt", "node0", 1).errno is not None for _ in range(1000)]

    first = failures(5)
    assert 200 < sum(first) < 400
    assert failures(5) == first  # the same fault fails the same operations: a run can be replayed


# ---------------------------------------------------------------------------------------------------- slow_io

def test_slow_io_latency_adds_up_and_errors_win(tmp_path: Path) -> None:
    r = rules_with(tmp_path, {"fault_id": 0, "kind": "slow_io", "effect": "slow",
                              "latency_ms": 50, "ops": ["fsync", "write"]},
                   {"fault_id": 1, "kind": "slow_io", "effect": "slow", "latency_ms": 20})
    assert r.check("fsync", "a.pt", "node0").delay_s == pytest.approx(0.07)
    assert r.check("read", "a.pt", "node0", 1).delay_s == pytest.approx(0.02)
    assert r.check("release", "a.pt", "node0") is PASS
    r.install({"version": 2, "rules": [*r.rules, {"fault_id": 2, "kind": "io_error", "effect": "error",
                                                  "ops": ["fsync"]}]})
    assert r.check("fsync", "a.pt", "node0") == Outcome(errno="EIO", fault_id=2)


def test_slow_io_bandwidth_is_one_queue(tmp_path: Path) -> None:
    clock = Clock()
    r = rules_with(tmp_path, {"fault_id": 0, "kind": "slow_io", "effect": "slow",
                              "bandwidth_bps": 1_000_000}, clock=clock)
    assert r.check("write", "a.pt", "node0", 500_000).delay_s == pytest.approx(0.5)
    # a second writer at the same moment queues behind the first
    assert r.check("write", "b.pt", "node1", 500_000).delay_s == pytest.approx(1.0)
    clock.t += 5.0  # idle since: no debt carried
    assert r.check("read", "a.pt", "node0", 100_000).delay_s == pytest.approx(0.1)
    assert r.check("fsync", "a.pt", "node0").delay_s == 0.0  # the cap is on bytes


# ---------------------------------------------------------------------------------------------------- fsync_stall

def test_fsync_stall_blocks_fsync_until_the_rule_is_removed(tmp_path: Path) -> None:
    r = rules_with(tmp_path, {"fault_id": 4, "kind": "fsync_stall", "effect": "stall_fsync", "paths": "*.tmp"})
    outcome = r.check("fsync", ".step_1.pt.tmp", "node0")
    assert outcome.stall and outcome.fault_id == 4 and outcome.errno is None
    assert r.check("fsync", "step_1.pt.sha256", "node0") is PASS
    assert r.check("write", ".step_1.pt.tmp", "node0", 10) is PASS
    assert r.stalled(4)
    r.install({"version": 2, "rules": [{"fault_id": 5, "kind": "slow_io", "effect": "slow", "latency_ms": 1}]})
    assert not r.stalled(4)  # healed: the server lets the waiting fsync through


# ---------------------------------------------------------------------------------------------------- lost_writes

def power_loss(r: Rules, tmp_path: Path, fault_id: int, node: str, **extra: Any) -> list[dict[str, Any]]:
    report = tmp_path.parent / f"report-{fault_id}.json"
    r.install({"version": r.version + 1,
               "rules": [*r.rules, {"fault_id": fault_id, "kind": "lost_writes", "effect": "power_loss", "node": node,
                                    "report": str(report), **extra}]})
    return json.loads(report.read_text())["truncated"]


@pytest.fixture
def backing(tmp_path: Path) -> Path:
    path = tmp_path / "backing"
    path.mkdir()
    return path


def test_lost_writes_cuts_unsynced_data_back_to_the_last_fsync(backing: Path) -> None:
    r = Rules(backing)
    create(r, backing, "synced.pt")
    write(r, backing, "synced.pt", b"a" * 100)
    r.check("fsync", "synced.pt", "node0")
    r.synced("synced.pt")
    write(r, backing, "synced.pt", b"b" * 50, offset=100)  # appended after the fsync: lost
    create(r, backing, ".never.pt.tmp")
    write(r, backing, ".never.pt.tmp", b"c" * 70)
    rename(r, backing, ".never.pt.tmp", "never.pt")  # state follows the rename: the renamed file comes back empty
    create(r, backing, "other-node.pt", node="node1")
    write(r, backing, "other-node.pt", b"d" * 30, node="node1")  # node1 kept its power

    cut = power_loss(r, backing, 7, "node0")

    assert sorted(cut, key=lambda c: c["path"]) == [{"path": "never.pt", "bytes": 70, "kept": 0},
                                                    {"path": "synced.pt", "bytes": 150, "kept": 100}]
    assert (backing / "synced.pt").read_bytes() == b"a" * 100
    assert (backing / "never.pt").stat().st_size == 0
    assert (backing / "other-node.pt").stat().st_size == 30
    # once only: a later rules.json that still holds the rule does not cut again
    write(r, backing, "synced.pt", b"e" * 10, offset=100)
    r.install({"version": r.version + 1, "rules": list(r.rules)})
    assert (backing / "synced.pt").stat().st_size == 110


def test_lost_writes_spares_a_correct_atomic_save(backing: Path) -> None:
    """tmp written, fsynced, renamed, sidecar written and fsynced: a power loss takes nothing."""
    r = Rules(backing)
    create(r, backing, "step_1.pt")
    write(r, backing, "step_1.pt", b"old" * 10)
    r.synced("step_1.pt")
    create(r, backing, ".step_2.pt.tmp")
    write(r, backing, ".step_2.pt.tmp", b"x" * 64)
    r.synced(".step_2.pt.tmp")
    rename(r, backing, ".step_2.pt.tmp", "step_2.pt")
    create(r, backing, "step_2.pt.sha256")
    write(r, backing, "step_2.pt.sha256", b"{}")
    r.synced("step_2.pt.sha256")
    assert power_loss(r, backing, 1, "node0") == []
    assert (backing / "step_2.pt").stat().st_size == 64


def test_lost_writes_existing_files_truncation_and_unlink(backing: Path) -> None:
    (backing / "before.pt").write_bytes(b"z" * 40)  # written before the layer saw it: durable
    r = Rules(backing)
    create(r, backing, "before.pt")
    write(r, backing, "before.pt", b"y" * 10, offset=40)
    (backing / "rewritten.pt").write_bytes(b"q" * 80)
    create(r, backing, "rewritten.pt")
    r.truncated("rewritten.pt", 0, "node0")  # open("wb") of a durable file, rewritten without fsync
    (backing / "rewritten.pt").write_bytes(b"")
    write(r, backing, "rewritten.pt", b"n" * 20)
    create(r, backing, "gone.pt")
    write(r, backing, "gone.pt", b"g" * 5)
    assert r.check("unlink", "gone.pt", "node0") is PASS
    (backing / "gone.pt").unlink()

    cut = power_loss(r, backing, 2, "node0")

    assert {c["path"]: c["kept"] for c in cut} == {"before.pt": 40, "rewritten.pt": 0}
    assert (backing / "rewritten.pt").stat().st_size == 0


def test_lost_writes_paths_and_writeback(backing: Path) -> None:
    clock = Clock()
    r = Rules(backing, clock=clock)
    create(r, backing, "old.pt")
    write(r, backing, "old.pt", b"o" * 10)
    clock.t += 40
    create(r, backing, "new.pt")
    write(r, backing, "new.pt", b"n" * 10)
    create(r, backing, "new.log")
    write(r, backing, "new.log", b"l" * 10)
    clock.t += 1
    cut = power_loss(r, backing, 3, "node0", writeback_s=30, paths="*.pt")
    # old.pt was written back 40 s ago; new.log is outside the rule's paths
    assert [c["path"] for c in cut] == ["new.pt"]
    assert (backing / "old.pt").stat().st_size == 10 and (backing / "new.log").stat().st_size == 10


def test_data_written_back_is_durable_for_a_later_power_loss(backing: Path) -> None:
    clock = Clock()
    r = Rules(backing, clock=clock)
    create(r, backing, "a.pt")
    write(r, backing, "a.pt", b"a" * 10)
    clock.t += 60
    assert power_loss(r, backing, 1, "node0", writeback_s=30) == []  # written back: kept
    write(r, backing, "a.pt", b"b" * 5, offset=10)
    cut = power_loss(r, backing, 2, "node0")
    assert cut == [{"path": "a.pt", "bytes": 15, "kept": 10}]


def test_concurrent_server_threads_count_every_byte(tmp_path: Path) -> None:
    import threading

    r = rules_with(tmp_path, {"fault_id": 0, "kind": "disk_full", "effect": "quota", "after_bytes": 10**9})

    def writer(i: int) -> None:
        for _ in range(2000):
            r.check("write", f"f{i}.pt", "node0", 1)
            r.wrote(f"f{i}.pt", "node0", 0, 1)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert r._state[0].written == 8000


def test_every_storage_kind_declares_an_effect_the_layer_knows() -> None:
    """The layer acts by a rule's effect, never by its kind: each registered kind that installs a rule says which
    (``layer_effect``), and it is one the layer enforces (else every inject of it would be refused)."""
    from chaos.registry import fault_plugins
    from chaos.storage.rules import EFFECTS

    declared = {kind: getattr(plugin, "layer_effect", None) for kind, plugin in fault_plugins().items()}
    declared = {kind: effect for kind, effect in declared.items() if effect is not None}
    assert len(declared) >= 5 and {k: e for k, e in declared.items() if e not in EFFECTS} == {}
