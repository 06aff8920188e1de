"""The verdict table of examples/byo/README.md, from real runs: every bring-your-own scenario run as shipped (or
the ones named), and one markdown row per run made from its result.json alone.

The README's tables were written by hand from runs at one commit; the verdicts move as the checkers learn (issue
32 added `one_writer_per_file`, `next_resume_intact`, `replay_consistent`), so this script is how they are
regenerated rather than retyped:

    flock /tmp/torch-chaos-machine.lock python benchmarks/byo_table.py --out /tmp/byo-runs
    python benchmarks/byo_table.py --from /tmp/byo-runs          # the rows again, from the run directories

``--runtime local`` (the default) runs the Slurm scenario on this machine too (its verdict is documented the same
on both). Each row: the file, the verdict, end reason, recovery and lost steps of the first fault, every
checkpoint verdict that was checked (ok / FAIL, with its mode), and the ``why`` of each failed expectation or
verdict, cut to ``--why-chars``. Nothing is interpreted: a verdict not checked is listed as such.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BYO = Path(__file__).resolve().parent.parent / "examples" / "byo"


def run(scenario: Path, out: Path, runtime: str | None) -> tuple[dict[str, Any] | None, float, str]:
    """One ``chaos run --json``: its result (None when it printed none), wall seconds and stderr's tail."""
    argv = [sys.executable, "-m", "chaos", "run", str(scenario), "--out", str(out), "--json"]
    if runtime:
        argv += ["--runtime", runtime]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - t0
    try:
        return json.loads(proc.stdout), wall, proc.stderr[-500:]
    except json.JSONDecodeError:
        return None, wall, (proc.stdout + proc.stderr)[-500:]


def cut(text: str, n: int) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= n else text[: n - 1] + "…"


def row(name: str, result: dict[str, Any], why_chars: int) -> str:
    """One markdown row from a result.json."""
    fault = (result.get("faults") or [{}])[0]
    recovery = fault.get("recovery_s")
    figures = [result.get("end_reason") or "?",
               f"recovery {recovery:.1f} s" if isinstance(recovery, (int, float)) else "no recovery",
               f"lost {fault.get('lost_steps')} steps" if fault.get("lost_steps") is not None else ""]
    checks, whys = [], []
    for check, verdict in (result.get("checkpoint") or {}).items():
        if not isinstance(verdict, dict) or "ok" not in verdict:
            continue
        state = {True: "ok", False: "FAIL", None: "not checked"}[verdict["ok"]]
        mode = f" ({verdict['mode']})" if verdict.get("mode") and verdict["mode"] != "not_checked" else ""
        checks.append(f"`{check}` {state}{mode}")
        if verdict["ok"] is False:
            whys.append(f"`{check}`: {cut(verdict.get('why', ''), why_chars)}")
    for exp in result.get("expectations") or []:
        if isinstance(exp, dict) and exp.get("ok") is False and not str(exp.get("name", "")).startswith("checkpoint"):
            whys.append(f"`{exp.get('name')}` {exp.get('value')} (expected {json.dumps(exp.get('limit'))})")
    if result.get("verdict") != "pass" and not whys:
        whys.append(cut(result.get("why", ""), why_chars))
    return (f"| `{name}` | **{result.get('verdict')}** | {', '.join(f for f in figures if f)} | "
            f"{'; '.join(checks)} | {'; '.join(whys) or '-'} |")


HEADER = ("| file | verdict | end, first fault | checkpoint verdicts | why (what failed) |\n"
          "|---|---|---|---|---|")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="scenario files of examples/byo without .yaml (default: all)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/byo-runs"), help="where the runs go")
    ap.add_argument("--from", dest="from_dir", type=Path, help="print the rows of the runs already there")
    ap.add_argument("--runtime", default="local", help="--runtime for every run (default local; '' keeps each)")
    ap.add_argument("--why-chars", type=int, default=220)
    args = ap.parse_args()
    print(HEADER)
    if args.from_dir:
        for result_path in sorted(args.from_dir.glob("*/result.json")):
            result = json.loads(result_path.read_text())
            print(row(str(result.get("scenario", result_path.parent.name)), result, args.why_chars))
        return 0
    files = [BYO / f"{n}.yaml" for n in args.names] if args.names else sorted(BYO.glob("*.yaml"))
    for scenario in files:
        result, wall, tail = run(scenario, args.out, args.runtime or None)
        if result is None:
            print(f"| `{scenario.stem}` | **no result** | | | {cut(tail, args.why_chars)} |")
        else:
            print(row(scenario.stem, result, args.why_chars) + f" <!-- {wall:.0f} s, {result.get('run_id')} -->",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
