"""How far a resumed stock-DDP run strays from a fault-free one: a correct resume against real resume bugs.

    flock /tmp/torch-chaos-integration.lock python benchmarks/resume_noise.py [--steps 200 --resume-at 120]
        [--bugs none no-optimizer-state off-by-one no-rng-state]

For each variant, tests/byo/plain_ddp.py runs under ``torchrun --standalone --nproc-per-node 3`` to
``--resume-at`` (saving every 20 steps), then again to ``--steps``, resuming from its newest checkpoint with the
variant's ``--bug``; its printed losses are compared with one uninterrupted run. This is what chose the noise band's
constants (chaos/analysis/noise.py; docs/design.md, "Metric definitions"). No torch-chaos in the loop: the figures
are the script's own.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "byo" / "plain_ddp.py"
LINE = re.compile(r"^step=(\d+) loss=(\S+)$", re.M)


def run(steps: int, ckpt: Path, bug: str) -> dict[int, float]:
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3",
                          str(SCRIPT), "--steps", str(steps), "--ckpt-dir", str(ckpt), "--bug", bug],
                         capture_output=True, text=True, check=True).stdout
    return {int(s): float(v) for s, v in LINE.findall(out)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--resume-at", type=int, default=120)
    p.add_argument("--bugs", nargs="+", default=["none", "no-optimizer-state", "off-by-one", "no-rng-state"])
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = run(args.steps, Path(tmp) / "fresh", "none")
        print(f"{'variant':<20} {'first differing step':>20} {'relative there':>15} {'max relative':>13}")
        for bug in args.bugs:
            ckpt = Path(tmp) / bug
            resumed = run(args.resume_at, ckpt, "none")
            resumed.update(run(args.steps, ckpt, bug))
            rel = {s: abs(resumed[s] - fresh[s]) / abs(fresh[s]) for s in sorted(fresh) if s in resumed}
            first = next((s for s, r in rel.items() if r > 0), None)
            print(f"{bug:<20} {first if first is not None else '-':>20} "
                  f"{rel[first] if first is not None else 0.0:>15.3g} {max(rel.values()):>13.3g}", flush=True)


if __name__ == "__main__":
    main()
