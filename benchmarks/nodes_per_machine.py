"""How many simulated nodes one machine carries: the same no-fault job at growing node counts, and what the engine
itself costs at each.

Every node of a local-runtime cluster is a ``torchrun`` with its own workers, all on this host, so adding nodes
divides the machine among them: past some count the job crawls (each rank gets a sliver of a core) or the engine
falls behind reading the history. For each node count the script runs a no-fault ``chaos run`` of the reference
workload (golden run off: it is a second job, not load) ``--repeat`` times and prints medians of

- the job's steps per second (highest step / first node started to last node exited, from the history);
- history events per second the engine took in;
- the engine's own CPU (the ``chaos run`` process alone, its children excluded; sampled every 0.2 s, so the last
  fraction of a second of teardown is missed) as seconds and as a share of one core over the command's wall time.

    flock /tmp/torch-chaos-integration.lock python benchmarks/nodes_per_machine.py --nodes 1 2 4 6 --steps 200

Run it alone on the machine: another job beside it takes cores from the nodes, not from the engine, and skews
both columns.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SCENARIO = """\
name: nodes-per-machine
description: no fault; benchmarks/nodes_per_machine.py
cluster: {{mode: elastic, nodes: {nodes}, min_nodes: {nodes}}}
workload:
  name: ddp-mlp
  args: {{steps: {steps}, checkpoint_every: 50}}
checks: {{golden: false}}
limits: {{deadline_s: 900, stall_timeout_s: 120}}
"""


def one_run(scenario: Path, out: Path) -> dict[str, float]:
    """One ``chaos run``: steps/s, events/s, engine CPU seconds and its share of one core."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(scenario), "--json", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    engine = psutil.Process(proc.pid)
    cpu = 0.0
    while proc.poll() is None:
        try:
            times = engine.cpu_times()
            cpu = times.user + times.system  # this process only: children_* are not added
        except psutil.Error:
            break
        time.sleep(0.2)
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"chaos run failed ({proc.returncode}): {stdout[-2000:]}{stderr[-2000:]}")
    run_dir = out / json.loads(stdout)["run_id"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    started = min(e["t"] for e in events if e.get("event") == "node_started")
    exited = max(e["t"] for e in events if e.get("event") == "node_exited")
    top = max((e.get("step", 0) for e in events if e.get("event") == "step_completed"), default=0)
    job = exited - started
    return {"steps_per_s": top / job, "events_per_s": len(events) / job, "engine_cpu_s": cpu,
            "engine_core_share": cpu / wall, "job_s": job}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4, 6])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="torch-chaos-nodes-") as tmp:
        for n in args.nodes:
            scenario = Path(tmp) / f"nodes-{n}.yaml"
            scenario.write_text(SCENARIO.format(nodes=n, steps=args.steps))
            runs = []
            for i in range(args.repeat):
                runs.append(one_run(scenario, Path(tmp) / f"runs-{n}-{i}"))
                r = runs[-1]
                print(f"  {n} node(s) #{i + 1}: {r['steps_per_s']:.2f} steps/s, engine {r['engine_cpu_s']:.1f} s CPU",
                      flush=True)
            rows.append((n, {k: statistics.median(r[k] for r in runs) for k in runs[0]}))
    base = rows[0][1]["steps_per_s"]
    print(f"{args.steps} steps per run, {args.repeat} run(s) per node count (medians), {psutil.cpu_count()} cores:")
    print(f"  {'nodes':>5} {'job s':>7} {'steps/s':>8} {'vs first':>8} {'events/s':>9} {'engine CPU s':>12} "
          f"{'engine core share':>17}")
    for n, m in rows:
        print(f"  {n:>5} {m['job_s']:>7.1f} {m['steps_per_s']:>8.2f} {m['steps_per_s'] / base:>8.2f} "
              f"{m['events_per_s']:>9.0f} {m['engine_cpu_s']:>12.1f} {m['engine_core_share']:>17.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
