"""The probe: stdlib only, a no-op outside chaos, one parseable line per event, pause points acknowledged."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chaos import probe

PROBE_SRC = Path(probe.__file__)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return modules | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def test_probe_imports_only_the_standard_library_the_event_declarations_and_the_channel() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    assert {m.split(".")[0] for m in _imports(PROBE_SRC)} - stdlib == {"chaos"}
    assert {m for m in _imports(PROBE_SRC) if m.startswith("chaos")} == {"chaos.events", "chaos.channel"}
    for module in ("events.py", "channel.py", "gate.py"):
        # channel.py's server imports chaos.gate (the engine's side, never loaded by the probe: the test below)
        imported = _imports(PROBE_SRC.parent / module) - ({"chaos.gate"} if module == "channel.py" else set())
        assert {m.split(".")[0] for m in imported} <= stdlib


def test_importing_the_probe_loads_nothing_else_of_chaos_nor_any_third_party_module() -> None:
    code = ("import sys; before = set(sys.modules); import chaos.probe; "
            "print('\\n'.join(sorted(set(sys.modules) - before)))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert {m for m in loaded if m.startswith("chaos")} == {"chaos", "chaos.version", "chaos.probe", "chaos.events",
                                                            "chaos.channel"}
    assert {m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) == {"chaos"}, loaded


def test_noop_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHAOS_EVENTS", raising=False)
    assert not probe.enabled()
    probe.step_completed(1, loss=0.5)  # must not raise


def test_lines_from_many_processes_never_interleave(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    code = ("from chaos import probe\n"
            "for i in range(300): probe.step_completed(i, loss=float('nan') if i == 7 else 0.1, pad='x' * 500)\n")
    env = {**os.environ, "CHAOS_EVENTS": str(events)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(4)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    lines = events.read_text().splitlines()
    assert len(lines) == 1200
    records = [json.loads(line) for line in lines]
    assert sum(1 for r in records if r["step"] == 7 and r["loss"] is None) == 4


def test_pause_waits_for_the_engine_ack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = tmp_path / "events.jsonl"
    acks = Path(str(events) + ".acks")
    acks.mkdir()
    monkeypatch.setenv("CHAOS_EVENTS", str(events))
    monkeypatch.setenv("CHAOS_PAUSE_ON", "checkpoint_save_started")

    def engine() -> None:
        time.sleep(0.3)
        event_id = json.loads(events.read_text().splitlines()[-1])["id"]
        (acks / event_id).touch()

    t = threading.Thread(target=engine)
    t.start()
    t0 = time.monotonic()
    probe.checkpoint_save_started(5, "x.pt")
    waited = time.monotonic() - t0
    t.join()
    assert waited >= 0.25


def test_a_held_job_goes_on_when_the_engine_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live engine's heartbeat keeps the job held until the ack; once it goes stale (engine killed) the job
    is released within seconds, long before the safety timeout.

    Run on a scaled clock: the staleness threshold and the beat interval are both divided by 3, keeping their
    real ratio (checked first), so the live engine still answers after more than the threshold and the stale
    file is noticed within it (~2.5 s instead of ~7 s)."""
    from chaos.engine import heartbeat
    from chaos.engine.heartbeat import HEARTBEAT_FILE, Heartbeat

    scale = 3.0
    assert probe._ENGINE_GONE_S / heartbeat.INTERVAL_S >= 6  # the real margin the scaled run keeps
    monkeypatch.setattr(probe, "_ENGINE_GONE_S", probe._ENGINE_GONE_S / scale)
    monkeypatch.setattr(heartbeat, "INTERVAL_S", heartbeat.INTERVAL_S / scale)
    events = tmp_path / "events.jsonl"
    acks = Path(str(events) + ".acks")
    acks.mkdir()
    monkeypatch.setenv("CHAOS_EVENTS", str(events))
    monkeypatch.setenv("CHAOS_PAUSE_ON", "checkpoint_save_started")
    monkeypatch.setenv("CHAOS_PAUSE_TIMEOUT_S", "60")
    beat = Heartbeat(acks)
    beat.start()
    try:
        def engine() -> None:  # alive, slow to answer (a slow fault injection): the job must wait for it
            time.sleep(4.0 / scale)
            (acks / json.loads(events.read_text().splitlines()[-1])["id"]).touch()

        t = threading.Thread(target=engine)
        t.start()
        t0 = time.monotonic()
        probe.checkpoint_save_started(5, "x.pt")
        assert time.monotonic() - t0 >= 3.9 / scale, "released early although the engine was alive"
        t.join()
    finally:
        beat._stop.set()  # the engine dies without cleaning up: its heartbeat file stays, going stale
        beat._thread.join()
    assert (acks / HEARTBEAT_FILE).exists()
    t0 = time.monotonic()
    probe.checkpoint_save_started(6, "y.pt")
    waited = time.monotonic() - t0
    assert 1.0 / scale <= waited < 10, waited  # noticed within seconds, not after the 60 s safety timeout


def test_the_probe_reads_the_environment_as_os_environ_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe reads its variables from the dict behind os.environ (a step read ~13 of them through the mapping,
    ~36 us): what a script or a test sets or removes through os.environ is what it reads."""
    monkeypatch.setenv("CHAOS_NODE", "node7")
    assert probe._getenv("CHAOS_NODE") == "node7" == os.environ["CHAOS_NODE"]
    monkeypatch.setenv("CHAOS_NODE", "nöde-\udcff")  # not UTF-8: os.environ's own decoding
    assert probe._getenv("CHAOS_NODE") == os.environ["CHAOS_NODE"]
    monkeypatch.delenv("CHAOS_NODE")
    assert probe._getenv("CHAOS_NODE") is None and probe._getenv("CHAOS_NODE", "local") == "local"
    assert probe._identity()["node"] == "local"
