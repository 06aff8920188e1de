"""What watching a job costs it: a no-fault ``chaos run`` against the very same job under bare ``torchrun``.

Both sides run the commands of one plan (``chaos run --dry-run --json``). The bare side is what a user runs without
torch-chaos: each node's ``python -m torch.distributed.run`` with the plan's torchrun arguments (not through
:mod:`chaos.agent_log`), without the engine's ``CHAOS_*`` environment, a plain checkpoint directory (no storage
layer), and no torch-chaos module in its process tree: the workload's ``from chaos import probe`` finds a stub
package (a no-op ``probe`` and a copy of the workload's own argument table, ``chaos/workload_args.py``), and the
script checks every bare process's loaded ``chaos`` modules came from that stub. The observed side is ``chaos run``
with its golden run off (a golden run is a second job, not overhead). They alternate in pairs (A,B then B,A), and
the script prints medians, the ratio of medians and the median of the per-pair ratios (n pairs) for

- the job: first node started to last node exited (the engine's own events on the observed side, the launcher's
  clock on the bare side), the figure the overhead goal is about (issue 36: <= 1.02);
- the command: the whole ``chaos run`` (engine start, plan, storage layer, teardown, analysis) against the bare
  launch, what a user waits for (<= 1.05);
- where the difference goes: CPU seconds of every process of each side, sampled every 0.5 s and grouped by role
  (engine, storage layer, agents, workers), medians per side. On a machine whose cores the job keeps busy, CPU the
  observer adds is time the job loses.

    flock /tmp/torch-chaos-machine.lock python benchmarks/observer_overhead.py --steps 600 --pairs 10

Run it alone on the machine (under the machine lock): other jobs change both sides unevenly.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
STUB_PROBE = "def __getattr__(name):\n    return lambda *args, **kwargs: None\n"
# Which part of a side each process is, by its command line (first match).
SAMPLE_S = 0.5
ROLES = (("storage layer", "chaos.storage"), ("engine", "chaos run"), ("agent", "torch.distributed.run"),
         ("agent", "chaos.agent_log"), ("worker", "train.py"))

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


def stub_package(scratch: Path) -> Path:
    """A ``chaos`` package holding only a no-op probe and the workload's argument table: what the shipped workload
    imports, with nothing of torch-chaos running."""
    root = scratch / "stub"
    (root / "chaos").mkdir(parents=True)
    (root / "chaos" / "__init__.py").write_text("")
    (root / "chaos" / "probe.py").write_text(STUB_PROBE)
    shutil.copy(REPO / "chaos" / "workload_args.py", root / "chaos" / "workload_args.py")
    return root


class Sampler:
    """CPU seconds (user + system) of processes and all their descendants, by role.

    One pass over /proc per sample, every ``SAMPLE_S``, on both sides alike: psutil's ``children(recursive=True)``
    scans every process of the machine per call, which the bare side (one root per node) paid once per node and
    the observed side (one root) once."""

    def __init__(self, roots: list[int]):
        self.roots = set(roots)
        self.last: dict[int, tuple[str, float]] = {}

    def sample(self) -> None:
        procs = {}
        for proc in psutil.process_iter(["pid", "ppid"]):
            procs[proc.info["pid"]] = (proc, proc.info["ppid"])
        ours = set(self.roots)
        grew = True
        while grew:  # descendants of the roots, whatever their depth
            grew = False
            for pid, (_, ppid) in procs.items():
                if pid not in ours and ppid in ours:
                    ours.add(pid)
                    grew = True
        for pid in ours:
            if pid not in procs:
                continue
            proc = procs[pid][0]
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    cmd = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            role = next((r for r, key in ROLES if key in cmd), "other")
            known = self.last.get(pid)
            if known is not None and known[0] != "other":
                role = known[0]  # an exiting process reads with no command line: it keeps the role it had
            self.last[pid] = (role, times.user + times.system)

    def by_role(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for role, cpu in self.last.values():
            out[role] += cpu
        return dict(out)


def bare(scenario: Path, scratch: Path) -> tuple[float, float, dict[str, float]]:
    """One bare torchrun job: (job seconds, command seconds: the same, CPU by role)."""
    nodes = plan(scenario, scratch / "plan")
    stub = stub_package(scratch)
    ckpt = scratch / "bare-checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    procs, logs = [], []
    t0 = time.monotonic()
    for node in nodes:
        argv = list(node["argv"])
        if argv[1] != "-c" or "chaos.agent_log" not in argv[2]:
            raise SystemExit(f"unexpected node command (not through chaos.agent_log): {argv[:3]}")
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[3:]]
        if "--checkpoint-dir" in argv:
            argv[argv.index("--checkpoint-dir") + 1] = str(ckpt)
        env = {k: v for k, v in node["env"].items() if not k.startswith("CHAOS_")}
        env = {**_base_env(), **env, "PYTHONPATH": str(stub)}
        log = open(scratch / f"bare-{node['name']}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=scratch))
    sampler = Sampler([p.pid for p in procs])
    checked = False
    while any(p.poll() is None for p in procs):
        sampler.sample()
        if not checked:
            checked = _only_the_stub(procs, stub)
        time.sleep(SAMPLE_S)
    took = time.monotonic() - t0
    codes = [p.wait() for p in procs]
    for log in logs:
        log.close()
    if any(codes):
        raise SystemExit(f"bare torchrun failed (exit codes {codes}); logs in {scratch}")
    return took, took, sampler.by_role()


def _only_the_stub(procs: list[subprocess.Popen[str]], stub: Path) -> bool:
    """Whether a bare worker was seen and every file of a ``chaos`` package any bare process has open or mapped
    is the stub's (raises when one is not). True once a worker was seen."""
    seen_worker = False
    for root in procs:
        try:
            tree = [psutil.Process(root.pid), *psutil.Process(root.pid).children(recursive=True)]
        except psutil.Error:
            continue
        for proc in tree:
            try:
                cmd = " ".join(proc.cmdline())
                if "chaos.agent_log" in cmd or "-m chaos" in cmd:
                    raise SystemExit(f"a torch-chaos process in the bare side's tree: {cmd}")
                if "train.py" in cmd:
                    seen_worker = True
                    paths = [m.path for m in proc.memory_maps()] + [f.path for f in proc.open_files()]
            except psutil.Error:
                continue
            if "train.py" in cmd:
                foreign = [x for x in paths if "/chaos/" in x and not x.startswith(str(stub))]
                if foreign:
                    raise SystemExit(f"torch-chaos files in a bare worker: {foreign}")
    return seen_worker


def observed(scenario: Path, scratch: Path) -> tuple[float, float, dict[str, float]]:
    """One ``chaos run``: (job seconds from its history, command seconds, CPU by role)."""
    out = scratch / "runs"
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(scenario), "--json", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = Sampler([proc.pid])
    while proc.poll() is None:
        sampler.sample()
        time.sleep(SAMPLE_S)
    stdout, stderr = proc.communicate()
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"chaos run failed ({proc.returncode}): {stdout[-2000:]}{stderr[-2000:]}")
    run_dir = out / json.loads(stdout)["run_id"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    started = min(e["t"] for e in events if e.get("event") == "node_started")
    exited = max(e["t"] for e in events if e.get("event") == "node_exited")
    return exited - started, took, sampler.by_role()


def probe_cost(n: int = 20000) -> tuple[float, float]:
    """The probe's cost per ``step_completed`` on the calling thread, microseconds: off (no ``CHAOS_EVENTS``) and
    appending to a history file (the channel's cost per event: benchmarks/channel_cost.py)."""
    code = f"""
import os, sys, tempfile, time
sys.path.insert(0, {str(REPO)!r})
from chaos import probe
def per_call():
    t = time.perf_counter()
    for i in range({n}):
        probe.step_completed(i, loss=0.5, samples=16)
    return (time.perf_counter() - t) / {n} * 1e6
off = per_call()
os.environ["CHAOS_EVENTS"] = os.path.join(tempfile.mkdtemp(), "events.jsonl")
print(off, per_call())
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOS_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    off, on = (float(x) for x in done.stdout.split())
    return off, on


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("CHAOS_")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=10)
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, float, dict[str, float]]]] = {"bare": [], "chaos": []}
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="torch-chaos-overhead-") as tmp:
        scenario = Path(tmp) / "observer-overhead.yaml"
        scenario.write_text(SCENARIO.format(steps=args.steps, nodes=args.nodes))
        for i in range(args.pairs):
            for side, fn in (("bare", bare), ("chaos", observed)) if i % 2 == 0 else (("chaos", observed),
                                                                                      ("bare", bare)):
                scratch = Path(tmp) / f"{side}-{i}"
                scratch.mkdir()
                runs[side].append(fn(scenario, scratch))
                print(f"  {side:5} #{i + 1}: job {runs[side][-1][0]:6.2f} s, command {runs[side][-1][1]:6.2f} s",
                      flush=True)
    print(f"{args.nodes} nodes x {args.steps} steps, n={args.pairs} interleaved pairs (medians; load average "
          f"{load0[0]:.1f} before, {os.getloadavg()[0]:.1f} after, {psutil.cpu_count()} cores):")
    for j, what in enumerate(("job", "command")):
        b = statistics.median(r[j] for r in runs["bare"])
        c = statistics.median(r[j] for r in runs["chaos"])
        pair = statistics.median(rc[j] / rb[j] for rb, rc in zip(runs["bare"], runs["chaos"], strict=True))
        print(f"  {what:8} bare torchrun {b:6.2f} s   chaos run {c:6.2f} s   ratio {c / b:.3f} "
              f"(median of per-pair ratios {pair:.3f})")
    roles = sorted({role for side in runs.values() for r in side for role in r[2]})
    print("  CPU seconds by role (median per run; chaos minus bare is what observing adds):")
    for role in roles:
        b = statistics.median(r[2].get(role, 0.0) for r in runs["bare"])
        c = statistics.median(r[2].get(role, 0.0) for r in runs["chaos"])
        print(f"    {role:14} bare {b:6.2f}   chaos {c:6.2f}   added {c - b:+6.2f}")
    off, on = probe_cost()
    print(f"  probe per step_completed: {off:.1f} us off, {on:.1f} us writing the history "
          f"({(on - off) * args.steps / 1e6 * 1000:.1f} ms of CPU per rank over {args.steps} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
