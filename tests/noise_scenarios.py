"""The stock-DDP fixture's scenarios (tests/byo/plain_ddp.py): a node crash that a correct resume survives within
the measured resume noise, and the same crash with a planted resume bug. Shared by the integration test and the
recorder of tests/data/histories (``python -m tests.data.record plain-ddp-crash plain-ddp-no-optimizer-state``)."""

from __future__ import annotations

from pathlib import Path

from chaos.loading import parse_scenario
from chaos.scenario import Scenario

SCRIPT = Path(__file__).resolve().parent / "byo" / "plain_ddp.py"
# Resumes from step 100, 60 steps after it for the noise to show. The job prints its steps and the engine crashes
# node 1 when it reads step 104: the job is some steps further by then (7 in a recorded run at 110), and the crash
# must land before the save at 120 for the resume step the test asserts (16 steps of room; 110 left 10).
STEPS, SAVE_EVERY, CRASH_AT = 160, 20, 104


def plain_ddp(bug: str = "none") -> Scenario:
    """Three nodes (gloo sums three terms: the order matters in the last bit), node 1 crashed after step 104 and
    replaced; the job waits for it (min_nodes 3), so the world size never changes."""
    return parse_scenario(f"""\
name: plain-ddp-{bug}
cluster: {{mode: elastic, nodes: 3, min_nodes: 3, node_restart: {{policy: on-failure, delay_s: 1}}}}
workload:
  command: [python, {SCRIPT}, --steps, {STEPS}, --save-every, {SAVE_EVERY}, --bug, {bug}]
  progress_regex: '^step=(?P<step>\\d+) loss=(?P<loss>\\S+)'
  checkpoint_dir: ckpt
  env: {{PYTHONHASHSEED: '0'}}
faults:
  - {{kind: crash, target: 1, at_step: {CRASH_AT}}}
limits: {{deadline_s: 240, stall_timeout_s: 60}}
""")
