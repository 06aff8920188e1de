"""How many simulated nodes one machine carries: the same job at growing node counts, whether it passes, and what
the engine itself costs at each.

Every node of a local-runtime cluster is a ``torchrun`` with its own workers, all on this host, so adding nodes
divides the machine among them: past some count the job crawls (each rank gets a sliver of a core) or the engine
falls behind reading the history. For each node count the script runs a ``chaos run`` of the reference workload
(golden run off: it is a second job, not load) ``--repeat`` times, with one node crashing at ``--crash-at`` and
replaced after 1 s (``--crash-at 0``: no fault), and prints per node count

- pass/fail (the verdict of every repeat: a hung rendezvous ends at the scenario's deadline as a failure);
- start -> first step (first node started to the first ``step_completed``) and the crash's recovery, medians;
- the job's steps per second (highest step / first node started to last node exited, from the history);
- history events per second the engine took in;
- the engine's own CPU (the ``chaos run`` process alone, its children excluded; sampled every 0.2 s, so the last
  fraction of a second of teardown is missed) as seconds and as a share of one core over the command's wall time.

    flock /tmp/torch-chaos-machine.lock python benchmarks/nodes_per_machine.py --nodes 8 16 24 32 --steps 120

``--fixed`` pins the rendezvous timeouts to the 8-node values (what the tuned preset was before it scaled them with
the node count: chaos.plan.scaled_for_nodes), to find where they stop holding.

Run it alone on the machine: another job beside it takes cores from the nodes, not from the engine, and skews
both columns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SCENARIO = """\
name: nodes-per-machine
description: benchmarks/nodes_per_machine.py
cluster:
  mode: elastic
  nodes: {nodes}
  min_nodes: {min_nodes}
  node_restart: {{policy: on-failure, delay_s: 1}}{fixed}
workload:
  name: ddp-mlp
  args: {{steps: {steps}, checkpoint_every: 20, global_batch: 96, dataset_size: 4800}}
faults: {faults}
checks: {{golden: false}}
limits: {{deadline_s: {deadline}, stall_timeout_s: 300}}
"""
FIXED = """
  process_group_timeout_s: 10
  rendezvous: {join_timeout_s: 60, last_call_timeout_s: 2, read_timeout_s: 10, keep_alive_interval_s: 1}"""


def one_run(scenario: Path, out: Path) -> dict[str, float]:
    """One ``chaos run``: passed (1/0), start -> first step, recovery, steps/s, events/s, engine CPU seconds and
    its share of one core."""
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
    try:
        result = json.loads(stdout)
    except ValueError:
        raise SystemExit(f"chaos run failed ({proc.returncode}): {stdout[-2000:]}{stderr[-2000:]}") from None
    run_dir = out / result["run_id"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    started = min(e["t"] for e in events if e.get("event") == "node_started")
    exited = max((e["t"] for e in events if e.get("event") == "node_exited"), default=events[-1]["t"])
    steps = [e for e in events if e.get("event") == "step_completed"]
    top = max((e.get("step", 0) for e in steps), default=0)
    first = min((e["t"] for e in steps), default=float("nan"))
    recoveries = [f["recovery_s"] for f in result.get("faults", []) if f.get("recovery_s") is not None]
    job = exited - started
    return {"passed": float(result.get("verdict") == "pass"), "first_step_s": first - started,
            "recovery_s": recoveries[0] if recoveries else float("nan"), "steps_per_s": top / job,
            "events_per_s": len(events) / job, "engine_cpu_s": cpu, "engine_core_share": cpu / wall, "job_s": job}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[8, 16, 24, 32])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--crash-at", type=int, default=60, help="the step at which node 1 crashes (0: no fault)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--fixed", action="store_true", help="rendezvous timeouts pinned to the 8-node values")
    ap.add_argument("--deadline", type=int, default=900, help="each run's deadline_s (a hang fails at it)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="torch-chaos-nodes-") as tmp:
        for n in args.nodes:
            scenario = Path(tmp) / f"nodes-{n}.yaml"
            faults = f"[{{kind: crash, target: 1, at_step: {args.crash_at}}}]" if args.crash_at else "[]"
            scenario.write_text(SCENARIO.format(nodes=n, min_nodes=max(1, n - 1) if args.crash_at else n,
                                                steps=args.steps, faults=faults, deadline=args.deadline,
                                                fixed=FIXED if args.fixed else ""))
            runs = []
            for i in range(args.repeat):
                runs.append(one_run(scenario, Path(tmp) / f"runs-{n}-{i}"))
                r = runs[-1]
                verdict = "pass" if r["passed"] else "FAIL"
                print(f"  {n} node(s) #{i + 1}: {verdict}, first step {r['first_step_s']:.1f} s,"
                      f" recovery {r['recovery_s']:.1f} s, {r['steps_per_s']:.2f} steps/s, engine "
                      f"{r['engine_cpu_s']:.1f} s CPU", flush=True)
            summary = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            summary["passed"] = sum(r["passed"] for r in runs)
            rows.append((n, summary))
    base = rows[0][1]["steps_per_s"]
    settings = "rendezvous timeouts fixed at the 8-node values" if args.fixed else "default (tuned) settings"
    print(f"{args.steps} steps per run, crash at step {args.crash_at or 'none'}, {settings}, {args.repeat} run(s) per "
          f"node count (medians), {psutil.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end:")
    print(f"  {'nodes':>5} {'passed':>7} {'first step s':>12} {'recovery s':>10} {'job s':>7} {'steps/s':>8} "
          f"{'vs first':>8} {'events/s':>9} {'engine CPU s':>12} {'engine core share':>17}")
    for n, m in rows:
        print(f"  {n:>5} {int(m['passed']):>3}/{args.repeat:<3} {m['first_step_s']:>12.1f} {m['recovery_s']:>10.1f} "
              f"{m['job_s']:>7.1f} {m['steps_per_s']:>8.2f} {m['steps_per_s'] / base if base else float('nan'):>8.2f} "
              f"{m['events_per_s']:>9.0f} {m['engine_cpu_s']:>12.1f} {m['engine_core_share']:>17.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
