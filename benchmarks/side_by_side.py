"""Can the test suite run a second real cluster beside a measured one? The measured run alone, then beside a
loop of other runs at a lower CPU priority, alternated, with medians and ratios.

The suite runs its real clusters one at a time (tests/conftest.py, ``_share_the_machine``) because their verdicts
include timings. Measured singly they leave part of the machine idle (a quickstart 72-90 % busy), so a second
lane of runs whose verdicts hold no timing could use the idle share, if running it did not move the measured
run's figures. This script measures exactly that: lane A (``--measured``, default ``quickstart``) runs alone and
beside lane B (``--beside``, default ``bugs/off-by-one-resume``, a planted bug whose verdicts are checkpoint
verdicts only) started over and over under each ``--policy`` (``idle``: ``chrt --idle 0``, SCHED_IDLE, which
the kernel runs only on otherwise idle CPU time; ``nice19``: ``nice -n 19``; ``normal``). It prints, per
condition, the median wall time and recovery of lane A, and how many lane-B runs finished beside it with their
verdicts (a lane that changed its own verdicts is no use either).

    flock /tmp/torch-chaos-integration.lock python benchmarks/side_by_side.py --rounds 2

Both golden runs are made once first (``--golden-cache``), so each condition compares the faulted runs only.
Run it with nothing else on the machine: anything else beside it is a third lane.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

POLICIES = {"idle": ["chrt", "--idle", "0"], "nice19": ["nice", "-n", "19"], "normal": []}


def chaos_run(scenario: str, out: Path, golden_cache: Path, prefix: list[str]) -> dict[str, Any]:
    """One ``chaos run --json``: its wall time, the machine's busy share meanwhile, verdict and recoveries."""
    cpu, t0 = psutil.cpu_times(), time.monotonic()
    proc = subprocess.run([*prefix, sys.executable, "-m", "chaos", "run", scenario, "--json", "--out", str(out),
                           "--golden-cache", str(golden_cache)], capture_output=True, text=True, check=False)
    wall, after = time.monotonic() - t0, psutil.cpu_times()
    idle = (after.idle + after.iowait) - (cpu.idle + cpu.iowait)
    total = sum(after) - sum(cpu)
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"wall_s": wall, "busy": None, "verdict": f"no result (exit {proc.returncode})",
                "failing": [], "recovery_s": []}
    return {"wall_s": wall, "busy": 1 - idle / total if total else None, "verdict": result["verdict"],
            "failing": sorted(k for k, v in result["checkpoint"].items() if v["ok"] is False),
            "recovery_s": [f["recovery_s"] for f in result["faults"] if f.get("recovery_s") is not None]}


def beside(args: argparse.Namespace, out: Path, prefix: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Lane A once while lane B starts over and over under ``prefix``; the lane-B run in flight at the end
    finishes and counts."""
    stop, lane_b = threading.Event(), []

    def loop() -> None:
        while not stop.is_set():
            lane_b.append(chaos_run(args.beside, out / "b", args.golden_cache, prefix))

    thread = threading.Thread(target=loop)
    thread.start()
    time.sleep(args.head_start)
    measured = chaos_run(args.measured, out / "a", args.golden_cache, [])
    stop.set()
    thread.join()
    return measured, lane_b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--measured", default="quickstart", help="lane A: the run whose figures must not move")
    ap.add_argument("--beside", default="bugs/off-by-one-resume", help="lane B: started over and over beside A")
    ap.add_argument("--policy", nargs="+", default=["idle", "nice19"], choices=sorted(POLICIES))
    ap.add_argument("--rounds", type=int, default=2, help="each round: A alone, then A beside B per policy")
    ap.add_argument("--head-start", type=float, default=3.0, help="seconds lane B runs before lane A starts")
    ap.add_argument("--golden-cache", type=Path, default=None)
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    args.golden_cache = args.golden_cache or out / "golden"
    for scenario in (args.measured, args.beside):  # golden runs (cached) and a first run of each, not counted
        chaos_run(scenario, out / "warm", args.golden_cache, [])
    alone: list[dict[str, Any]] = []
    with_b: dict[str, list[tuple[dict[str, Any], list[dict[str, Any]]]]] = {p: [] for p in args.policy}
    b_alone = [chaos_run(args.beside, out / "b", args.golden_cache, []) for _ in range(args.rounds)]
    for _ in range(args.rounds):
        for policy in args.policy:
            alone.append(chaos_run(args.measured, out / "a", args.golden_cache, []))
            print(f"A alone: {alone[-1]}", flush=True)
            with_b[policy].append(beside(args, out, POLICIES[policy]))
            print(f"A beside B ({policy}): {with_b[policy][-1][0]}; B: {len(with_b[policy][-1][1])} run(s)",
                  flush=True)

    def med(runs: list[dict[str, Any]], key: str) -> float:
        values = [r[key] if key != "recovery_s" else max(r[key], default=0.0) for r in runs]
        return statistics.median(values) if values else float("nan")

    base_wall, base_rec = med(alone, "wall_s"), med(alone, "recovery_s")
    print(f"\nA alone ({len(alone)} runs): wall {base_wall:.1f} s, recovery {base_rec:.2f} s, "
          f"verdicts {sorted({r['verdict'] for r in alone})}")
    print(f"B alone ({len(b_alone)} runs): wall {med(b_alone, 'wall_s'):.1f} s, "
          f"verdicts {sorted({(r['verdict'], tuple(r['failing'])) for r in b_alone})}")
    for policy, pairs in with_b.items():
        a_runs = [a for a, _ in pairs]
        b_runs = [b for _, bs in pairs for b in bs]
        wall, rec = med(a_runs, "wall_s"), med(a_runs, "recovery_s")
        print(f"A beside B ({policy}, {len(a_runs)} runs): wall {wall:.1f} s (x{wall / base_wall:.2f}), recovery "
              f"{rec:.2f} s (x{rec / base_rec:.2f}), verdicts {sorted({r['verdict'] for r in a_runs})}; "
              f"B finished {len(b_runs)} run(s), median wall {med(b_runs, 'wall_s'):.1f} s, verdicts "
              f"{sorted({(r['verdict'], tuple(r['failing'])) for r in b_runs})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
