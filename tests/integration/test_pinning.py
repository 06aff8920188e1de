"""cluster.resources.cpus for real: every process of a pinned node (torchrun's agent and its workers) runs on the
node's own cores, as the plan and result.json say (docs/reports.md, "Fair comparisons")."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from chaos.engine import Engine
from chaos.loading import parse_scenario
from tests.tiers import FULL

# The whole file waits for --full.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftovers"), FULL]

# Each worker prints its own cores and its parent's (the torchrun agent that started it).
SCRIPT = """\
import os, time
for step in range(1, 11):
    own = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    agent = ",".join(map(str, sorted(os.sched_getaffinity(os.getppid()))))
    print(f"step {step} | cpus {own} | agent {agent} | node {os.environ['CHAOS_NODE']}", flush=True)
    time.sleep(0.1)
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two cores")
def test_a_pinned_nodes_agent_and_workers_run_on_its_own_cores(tmp_path: Path) -> None:
    script = tmp_path / "print_affinity.py"
    script.write_text(SCRIPT)
    scenario = parse_scenario(f"""\
name: pinned
cluster: {{nodes: 2, resources: {{cpus: 1}}}}
workload:
  command: [python, {script}]
  progress_regex: 'step (?P<step>\\d+)'
checks: {{golden: false}}
limits: {{deadline_s: 60}}
""")
    engine = Engine(scenario, out_dir=tmp_path / "runs")
    result = engine.run()
    pinned = result["resources"]["nodes"]
    assert result["resources"]["cpus_per_node"] == 1 and not result["resources"]["oversubscribed"]
    assert pinned["node0"] != pinned["node1"], pinned
    for node, cores in pinned.items():
        log = (engine.run_dir / "logs" / f"{node}.log").read_text()
        seen = set(re.findall(r"cpus (\S+) \| agent (\S+) \| node " + node, log))
        expected = ",".join(map(str, cores))
        assert seen == {(expected, expected)}, (node, seen, log[-2000:])
