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

- time to first step: launch to the first ``step_completed`` (the probe's event on the observed side; on the bare
  side the stub probe notes the moment of its first call in a file, nothing more); then the job split at its steps:
  ``steps`` (first to last ``step_completed``: what the probe and the engine's polling cost the training) and
  ``tail`` (last step to the job's end: the workers' last save and exit, the agents' shutdown; the stub notes its
  last step's time);
- which part of observing costs what: the observed command split into start-up (launch to first node started), the
  job and the end (last node exited to exit: teardown, analysis, report), with the engine's CPU in each, and the CPU
  observing adds to the agents (the :mod:`chaos.agent_log` handler) and to the workers (the probe's import and its
  events), beside the probe's cost per ``step_completed`` measured on its own.

    python benchmarks/observer_overhead.py --pairs 10    # the quickstart's job: 3 nodes x 1000 steps
    python benchmarks/observer_overhead.py --renderer --pairs 6    # chaos run with its report renderer vs without

Each pair runs under the machine lock (``--lock``, default ``$TORCH_CHAOS_MACHINE_LOCK`` or
/tmp/torch-chaos-machine.lock where it exists), so other real clusters do not run beside it; the lock is released
between pairs. Torch-chaos's bytecode is compiled first (``compileall``), as an installed package's is: with
``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every run would compile the engine's and the probe's
sources again, a cost a user's install does not have.
"""

from __future__ import annotations

import argparse
import compileall
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import psutil
from machine_lock import machine_lock  # benchmarks/: run as a script, its folder is on sys.path

from chaos.reports.renderer import SWITCH_ENV

REPO = Path(__file__).resolve().parents[1]
# A no-op probe, except that the first step_completed of a process appends the time to $BENCH_FIRST_STEP, and every
# one overwrites the time in a file of its own process in $BENCH_LAST_STEP (one pwrite, ~2 us: the workload leaves
# by os._exit, so nothing can be written at exit).
STUB_PROBE = """\
import os, time
_seen = []
_fd = []
def step_completed(*args, **kwargs):
    now = time.time()
    if not _seen:
        _seen.append(1)
        with open(os.environ["BENCH_FIRST_STEP"], "a") as f:
            f.write(f"{now}\\n")
        _fd.append(os.open(os.path.join(os.environ["BENCH_LAST_STEP"], str(os.getpid())), os.O_WRONLY | os.O_CREAT))
    os.pwrite(_fd[0], b"%20.6f" % now, 0)
def __getattr__(name):
    return lambda *args, **kwargs: None
"""
THREADS = 20  # idle threads beside the probe's caller when its cost is measured (a gloo DDP worker has ~20)
FOREIGN = ("chaos.agent_log", "-m chaos", "chaos.storage")
# Which part of a side each process is, by its command line (first match).
SAMPLE_S = 0.5
ROLES = (("storage layer", "chaos.storage"), ("report renderer", "chaos.reports.render_server"),
         ("engine", "chaos run"), ("agent", "torch.distributed.run"), ("agent", "chaos.agent_log"),
         ("worker", "train.py"))

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
    """CPU seconds (user + system) of processes and all their descendants, by role, over time.

    One pass over /proc per sample, every ``SAMPLE_S``, on both sides alike: psutil's ``children(recursive=True)``
    scans every process of the machine per call, which the bare side (one root per node) paid once per node and
    the observed side (one root) once. Every command line seen is kept, so the bare side's whole tree can be checked
    for torch-chaos processes."""

    def __init__(self, roots: list[int]):
        self.roots = set(roots)
        self.last: dict[int, tuple[str, float]] = {}
        self.series: list[tuple[float, dict[str, float]]] = []  # (wall time, CPU by role so far)
        self.cmdlines: dict[int, str] = {}

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
            if cmd:
                self.cmdlines.setdefault(pid, cmd)
            role = next((r for r, key in ROLES if key in cmd), "other")
            known = self.last.get(pid)
            if known is not None and known[0] != "other":
                role = known[0]  # an exiting process reads with no command line: it keeps the role it had
            self.last[pid] = (role, times.user + times.system)
        self.series.append((time.time(), self.by_role()))

    def by_role(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for role, cpu in self.last.values():
            out[role] += cpu
        return dict(out)

    def at(self, t: float, role: str) -> float:
        """A role's CPU seconds by wall time ``t`` (the last sample at or before it)."""
        cpu = 0.0
        for when, roles in self.series:
            if when > t:
                break
            cpu = roles.get(role, 0.0)
        return cpu


def bare(scenario: Path, scratch: Path) -> dict:
    """One bare torchrun job: job and command seconds (the same), launch to first step, CPU by role."""
    nodes = plan(scenario, scratch / "plan")
    stub = stub_package(scratch)
    ckpt = scratch / "bare-checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    first, last = scratch / "first-step", scratch / "last-step"
    last.mkdir()
    procs, logs = [], []
    t0, wall0 = time.monotonic(), time.time()
    for node in nodes:
        argv = list(node["argv"])
        if argv[1] != "-c" or "chaos.agent_log" not in argv[2]:
            raise SystemExit(f"unexpected node command (not through chaos.agent_log): {argv[:3]}")
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[3:]]
        if "--checkpoint-dir" in argv:
            argv[argv.index("--checkpoint-dir") + 1] = str(ckpt)
        env = {k: v for k, v in node["env"].items() if not k.startswith("CHAOS_")}
        env = {**_base_env(), **env, "PYTHONPATH": str(stub), "BENCH_FIRST_STEP": str(first),
               "BENCH_LAST_STEP": str(last)}
        log = open(scratch / f"bare-{node['name']}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=scratch))
    sampler = Sampler([p.pid for p in procs])
    checked = [False]

    def check() -> None:
        if not checked[0]:
            checked[0] = _only_the_stub(procs, stub)

    exits = wait_sampling(procs, sampler, check)
    took = max(exits) - t0
    codes = [p.wait() for p in procs]
    for log in logs:
        log.close()
    if any(codes):
        raise SystemExit(f"bare torchrun failed (exit codes {codes}); logs in {scratch}")
    foreign = [cmd for cmd in sampler.cmdlines.values()
               if any(key in cmd for key in FOREIGN) or str(REPO / "chaos") in cmd]
    if foreign:
        raise SystemExit(f"a torch-chaos process in the bare side's tree: {foreign[0]}")
    if not checked[0]:
        raise SystemExit("no bare worker was seen: the stub check did not run")
    first_step = min(float(x) for x in first.read_text().split()) - wall0
    last_step = max(float(p.read_text()) for p in last.iterdir()) - wall0
    return {"job": took, "command": took, "first_step": first_step, "steps": last_step - first_step,
            "tail": took - last_step, "cpu": sampler.by_role(),
            "processes": len(sampler.cmdlines)}


def wait_sampling(procs: list[subprocess.Popen[str]], sampler: Sampler,
                  each_sample: Callable[[], None] | None = None) -> list[float]:
    """Wait for every process, sampling CPU every SAMPLE_S meanwhile; returns each one's exit time (monotonic),
    taken by a thread blocked in its wait(), not by the sampling loop (whose 0.5 s would round each side's time
    up by a different amount: the bare side's job is its command, the observed side's job comes from events)."""
    exits: list[float] = [0.0] * len(procs)
    done = threading.Event()
    left = [len(procs)]
    lock = threading.Lock()

    def waiter(i: int, proc: subprocess.Popen[str]) -> None:
        proc.wait()
        exits[i] = time.monotonic()
        with lock:
            left[0] -= 1
            if not left[0]:
                done.set()

    for i, proc in enumerate(procs):
        threading.Thread(target=waiter, args=(i, proc), daemon=True).start()
    while not done.is_set():
        sampler.sample()
        if each_sample is not None:
            each_sample()
        done.wait(SAMPLE_S)
    return exits


def _only_the_stub(procs: list[subprocess.Popen[str]], stub: Path) -> bool:
    """Whether a bare worker was seen and every file of a ``chaos`` package any bare worker has open or mapped
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
                if "train.py" not in cmd:
                    continue
                seen_worker = True
                paths = [m.path for m in proc.memory_maps()] + [f.path for f in proc.open_files()]
            except psutil.Error:
                continue
            foreign = [x for x in paths if "/chaos/" in x and not x.startswith(str(stub))]
            if foreign:
                raise SystemExit(f"torch-chaos files in a bare worker: {foreign}")
    return seen_worker


def observed(scenario: Path, scratch: Path, renderer: bool = True) -> dict:
    """One ``chaos run``: job seconds from its history, command seconds, launch to first step, its phases and the
    engine's CPU in each, CPU by role. ``renderer=False``: report.html drawn by the engine itself."""
    out = scratch / "runs"
    env = {**_base_env(), **({} if renderer else {SWITCH_ENV: "off"})}
    t0, wall0 = time.monotonic(), time.time()
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(scenario), "--json", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    sampler = Sampler([proc.pid])
    stdout, stderr = "", ""

    def read_output() -> None:  # a full pipe would stall the engine
        nonlocal stdout, stderr
        stdout, stderr = proc.communicate()

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    (exited_at,) = wait_sampling([proc], sampler)
    reader.join()
    took, wall1 = exited_at - t0, time.time() - (time.monotonic() - exited_at)
    sampler.series.append((wall1, sampler.by_role()))
    if proc.returncode != 0:
        raise SystemExit(f"chaos run failed ({proc.returncode}): {stdout[-2000:]}{stderr[-2000:]}")
    run_dir = out / json.loads(stdout)["run_id"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    started = min(e["t"] for e in events if e.get("event") == "node_started")
    exited = max(e["t"] for e in events if e.get("event") == "node_exited")
    first_step = min(e["t"] for e in events if e.get("event") == "step_completed")
    last_step = max(e["t"] for e in events if e.get("event") == "step_completed")
    engine = [sampler.at(started, "engine"), sampler.at(exited, "engine"), sampler.at(wall1, "engine")]
    return {"job": exited - started, "command": took, "first_step": first_step - wall0,
            "steps": last_step - first_step, "tail": exited - last_step, "cpu": sampler.by_role(),
            "start_s": started - wall0, "end_s": wall1 - exited,
            "engine_start": engine[0], "engine_job": engine[1] - engine[0], "engine_end": engine[2] - engine[1]}


def probe_cost(n: int = 20000) -> tuple[float, float]:
    """The probe's cost per ``step_completed`` on the calling thread, microseconds: off (no ``CHAOS_EVENTS``) and
    appending to a history file (the channel's cost per event: benchmarks/channel_cost.py), in a process with a
    worker's number of threads (the probe reads each thread's schedstat for ``cpu_s``/``cpu_wait_s``: ~3 us a
    thread, most of its cost per step)."""
    code = f"""
import os, sys, tempfile, threading, time
sys.path.insert(0, {str(REPO)!r})
idle = threading.Event()
for _ in range({THREADS}):  # a DDP worker's threads: the probe sums each one's schedstat per step
    threading.Thread(target=idle.wait, daemon=True).start()
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
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_base_env())
    off, on = (float(x) for x in done.stdout.split())
    return off, on


def _base_env() -> dict[str, str]:
    """This process's environment without the engine's variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CHAOS_")}


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _default_lock() -> str | None:
    path = os.environ.get("TORCH_CHAOS_MACHINE_LOCK") or "/tmp/torch-chaos-machine.lock"
    return path if os.path.exists(path) else None


def report(runs: dict[str, list[dict]], args: argparse.Namespace, load: tuple[float, float]) -> None:
    """Medians, ratios and where the difference goes."""
    bare_runs, chaos_runs = runs["bare"], runs["chaos"]
    n = len(bare_runs)
    print(f"{args.nodes} nodes x {args.steps} steps, n={n} interleaved pairs (medians; load average {load[0]:.1f} "
          f"before, {load[1]:.1f} after, {psutil.cpu_count()} cores; each pair under {args.lock or 'no lock'}):")
    _ratios(("bare torchrun", bare_runs), ("chaos run", chaos_runs), ("job", "command", "first_step", "steps", "tail"))
    roles = sorted({role for side in runs.values() for r in side for role in r["cpu"]})
    print("  CPU seconds by role (median per run; chaos minus bare is what observing adds):")
    added = {}
    for role in roles:
        b = statistics.median(r["cpu"].get(role, 0.0) for r in bare_runs)
        c = statistics.median(r["cpu"].get(role, 0.0) for r in chaos_runs)
        added[role] = c - b
        print(f"    {role:14} bare {b:6.2f}   chaos {c:6.2f}   added {c - b:+6.2f}")
    off, on = probe_cost()
    ranks = args.nodes
    print("  where observing's cost goes (medians of the observed runs):")
    print(f"    start-up, launch -> first node started: {_median(chaos_runs, 'start_s'):5.2f} s wall, engine "
          f"{_median(chaos_runs, 'engine_start'):5.2f} s CPU (the command only, not the job)")
    print(f"    engine during the job (polling every 20 ms, the history channel, heartbeat): "
          f"{_median(chaos_runs, 'engine_job'):5.2f} s CPU "
          f"({_median(chaos_runs, 'engine_job') / _median(chaos_runs, 'job') * 100:.1f}% of one core)")
    print(f"    agents (chaos.agent_log's logging handler): {added.get('agent', 0.0):+5.2f} s CPU over {ranks} agents")
    print(f"    workers (the probe's import and events): {added.get('worker', 0.0):+5.2f} s CPU over {ranks} workers; "
          f"per step_completed {off:.1f} us off, {on:.1f} us writing the history with {THREADS + 1} threads "
          f"({(on - off) * args.steps * ranks / 1e6:.3f} s of CPU over {args.steps} steps x {ranks} ranks)")
    print(f"    report renderer (matplotlib's import at nice 19 during the job, report.html at the end): "
          f"{added.get('report renderer', 0.0):+5.2f} s CPU")
    print(f"    end, last node exited -> exit (teardown, analysis, report): {_median(chaos_runs, 'end_s'):5.2f} s "
          f"wall, engine {_median(chaos_runs, 'engine_end'):5.2f} s CPU (the command only)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000, help="steps (default: the quickstart's 1000)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--lock", default=_default_lock(), help="flock held for each pair ('' for none)")
    ap.add_argument("--renderer", action="store_true",
                    help="instead: chaos run with its report renderer against chaos run without it "
                         f"({SWITCH_ENV}=off: the engine draws report.html after the job)")
    args = ap.parse_args()
    compileall.compile_dir(str(REPO / "chaos"), quiet=1)  # as an installed package has it
    sides = (("without", functools.partial(observed, renderer=False)), ("with", observed)) if args.renderer \
        else (("bare", bare), ("chaos", observed))
    runs: dict[str, list[dict]] = {name: [] for name, _ in sides}
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="torch-chaos-overhead-") as tmp:
        scenario = Path(tmp) / "observer-overhead.yaml"
        scenario.write_text(SCENARIO.format(steps=args.steps, nodes=args.nodes))
        for i in range(args.pairs):
            order = sides
            with machine_lock(args.lock):
                for side, fn in order if i % 2 == 0 else order[::-1]:
                    scratch = Path(tmp) / f"{side}-{i}"
                    scratch.mkdir()
                    runs[side].append(fn(scenario, scratch))
                    r = runs[side][-1]
                    print(f"  {side:7} #{i + 1}: job {r['job']:6.2f} s, command {r['command']:6.2f} s, "
                          f"to step 1 {r['first_step']:5.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    if args.renderer:
        report_renderer(runs, args, (load0, os.getloadavg()[0]))
    else:
        report(runs, args, (load0, os.getloadavg()[0]))
    return 0


def report_renderer(runs: dict[str, list[dict]], args: argparse.Namespace, load: tuple[float, float]) -> None:
    """What the report renderer changes: the same chaos run with it against without it."""
    without, with_ = runs["without"], runs["with"]
    print(f"{args.nodes} nodes x {args.steps} steps, chaos run with the report renderer against without it, "
          f"n={len(without)} interleaved pairs (medians; load average {load[0]:.1f} before, {load[1]:.1f} after):")
    _ratios(("without", without), ("with", with_), ("job", "command", "first_step", "end_s"))


LABELS = {"job": "job", "command": "command", "first_step": "to step 1", "steps": "steps", "tail": "tail",
          "end_s": "end"}


def _ratios(base: tuple[str, list[dict]], other: tuple[str, list[dict]], figures: tuple[str, ...]) -> None:
    """One line per figure: both sides' medians, the ratio of medians and the median of the per-pair ratios."""
    (base_name, base_runs), (other_name, other_runs) = base, other
    for what in figures:
        a, b = _median(base_runs, what), _median(other_runs, what)
        pair = statistics.median(rb[what] / ra[what] for ra, rb in zip(base_runs, other_runs, strict=True))
        print(f"  {LABELS[what]:9} {base_name} {a:6.2f} s   {other_name} {b:6.2f} s   ratio {b / a:.3f} "
              f"(median of per-pair ratios {pair:.3f})")


if __name__ == "__main__":
    sys.exit(main())
