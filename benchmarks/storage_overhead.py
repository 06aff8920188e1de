"""What the storage layer costs: the same work through the FUSE mount and on the plain disk, in interleaved pairs.

Three measurements, each a median of interleaved pairs (A,B then B,A, so drift and neighbours hit both sides), each
printed with its n and the ratio of the medians (layer / plain):

- ``save``: one checkpoint save as a job makes it: ``torch.save`` of a ``--mb`` MB state dict to a temporary name,
  ``fsync``, ``os.replace`` onto its final name (both sides fsync: a save that is not on the disk is not saved);
  each part printed on its own (serialize into memory, write, fsync, rename);
- ``raw``: ``dd if=/dev/zero bs=1M count=--raw-mb conv=fsync`` through the mount and on the disk, in MB/s;
- ``job`` (``--job-pairs N``, 0 skips it): a save-heavy ``chaos run`` (2 nodes, ~8.7 MB checkpoints every 5 steps,
  60 saves) with the layer on against the same scenario with ``storage: {layer: off}``: the job's time from the
  history (first node started to last node exited). Real clusters: run it under the machine lock.

The server is the real one (``python -m chaos.storage serve``), recording to a scratch history; the writer is a
separate process with ``CHAOS_NODE`` set, as a node's is. Both directories are on the same disk (``--dir``).

    python benchmarks/storage_overhead.py --mb 9 --pairs 21 --raw-mb 200 --raw-pairs 7
    python benchmarks/storage_overhead.py --pairs 0 --raw-pairs 0 --job-pairs 5

``--passthrough`` runs the layer side with kernel FUSE passthrough (``storage.passthrough``; root, Linux >= 6.9,
libfuse >= 3.17 from ``python -m chaos.storage build-libfuse`` or ``$TORCH_CHAOS_LIBFUSE``): the server gets
``--passthrough`` and prints what passed through (its write calls: 0 when every byte did); the job's layer side is
``storage: {layer: fuse, passthrough: true, watch: true}`` (the no-effect disk_full fault is a data-path fault the
passthrough policy refuses; ``watch`` puts the layer under the whole run instead).

``--attribute`` repeats the save and dd pairs with the server's sha256 replaced by a no-op (attribution only: such
a layer records wrong digests), which splits the layer's cost into its hashing and the rest. Each job pair runs
under the machine lock (``--lock``, default ``$TORCH_CHAOS_MACHINE_LOCK`` or /tmp/torch-chaos-machine.lock).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine_lock import machine_lock  # benchmarks/: run as a script, its folder is on sys.path

from chaos.storage.mounts import is_mounted, unmount

WRITER = """
import io, json, os, subprocess, sys, time, torch
mb, pairs, raw_mb, raw_pairs, fuse_dir, plain_dir = (float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                                     int(sys.argv[4]), sys.argv[5], sys.argv[6])
state = {"w": torch.randn(int(mb * 1024 * 1024 // 4))}
out = {"fuse_save": [], "plain_save": [], "fuse_raw": [], "plain_raw": []}

def save(d, i):
    # one save as a job makes it, split: serialize (torch.save into memory), write, fsync, rename (+ close)
    t0 = time.perf_counter()
    buf = io.BytesIO()
    torch.save(state, buf)
    t1 = time.perf_counter()
    tmp = f"{d}/ckpt_{i}.pt.tmp"
    with open(tmp, "wb") as f:
        f.write(buf.getbuffer())
        f.flush()
        t2 = time.perf_counter()
        os.fsync(f.fileno())
        t3 = time.perf_counter()
    os.replace(tmp, f"{d}/ckpt_{i}.pt")
    t4 = time.perf_counter()
    if i >= 3:
        os.unlink(f"{d}/ckpt_{i - 3}.pt")  # keep 3, as a job does
    return [t4 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3]

def raw(d, i):
    # dd with fsync: raw_mb MiB of zeros in 1 MiB blocks, fsync before dd exits; MB/s
    t = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={d}/raw_{i}", "bs=1M", f"count={raw_mb}", "conv=fsync"],
                   check=True, capture_output=True)
    took = time.perf_counter() - t
    os.unlink(f"{d}/raw_{i}")
    return raw_mb * (1 << 20) / 1e6 / took

for what, n, fn in (("save", pairs, save), ("raw", raw_pairs, raw)):
    for i in range(n):
        order = (("fuse", fuse_dir), ("plain", plain_dir))
        for where, d in (order if i % 2 == 0 else order[::-1]):
            out[f"{where}_{what}"].append(fn(d, i))
print(json.dumps(out))
"""

SAVE_HEAVY = """\
name: storage-overhead-{layer}
description: 2 nodes saving ~8.7 MB every 5 steps (benchmarks/storage_overhead.py)
cluster: {{mode: elastic, nodes: 2, min_nodes: 2}}
workload:
  name: ddp-mlp
  args: {{steps: 300, checkpoint_every: 5, hidden: 1020}}
storage: {storage}
faults: {faults}
checks: {{golden: false}}
limits: {{deadline_s: 600, stall_timeout_s: 60}}
"""
# A shipped workload with the probe gets the layer only for a storage fault: one on files the job never writes,
# in force for the last 5 steps, puts the layer under the whole run and changes nothing the job does.
NO_EFFECT_FAULT = "[{kind: disk_full, at_step: 295, paths: 'never-written/*'}]"
PASSTHROUGH_STORAGE = "{layer: fuse, passthrough: true, watch: true}"


def passthrough_env() -> dict[str, str]:
    """The server's environment for ``--passthrough``: the libfuse >= 3.17 found (else exit saying why)."""
    from chaos.storage import libfuse

    library, problems = libfuse.readiness()
    if problems:
        sys.exit("--passthrough: " + "; ".join(problems))
    return {**os.environ, "FUSE_LIBRARY_PATH": str(library)}


def pairs_line(name: str, unit: str, fuse: list[float], plain: list[float], higher_is_better: bool = False) -> str:
    """Medians of both sides, the ratio of the medians and the median of the per-pair ratios, with n."""
    mf, mp = statistics.median(fuse), statistics.median(plain)
    per_pair = statistics.median(f / p for f, p in zip(fuse, plain, strict=True))
    what = "layer/plain (higher is better)" if higher_is_better else "layer/plain"
    return (f"  {name}: plain {mp:.1f} {unit}, layer {mf:.1f} {unit}; {what} {mf / mp:.3f} "
            f"(median of per-pair ratios {per_pair:.3f}), n={len(fuse)} pairs")


# Attribution only (``--attribute``): the same server with sha256 replaced by a no-op, so the run shows what the
# layer costs without its digests (FUSE round trips, copies, Python); the difference is the hashing's share.
NO_HASH_SERVER = """
import runpy, sys, types
import chaos.storage.digests as digests
class NoHash:
    def update(self, data): pass
    def hexdigest(self): return "0" * 64
digests.hashlib = types.SimpleNamespace(sha256=NoHash)
sys.argv = ["chaos.storage", *sys.argv[1:]]
runpy.run_module("chaos.storage", run_name="__main__")
"""
SAVE_PARTS = ("total", "serialize", "write", "fsync", "rename")


def micro(args: argparse.Namespace, no_hash: bool = False) -> None:
    """The save and dd pairs through one mount of the real server (``no_hash``: its sha256 a no-op)."""
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        mount, plain, events = root / "ckpt", root / "plain", root / "events.jsonl"
        control = root / "control"
        for d in (mount, plain, root / "events.jsonl.acks", control):
            d.mkdir()
        events.touch()
        start = [sys.executable, "-c", NO_HASH_SERVER] if no_hash else [sys.executable, "-m", "chaos.storage"]
        extra = ["--passthrough", "--control", str(control)] if args.passthrough else []
        server = subprocess.Popen([*start, "serve", "--mount", str(mount),
                                   "--events", str(events), "--run-id", "benchmark", *extra],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env=passthrough_env() if args.passthrough else None)
        status = control / "passthrough.json"
        try:
            deadline = time.monotonic() + 10
            while not is_mounted(str(mount)) or (args.passthrough and not status.exists()):
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit("the storage layer did not mount")
                time.sleep(0.02)
            out = subprocess.run([sys.executable, "-c", WRITER, str(args.mb), str(args.pairs), str(args.raw_mb),
                                  str(args.raw_pairs), str(mount), str(plain)],
                                 env={**os.environ, "CHAOS_NODE": "node0"}, capture_output=True, text=True,
                                 check=True).stdout
            cpu = _cpu_s(server.pid)
        finally:
            unmount(str(mount))
            server.wait(10)
        times = json.loads(out)
        lines = [json.loads(line)["event"] for line in events.open()]
        passed = json.loads(status.read_text()) if args.passthrough else None
    what = "ATTRIBUTION ONLY, the server's sha256 a no-op" if no_hash else "the real server"
    if passed is not None:
        what += f", PASSTHROUGH: {passed}"
    print(f"in {args.dir} (layer and plain directory on the same disk; {what}), interleaved pairs:")
    if args.pairs:
        for j, part in enumerate(SAVE_PARTS):
            print(pairs_line(f"save of {args.mb} MB, {part}", "ms", [t[j] * 1000 for t in times["fuse_save"]],
                             [t[j] * 1000 for t in times["plain_save"]]))
    if args.raw_pairs:
        print(pairs_line(f"dd {args.raw_mb} MiB (bs=1M conv=fsync)", "MB/s", times["fuse_raw"],
                         times["plain_raw"], higher_is_better=True))
    print(f"  the server's CPU over the whole measurement: {cpu:.2f} s (user + system)")
    finished = lines.count("checkpoint_save_finished")
    print(f"  {len(lines)} history lines recorded ({finished} checkpoint_save_finished)")


def _cpu_s(pid: int) -> float:
    """A live process's CPU seconds so far (user + system, its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def job_time(scenario: Path, out: Path) -> tuple[float, float]:
    """One ``chaos run``: first node started to last node exited, and its steps phase (first step_completed to the
    last: without the start-up's +-0.6 s), from its history."""
    # not check=True: the fault that never matches may fail its verdict; the job's time is what is measured
    subprocess.run([sys.executable, "-m", "chaos", "run", str(scenario), "--out", str(out)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started, exited, saves, steps = [], [], [], []
    [history] = out.glob("*/events.jsonl")
    with open(history) as f:
        for line in f:
            event = json.loads(line)
            if event.get("event") == "node_started":
                started.append(event["t"])
            elif event.get("event") == "node_exited":
                exited.append(event["t"])
            elif event.get("event") == "step_completed":
                steps.append(event["t"])
            elif event.get("event") == "run_started" and event.get("environment", {}).get("storage_passthrough"):
                print("    run_started.environment.storage_passthrough: true", file=sys.stderr)
            elif event.get("event") == "checkpoint_save_finished" and event.get("bytes"):
                saves.append((event["source"], event["bytes"]))
    for status in out.glob("*/.storage/passthrough.json"):  # the passthrough server's own count at unmount
        print(f"    passthrough: {status.read_text()}", file=sys.stderr)
    for source in sorted({src for src, _ in saves}):
        sizes = [b for src, b in saves if src == source]
        mb = statistics.median(sizes) / 1e6
        print(f"    {len(sizes)} checkpoint_save_finished from {source}, median {mb:.1f} MB",
              file=sys.stderr)
    return max(exited) - min(started), (max(steps) - min(steps)) if steps else float("nan")


def job(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        times: dict[str, list[float]] = {"fuse": [], "off": []}
        steps: dict[str, list[float]] = {"fuse": [], "off": []}
        for layer in times:
            if layer == "off":
                storage, faults = "{layer: off}", "[]"
            elif args.passthrough:
                storage, faults = PASSTHROUGH_STORAGE, "[]"
            else:
                storage, faults = "{layer: fuse}", NO_EFFECT_FAULT
            (root / f"{layer}.yaml").write_text(SAVE_HEAVY.format(layer=layer, storage=storage, faults=faults))
        for i in range(args.job_pairs):
            with machine_lock(args.lock):
                for layer in (("fuse", "off") if i % 2 == 0 else ("off", "fuse")):
                    took, phase = job_time(root / f"{layer}.yaml", root / f"run-{layer}-{i}")
                    times[layer].append(took)
                    steps[layer].append(phase)
                    print(f"  pair {i}: {layer} {took:.2f} s, steps phase {phase:.2f} s "
                          f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    side = "fuse with passthrough" if args.passthrough else "fuse"
    print(f"save-heavy job (2 nodes, ~8.7 MB checkpoint every 5 steps, 60 saves), chaos run, layer {side} vs off:")
    print(pairs_line("job time", "s", times["fuse"], times["off"]))
    print(pairs_line("steps phase (first to last step_completed)", "s", steps["fuse"], steps["off"]))


def _default_lock() -> str | None:
    path = os.environ.get("TORCH_CHAOS_MACHINE_LOCK") or "/tmp/torch-chaos-machine.lock"
    return path if os.path.exists(path) else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=9.0, help="state dict size of one save (MB)")
    p.add_argument("--pairs", type=int, default=21, help="interleaved save pairs (0 skips)")
    p.add_argument("--raw-mb", type=int, default=200)
    p.add_argument("--raw-pairs", type=int, default=7, help="interleaved raw-throughput pairs (0 skips)")
    p.add_argument("--job-pairs", type=int, default=0, help="interleaved save-heavy chaos run pairs (0 skips)")
    p.add_argument("--dir", default=os.environ.get("TMPDIR", "/var/tmp"),
                   help="where both directories live (a disk: /dev/shm would hide the disk's own cost)")
    p.add_argument("--attribute", action="store_true",
                   help="also run the save and dd pairs with the server's sha256 a no-op (attribution only)")
    p.add_argument("--lock", default=_default_lock(), help="flock held for each job pair ('' for none)")
    p.add_argument("--passthrough", action="store_true",
                   help="the layer side with kernel FUSE passthrough (storage.passthrough; root, libfuse 3.17)")
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, kernel {os.uname().release}")
    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "chaos"), quiet=1)  # as an install has it
    if args.pairs or args.raw_pairs:
        micro(args)
        if args.attribute:
            micro(args, no_hash=True)
    if args.job_pairs:
        job(args)


if __name__ == "__main__":
    main()
