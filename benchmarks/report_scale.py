"""How ``chaos report`` scales with the history: synthesise a long soak run, report it, print time and peak memory.

The history looks like the reference workload's under the engine: 3 nodes with one rank each, a step event per
rank per step (loss, timings, the sample ids the exactly-once check needs), a checkpoint every
``--checkpoint-every`` steps (save started, write progress, save finished, the old one deleted), and a few node
crashes, each followed by a new worker round that loads the newest checkpoint and redoes the lost steps. Nothing
is run: the point is the cost of analysis and reports per event, which real runs of this length would take hours
to produce.

    python benchmarks/report_scale.py --events 300000 --format html
    python benchmarks/report_scale.py --events 300000 --format html json text --repeat 3   # medians of 3

On a shared machine wall time varies run to run; ``--repeat`` reports the median of each figure (wall, CPU, peak
RSS) over that many reports of the same history, and CPU time is the steadier of the two.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from chaos.events import EndReason, Ev, Source

SCENARIO = """\
name: soak-synthetic
description: synthetic long soak history (benchmarks/report_scale.py)
cluster: {mode: elastic, nodes: 3, min_nodes: 2}
workload:
  name: ddp-mlp
  args: {steps: %(steps)d, checkpoint_every: %(every)d}
faults:
%(faults)s
expect:
  completes: true
  recovery_s: {max: 60}
limits: {deadline_s: 100000, stall_timeout_s: 60}
"""


def synthesise(run_dir: Path, n_events: int, every: int = 100, n_faults: int = 4, ranks: int = 3,
               batch: int = 32, dataset: int = 4096, seed: int = 0) -> int:
    """Write scenario.yaml and events.jsonl for a soak of about ``n_events`` events; returns the event count."""
    rng = random.Random(seed)
    steps = n_events // ranks
    crash_at = sorted(rng.sample(range(steps // 10, steps - every), n_faults))
    lines: list[str] = []
    t = 1_000_000.0
    dt = 0.05

    def put(event: Ev, source: Source = Source.WORKLOAD, **fields: Any) -> None:
        lines.append(json.dumps({"t": t, "source": source, "event": event, **fields}))

    put(Ev.RUN_STARTED, Source.ENGINE, run_id="soak", scenario="soak-synthetic",
        environment={"cpus": 16, "platform": "linux", "torch": "2.x", "python": "3.11"}, plan={}, golden=None)
    for n in range(ranks):
        put(Ev.NODE_STARTED, Source.ENGINE, node=f"node{n}", replacement=False, argv=["torchrun"])
    incarnation = 0
    pid = 100
    step = 0
    last_ckpt = 0
    done_faults = 0
    restart = 0

    def ident(r: int) -> dict[str, Any]:
        return {"node": f"node{r}", "pid": pid + r, "rank": r, "local_rank": 0, "world_size": ranks,
                "restart": restart, "incarnation": f"inc{incarnation}"}

    def start_round(load: int | None) -> None:
        nonlocal t
        for r in range(ranks):
            put(Ev.PROCESS_STARTED, **ident(r), distributed=True)
        if load:
            t += 0.2
            path = f"/ckpt/step_{load}.pt"
            put(Ev.CHECKPOINT_LOAD_STARTED, **ident(0), step=load, path=path)
            t += 0.05
            for r in range(ranks):
                put(Ev.CHECKPOINT_LOADED, **ident(r), step=load, path=path, sha256=_digest(load))

    start_round(None)
    while step < steps:
        step += 1
        t += dt * rng.uniform(0.9, 1.1)
        epoch = (step - 1) * batch // dataset
        first = ((step - 1) * batch) % dataset
        for r in range(ranks):
            ids = [(first + i) % dataset for i in range(r, batch, ranks)]
            put(Ev.STEP_COMPLETED, **ident(r), step=step, loss=1.0 / step, samples=len(ids), duration_s=dt,
                comm_s=0.01 * step, sample_ids=ids, epoch=epoch, dataset_size=dataset)
        if step % every == 0:
            path = f"/ckpt/step_{step}.pt"
            put(Ev.CHECKPOINT_SAVE_STARTED, **ident(0), step=step, path=path)
            for written in (1 << 20, 2 << 20):
                put(Ev.CHECKPOINT_WRITE_PROGRESS, **ident(0), step=step, path=path, written=written, total=2 << 20)
            t += 0.02
            put(Ev.CHECKPOINT_SAVE_FINISHED, **ident(0), step=step, path=path, sha256=_digest(step), bytes=2 << 20)
            if last_ckpt:
                put(Ev.CHECKPOINT_DELETED, **ident(0), step=last_ckpt, path=f"/ckpt/step_{last_ckpt}.pt")
            last_ckpt = step
        if done_faults < n_faults and step == crash_at[done_faults]:
            t += 0.001
            put(Ev.FAULT_INJECTED, Source.ENGINE, fault_id=done_faults, kind="crash", target="node2", disruptive=True,
                mechanism="SIGKILL", details={}, trigger_event=None, max_step=step)
            put(Ev.NODE_EXITED, Source.ENGINE, node="node2", code=-9, will_replace=True)
            done_faults += 1
            t += 8.0  # detection, rendezvous, restart
            put(Ev.NODE_STARTED, Source.ENGINE, node="node2", replacement=True, argv=["torchrun"])
            incarnation += 1
            restart += 1
            pid += 10
            start_round(last_ckpt)
            step = last_ckpt
    put(Ev.RUN_FINISHED, **ident(0), step=steps, state_sha256="final")
    for n in range(ranks):
        put(Ev.NODE_EXITED, Source.ENGINE, node=f"node{n}", code=0)
    t += 0.5
    put(Ev.RUN_ENDED, Source.ENGINE, reason=EndReason.COMPLETED, why="every node finished its steps", max_step=steps)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
    faults = "\n".join(f"  - {{kind: crash, target: 2, at_step: {s}}}" for s in crash_at)
    (run_dir / "scenario.yaml").write_text(SCENARIO % {"steps": steps, "every": every, "faults": faults})
    return len(lines)


def _digest(step: int) -> str:
    return hashlib.sha256(str(step).encode()).hexdigest()


# Runs `chaos report` as `python -m chaos` does, then prints its own resource usage as the last line of stderr.
_MEASURED = """
import json, resource, sys
from chaos.cli import main
try:
    code = main(sys.argv[1:])
finally:
    u = resource.getrusage(resource.RUSAGE_SELF)
    sys.stderr.write("\\n" + json.dumps([u.ru_utime + u.ru_stime, u.ru_maxrss]) + "\\n")
sys.exit(code)
"""


def _report(run_dir: Path, fmt: str) -> tuple[float, float, float, str, int]:
    """(wall s, CPU s, peak RSS MB, output, exit code) of ``chaos report`` in a child process of its own.

    The child measures itself (``RUSAGE_SELF``): ``RUSAGE_CHILDREN`` would also count the generator's child.
    """
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _MEASURED, "report", str(run_dir), "--format", fmt],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    cpu, maxrss_kb = json.loads(proc.stderr.strip().splitlines()[-1])
    return wall, cpu, maxrss_kb / 1024, proc.stdout + proc.stderr, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, nargs="+", default=[300_000],
                    help="history size(s); with several, also the cost of each further event (smallest to largest)")
    ap.add_argument("--format", nargs="+", default=["html"],
                    help="chaos report format(s): text, html, md, json, junit (each reported on the same history)")
    ap.add_argument("--repeat", type=int, default=1, help="reports per format and size; the medians are printed")
    ap.add_argument("--keep", default=None, help="write the run directories here instead of a temporary one")
    ap.add_argument("--synthesise-only", default=None, help=argparse.SUPPRESS)  # DIR: write one history, exit
    args = ap.parse_args()
    if args.synthesise_only:
        print(synthesise(Path(args.synthesise_only), args.events[0]))
        return 0
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="chaos-report-scale-"))
    measured: dict[str, list[tuple[int, float, float]]] = {}
    for n_events in sorted(args.events):
        run_dir = tmp / f"soak-{n_events}"
        n = int(subprocess.run([sys.executable, __file__, "--events", str(n_events), "--synthesise-only",
                                str(run_dir)], capture_output=True, text=True, check=True).stdout)
        size = (run_dir / "events.jsonl").stat().st_size
        print(f"history: {n} events, {size / 1e6:.1f} MB in {run_dir}")
        for fmt in args.format:
            runs = []
            for _ in range(max(1, args.repeat)):
                wall, cpu, peak_mb, out, code = _report(run_dir, fmt)
                if code not in (0, 1):
                    print(out[-2000:], file=sys.stderr)
                    return 2
                runs.append((wall, cpu, peak_mb))
            wall, cpu, peak_mb = (statistics.median(figure) for figure in zip(*runs, strict=True))
            of = f" (median of {len(runs)})" if len(runs) > 1 else ""
            print(f"chaos report --format {fmt}: {wall:.2f} s wall, {cpu:.2f} s CPU, peak RSS {peak_mb:.0f} MB{of}")
            measured.setdefault(fmt, []).append((n, cpu, peak_mb))
    for fmt, sizes in measured.items():
        if len(sizes) > 1:
            (n0, cpu0, mb0), (n1, cpu1, mb1) = sizes[0], sizes[-1]
            print(f"{fmt}: each further event ({n0} to {n1}): {(cpu1 - cpu0) / (n1 - n0) * 1e6:.1f} µs CPU, "
                  f"{(mb1 - mb0) * 1024 * 1024 / (n1 - n0):.0f} B of peak RSS")
    if not args.keep:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
