"""How long a fault takes to land once the engine decides on it, per runtime and fault kind.

Reads run directories (nothing is run): each ``fault_injected`` event carries ``t_decided`` (the trigger was met)
and ``t`` (the runtime's call returned: the signal delivered, the rule or qdisc in place, the container paused), so
their difference is the fault-effect latency, the part of a fault's timing that is torch-chaos's own rather than
the job's. The runtime is the one the run's resolved ``scenario.yaml`` names.

    python benchmarks/fault_latency.py RUN_DIR [RUN_DIR ...]    # e.g. chaos run tour --runtime docker
    python benchmarks/fault_latency.py --under /tmp/runs         # every run directory below a folder
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from chaos.events import Ev
from chaos.history import iter_history


def latencies(run_dir: Path) -> list[tuple[str, str, float]]:
    """(runtime, kind, seconds) of every fault injected in one run whose history has the decision time."""
    scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    runtime = (scenario.get("cluster") or {}).get("runtime", "local")
    return [(runtime, str(e.get("kind")), e["t"] - e["t_decided"]) for e in iter_history(run_dir / "events.jsonl")
            if e.get("event") == Ev.FAULT_INJECTED and isinstance(e.get("t_decided"), (int, float))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--under", type=Path, help="every run directory (one with events.jsonl) below this folder")
    args = ap.parse_args()
    runs = list(args.runs) + ([p.parent for p in args.under.rglob("events.jsonl")] if args.under else [])
    table: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run_dir in runs:
        if (run_dir / "scenario.yaml").is_file() and (run_dir / "events.jsonl").is_file():
            for runtime, kind, seconds in latencies(run_dir):
                table[(runtime, kind)].append(seconds)
    if not table:
        print("no fault_injected event with t_decided in these run directories", file=sys.stderr)
        return 1
    print(f"{'runtime':8} {'kind':20} {'n':>3} {'median ms':>10} {'max ms':>9}")
    for (runtime, kind), values in sorted(table.items()):
        print(f"{runtime:8} {kind:20} {len(values):3d} {1000 * statistics.median(values):10.1f} "
              f"{1000 * max(values):9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
