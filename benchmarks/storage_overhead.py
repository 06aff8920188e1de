"""What the storage layer costs a checkpoint: ``torch.save`` of one state dict through the FUSE mount vs to a plain
directory on the same disk, alternated, median of ``--repeat`` saves each (and the same for ``torch.load``).

The server is the real one (``python -m chaos.storage serve``), recording to a scratch history; the writer is a
separate process with ``CHAOS_NODE`` set, as a node's is. The issue's lab figure was ~70 ms per 50 MB.

    python benchmarks/storage_overhead.py --mb 50 --repeat 7
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

from chaos.storage.mounts import is_mounted, unmount

WRITER = """
import json, sys, time, torch
mb, repeat, fuse_dir, plain_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
state = {"w": torch.randn(mb * 1024 * 1024 // 4)}
out = {"fuse_save": [], "plain_save": [], "fuse_load": [], "plain_load": []}
for i in range(repeat):
    for where, d in (("fuse", fuse_dir), ("plain", plain_dir)):
        t = time.perf_counter()
        torch.save(state, f"{d}/ckpt_{i}.pt")
        out[f"{where}_save"].append(time.perf_counter() - t)
for i in range(repeat):
    for where, d in (("fuse", fuse_dir), ("plain", plain_dir)):
        t = time.perf_counter()
        torch.load(f"{d}/ckpt_{i}.pt")
        out[f"{where}_load"].append(time.perf_counter() - t)
print(json.dumps(out))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=50)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"),
                   help="where both directories live (a disk; /dev/shm isolates the layer's own cost)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        mount, plain, events = root / "ckpt", root / "plain", root / "events.jsonl"
        for d in (mount, plain, root / "events.jsonl.acks"):
            d.mkdir()
        events.touch()
        server = subprocess.Popen([sys.executable, "-m", "chaos.storage", "serve", "--mount", str(mount),
                                   "--events", str(events), "--run-id", "benchmark"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not is_mounted(str(mount)):
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit("the storage layer did not mount")
                time.sleep(0.02)
            out = subprocess.run([sys.executable, "-c", WRITER, str(args.mb), str(args.repeat), str(mount),
                                  str(plain)], env={**os.environ, "CHAOS_NODE": "node0"}, capture_output=True,
                                 text=True, check=True).stdout
        finally:
            unmount(str(mount))
            server.wait(10)
        times = json.loads(out)
        lines = sum(1 for _ in events.open())
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    best = {k: min(v) * 1000 for k, v in times.items()}
    print(f"{args.mb} MB state dict in {args.dir}, {args.repeat} of each, alternated (ms; median, and best):")
    for op in ("save", "load"):
        print(f"  torch.{op}: plain {med[f'plain_{op}']:.0f} / {best[f'plain_{op}']:.0f}, through the storage layer "
              f"{med[f'fuse_{op}']:.0f} / {best[f'fuse_{op}']:.0f}, overhead "
              f"{med[f'fuse_{op}'] - med[f'plain_{op}']:+.0f} / {best[f'fuse_{op}'] - best[f'plain_{op}']:+.0f}")
    print(f"  {lines} history lines recorded")


if __name__ == "__main__":
    main()
