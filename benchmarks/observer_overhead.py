"""What watching a job costs it: a no-fault ``chaos run`` against the very same job under bare ``torchrun``.

Both sides run the commands of one plan (``chaos run --dry-run --json``): the bare side starts each node's
``torchrun`` line itself, without the engine's ``CHAOS_*`` environment (the probe is then off) and with a plain
checkpoint directory (no storage layer); the observed side is ``chaos run`` with its golden run off (a golden run
is a second job, not overhead). They alternate, ``--repeat`` times each, and the script prints medians and the
ratio of medians for

- the job: first node started to last node exited (the engine's own events on the observed side, the launcher's
  clock on the bare side), the figure the overhead goal is about (issue 15: <= 1.02);
- the command: the whole ``chaos run`` (engine start, plan, storage layer, teardown, analysis) against the bare
  launch, what a user waits for.

    python benchmarks/observer_overhead.py --steps 600 --repeat 3

Run it alone on the machine (``flock /tmp/torch-chaos-integration.lock``): other jobs change both sides unevenly.
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

SCENARIO = """\
name: observer-overhead
description: no fault; benchmarks/observer_overhead.py
cluster: {{mode: elastic, nodes: {nodes}, min_nodes: {nodes}}}
workload:
  name: ddp-mlp
  args: {{steps: {steps}, checkpoint_every: 50}}
checks: {{golden: false}}
limits: {{deadline_s: 600, stall_timeout_s: 60}}
"""


def plan(scenario: Path, out: Path) -> list[dict]:
    """The node commands ``chaos run`` would start, from its dry run."""
    done = subprocess.run([sys.executable, "-m", "chaos", "run", str(scenario), "--dry-run", "--json",
                           "--out", str(out)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["nodes"]


def bare(scenario: Path, scratch: Path) -> tuple[float, float]:
    """One bare torchrun job: (job seconds, command seconds) — the same here, nothing runs around it."""
    nodes = plan(scenario, scratch / "plan")
    ckpt = scratch / "bare-checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    procs = []
    for node in nodes:
        argv = list(node["argv"])
        if "--checkpoint-dir" in argv:
            argv[argv.index("--checkpoint-dir") + 1] = str(ckpt)
        env = {k: v for k, v in node["env"].items() if not k.startswith("CHAOS_")}
        log = open(scratch / f"bare-{node['name']}.log", "w")
        procs.append((subprocess.Popen(argv, env={**_base_env(), **env}, stdout=log, stderr=subprocess.STDOUT,
                                       cwd=scratch), log))
    codes = [p.wait() for p, _ in procs]
    took = time.monotonic() - t0
    for _, log in procs:
        log.close()
    if any(codes):
        raise SystemExit(f"bare torchrun failed (exit codes {codes}); logs in {scratch}")
    return took, took


def observed(scenario: Path, scratch: Path) -> tuple[float, float]:
    """One ``chaos run``: (job seconds from its history, command seconds)."""
    out = scratch / "runs"
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "chaos", "run", str(scenario), "--json", "--out", str(out)],
                          capture_output=True, text=True)
    took = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"chaos run failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    run_dir = out / json.loads(done.stdout)["run_id"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    started = min(e["t"] for e in events if e.get("event") == "node_started")
    exited = max(e["t"] for e in events if e.get("event") == "node_exited")
    return exited - started, took


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("CHAOS_")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "chaos": []}
    with tempfile.TemporaryDirectory(prefix="torch-chaos-overhead-") as tmp:
        scenario = Path(tmp) / "observer-overhead.yaml"
        scenario.write_text(SCENARIO.format(steps=args.steps, nodes=args.nodes))
        for i in range(args.repeat):
            for side, fn in (("bare", bare), ("chaos", observed)) if i % 2 == 0 else (("chaos", observed),
                                                                                      ("bare", bare)):
                scratch = Path(tmp) / f"{side}-{i}"
                scratch.mkdir()
                runs[side].append(fn(scenario, scratch))
                print(f"  {side:5} #{i + 1}: job {runs[side][-1][0]:6.2f} s, command {runs[side][-1][1]:6.2f} s",
                      flush=True)
    print(f"{args.nodes} nodes x {args.steps} steps, {args.repeat} alternating runs per side (medians):")
    for j, what in enumerate(("job", "command")):
        b = statistics.median(r[j] for r in runs["bare"])
        c = statistics.median(r[j] for r in runs["chaos"])
        print(f"  {what:8} bare torchrun {b:6.2f} s   chaos run {c:6.2f} s   ratio {c / b:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
