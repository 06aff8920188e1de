"""A print-only torchrun script (no probe, plain torch.save snapshots) still gets its recovery figures, its
inferred resume step and the loss-trajectory comparison with its golden run."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.loading import parse_scenario
from tests.runs import run_scenario
from tests.tiers import FULL

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers")]

SCRIPT = Path(__file__).resolve().parent.parent / "byo" / "ddp_snapshot.py"
STEPS_PER_EPOCH, SAVE_EVERY = 10, 5


def test_print_only_script_is_measured() -> None:
    scenario = parse_scenario(f"""\
name: byo-ddp-snapshot
cluster:
  mode: elastic
  nodes: 2
  min_nodes: 2
  node_restart: {{policy: on-failure, delay_s: 1}}
workload:
  command: [python, {SCRIPT}, --epochs, 40, --steps-per-epoch, {STEPS_PER_EPOCH}, --save-every, {SAVE_EVERY},
            --snapshot, ckpt/snapshot.pt]
  progress_regex: '\\[rank(?P<rank>\\d+)\\] Epoch \\d+ \\| step (?P<step>\\d+) \\| loss (?P<loss>[0-9.]+)'
  checkpoint_dir: ckpt
faults:
  - {{kind: crash, target: 1, at_step: 170}}
expect:
  recovery_s: {{max: 60}}
  lost_steps: {{max: {STEPS_PER_EPOCH * SAVE_EVERY}}}
limits: {{deadline_s: 240, stall_timeout_s: 60}}
""")
    result, run_dir = run_scenario(scenario)
    assert result["verdict"] == "pass", (result["why"], run_dir)
    [fault] = result["faults"]
    assert fault["restarted"] and 0 < fault["recovery_s"] < 60
    # snapshots are taken every 50 steps: the resume point is an epoch boundary inferred from the output
    assert fault["resumed_from"] % (STEPS_PER_EPOCH * SAVE_EVERY) == 0
    assert fault["resumed_from"] <= fault["highest_step_before"]
    assert fault["lost_steps"] == fault["highest_step_before"] - fault["resumed_from"]
    golden = result["checkpoint"]["matches_golden"]
    # the script prints its loss with 6 decimals: equal there is not bitwise (issue 32)
    assert golden["ok"] and golden["mode"] == "equal_as_printed" and golden["steps_compared"] == 400, golden
    assert golden["printed_decimals"] == 6 and "equal at the printed precision (6 decimals)" in golden["why"], golden
    checkpoint = result["checkpoint"]
    if result["environment"].get("storage_layer") != "fuse":  # no way to see the loads: said, not guessed
        assert "inferred from the first step printed" in fault["resume_evidence"]
        assert checkpoint["resumed_from_newest_valid"]["ok"] is None and checkpoint["digests_ok"]["ok"] is None
        return
    # the storage layer saw every rank read the snapshot: the verdicts are judged, from the bytes and steps
    assert fault["resume_evidence"].startswith("checkpoint_loaded (storage layer): "), fault
    assert fault["resume_evidence"].endswith("snapshot.pt")
    assert checkpoint["digests_ok"]["ok"] is True, checkpoint["digests_ok"]
    resumed = checkpoint["resumed_from_newest_valid"]
    assert resumed["ok"] is True and resumed["restarts"], resumed
    assert resumed["restarts"][0]["loaded_step"] == fault["resumed_from"], resumed
    once = checkpoint["exactly_once"]
    assert once["ok"] is None and "no step trained twice or skipped" in once["why"], once


@FULL
def test_a_crash_loop_on_a_damaged_snapshot_is_a_restart_loop_naming_file_and_error() -> None:
    """The node crashes, and its snapshot is truncated while it is down: every restarted worker dies loading it
    before printing a step. torchrun's failure lines and the storage layer's loads count the rounds, so this is a
    restart loop whose why names the error and the file, not a hang with 0 restarts. Which error depends on where
    the crash caught the save: a file cut inside the zip archive fails "finding central directory", one the crash
    caught right after torch.save's open (0 bytes) is an EOFError of the legacy pickle reader."""
    scenario = parse_scenario(f"""\
name: byo-damaged-snapshot
cluster: {{mode: elastic, nodes: 1, node_restart: {{policy: on-failure, delay_s: 3}}}}
workload:
  command: [python, {SCRIPT}, --epochs, 40, --steps-per-epoch, 5, --save-every, 1, --snapshot, ckpt/snapshot.pt]
  progress_regex: '\\[rank(?P<rank>\\d+)\\] Epoch \\d+ \\| step (?P<step>\\d+) \\| loss (?P<loss>[0-9.]+)'
  checkpoint_dir: ckpt
storage: {{layer: fuse}}
faults:
  - {{kind: crash, target: 0, at_step: 12}}
  - {{kind: corrupt_checkpoint, mode: truncate, at: 1.5}}  # while the node is down: no later save repairs it
expect: {{completes: false}}
checks: {{golden: false}}
limits: {{deadline_s: 120, stall_timeout_s: 60}}
""")
    result, run_dir = run_scenario(scenario)
    assert result["verdict"] == "restart_loop", (result["why"], run_dir)
    assert result["restarts"] >= 4, result["restarts"]
    why = result["why"]
    assert "snapshot.pt" in why and ("failed finding central directory" in why or "EOFError" in why), why
    digests = result["checkpoint"]["digests_ok"]
    assert digests["ok"] is False and "snapshot.pt" in digests["why"], digests
