"""The storage layer under a real cluster: a print-only script (no probe, a plain ``torch.save`` of its snapshot
to its final path) is crashed on ``checkpoint_save_started`` through the layer's hold, and the crash lands inside
the save: the file left behind is torn and the history shows the save started and never finished. On docker the
same run proves the containers see the mount and that their processes are attributed to their nodes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaos.history import read_history
from chaos.loading import parse_scenario
from chaos.storage.mounts import chaos_mounts
from tests.runs import run_scenario
from tests.tiers import FULL

# The whole file waits for --full: the gate's storage run is test_storage_faults.py's full disk.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL]

SCRIPT = Path(__file__).resolve().parent.parent / "byo" / "ddp_snapshot.py"


@pytest.mark.parametrize("runtime", ["local", "docker"])
def test_crash_on_save_started_tears_the_snapshot(runtime: str, machine_for: Callable[[Any], None]) -> None:
    scenario = parse_scenario(f"""\
name: storage-torn-snapshot
cluster: {{runtime: {runtime}, mode: elastic, nodes: 1, node_restart: {{policy: never}}}}
workload:
  command: [python, {SCRIPT}, --epochs, 6, --steps-per-epoch, 5, --save-every, 1, --snapshot, ckpt/snapshot.pt]
  progress_regex: '\\[rank(?P<rank>\\d+)\\] Epoch \\d+ \\| step (?P<step>\\d+) \\| loss (?P<loss>[0-9.]+)'
  checkpoint_dir: ckpt
storage: {{layer: fuse}}
faults:
  - {{kind: crash, target: event_node, on: {{event: checkpoint_save_started, occurrence: 2}}}}
expect: {{completes: false}}
checks: {{golden: false}}
limits: {{deadline_s: 90, stall_timeout_s: 60}}
""")
    machine_for(scenario)
    result, run_dir = run_scenario(scenario)
    # the crash left the newest snapshot torn on disk and nothing restarted: the checkpoint a restart would load
    # next is broken, which next_resume_intact must say (issue 32), whatever else the run expected
    assert result["verdict"] == "fail", (result["why"], run_dir)
    resume = result["checkpoint"]["next_resume_intact"]
    assert resume["ok"] is False and resume["verdict"] == "next_resume_torn" and "snapshot.pt" in resume["why"], resume
    assert "next_resume_intact" in result["why"], result["why"]
    assert result["environment"]["storage_layer"] == "fuse"
    assert result["history"]["unreadable_count"] == 0, result["history"]  # every storage line is a usable event
    events = read_history(run_dir / "events.jsonl")
    storage = [e for e in events if e["source"] == "storage"]
    started = [e for e in storage if e["event"] == "checkpoint_save_started"]
    finished = [e for e in storage if e["event"] == "checkpoint_save_finished"]
    # the first snapshot (after epoch 0, step 5) saved completely; the second one was cut at its start
    assert len(started) == 2 and len(finished) == 1, storage
    assert all(e["node"] == "node0" and e["path"] == str(run_dir / "ckpt" / "snapshot.pt") for e in storage)
    assert [e["step"] for e in started] == [5, 10]  # the steps the script had printed before each save
    assert "id" in started[1]  # held until the crash had landed
    [injected] = [e for e in events if e["event"] == "fault_injected"]
    assert injected["trigger_event"] == "checkpoint_save_started" and injected["target"] == "node0"
    assert started[1]["t"] < injected["t"]
    # torn: the file at its final path holds fewer bytes than the complete save before it (here: none)
    snapshot = run_dir / "ckpt" / "snapshot.pt"
    assert snapshot.stat().st_size < finished[0]["bytes"], (snapshot.stat().st_size, finished[0])
    assert not any(m.run_id == run_dir.name for m in chaos_mounts()), "the mount outlived the run"
