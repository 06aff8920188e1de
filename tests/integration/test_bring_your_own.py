"""A print-only torchrun script (no probe, plain torch.save snapshots) still gets its recovery figures, its
inferred resume step and the loss-trajectory comparison with its golden run."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.loading import parse_scenario
from tests.runs import run_scenario

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
    assert "inferred from the first step printed" in fault["resume_evidence"]
    assert "snapshot.pt" in fault["resume_evidence"]
    golden = result["checkpoint"]["matches_golden"]
    assert golden["ok"] and golden["mode"] == "bitwise" and golden["steps_compared"] == 400, golden
    assert result["checkpoint"]["resumed_from_newest_valid"]["ok"] is None  # said, not guessed
