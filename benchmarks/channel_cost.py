"""What the history channel costs a training process, against the file it replaced.

One process emits ``--events`` step events through :mod:`chaos.probe`, first appending to a file (``CHAOS_EVENTS``
only: the old path), then over the channel to an engine-side server in another process (``CHAOS_CHANNEL``), as
a rank does under ``chaos run``. Printed: the probe's cost per event on the calling thread (median of
``--repeat`` rounds), and for the channel the latency from the event's ``t`` to the engine writing its line
(median and 99th percentile; one host, one clock), plus one held event's round trip (send, engine ack, resume).

    python benchmarks/channel_cost.py --events 20000 --repeat 3
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

REPO = Path(__file__).resolve().parents[1]

SERVER = """
import sys, time, threading
sys.path.insert(0, {repo!r})
from chaos.channel import ChannelServer, listen
from chaos.history import HistoryWriter
w = HistoryWriter(__import__("pathlib").Path({path!r}))
def write(e):
    e["t_written"] = time.time()
    w.write_record(e)
    if "id" in e:
        threading.Timer(0, server.ack, [e["id"]]).start()
server = ChannelServer(listen("127.0.0.1", 0), write, lambda **f: w.write("clock_sync", **f))
server.start()
print(server.address, flush=True)
sys.stdin.read()
server.stop()
"""

EMITTER = """
import sys, time
sys.path.insert(0, {repo!r})
from chaos import probe
n = {events}
probe.step_completed(0, loss=0.5)  # connect (channel) / open (file) outside the timing
t0 = time.perf_counter()
for i in range(1, n + 1):
    probe.emit("step_completed", step=i, loss=0.5, samples=16, duration_s=0.01)
per = (time.perf_counter() - t0) / n
t0 = time.perf_counter()
probe.step_completed(n + 1, loss=0.5)  # held (CHAOS_PAUSE_AT_STEPS) when the channel is on
held = time.perf_counter() - t0
print(per, held)
"""


def emit(env: dict[str, str], events: int) -> tuple[float, float]:
    done = subprocess.run([sys.executable, "-c", EMITTER.format(repo=str(REPO), events=events)], env=env,
                          capture_output=True, text=True, check=True)
    per, held = done.stdout.split()
    return float(per), float(held)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("CHAOS_")}
    with tempfile.TemporaryDirectory() as tmp:
        file_costs, chan_costs, holds, latencies = [], [], [], []
        for r in range(a.repeat):
            path = Path(tmp) / f"file-{r}.jsonl"
            file_costs.append(emit({**base, "CHAOS_EVENTS": str(path)}, a.events)[0])
            hist = Path(tmp) / f"chan-{r}.jsonl"
            server = subprocess.Popen([sys.executable, "-c", SERVER.format(repo=str(REPO), path=str(hist))],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert server.stdout is not None and server.stdin is not None
            address = server.stdout.readline().strip()
            per, held = emit({**base, "CHAOS_EVENTS": str(hist), "CHAOS_CHANNEL": address,
                              "CHAOS_SPOOL_DIR": str(Path(tmp) / "spool"),
                              "CHAOS_PAUSE_AT_STEPS": str(a.events + 1)}, a.events)
            chan_costs.append(per)
            holds.append(held)
            time.sleep(0.5)
            server.stdin.close()
            server.wait(timeout=30)
            for line in hist.read_text().splitlines():
                e = json.loads(line)
                if e.get("event") == "step_completed" and "t_written" in e:
                    latencies.append(e["t_written"] - e["t"])
        latencies.sort()
        print(f"probe, file:    {statistics.median(file_costs) * 1e6:.1f} µs/event")
        print(f"probe, channel: {statistics.median(chan_costs) * 1e6:.1f} µs/event "
              f"(spool write + send; {len(latencies)} events)")
        print(f"event → engine writes it: median {statistics.median(latencies) * 1e6:.0f} µs, "
              f"p99 {latencies[int(len(latencies) * 0.99)] * 1e6:.0f} µs")
        print(f"held event round trip (send, ack, resume): median {statistics.median(holds) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
