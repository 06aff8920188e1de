"""The co-located allocator of the memory faults:
``python -m chaos.faults.allocator BYTES HOLD_S ENGINE_PID [OOM_COUNTER_FILE]``.

Waits for a line on stdin (the engine moves it into the node's memory cgroup first), then maps BYTES in 4 MiB
anonymous chunks, touching every page so the memory is really charged, holds it HOLD_S seconds and exits. Given
the cgroup's file with the ``oom_kill`` counter, it stops growing as soon as the counter moves (read every 64
pages): it asks for no more than it takes to make the kernel kill (page cache the kernel can reclaim first means
that amount is not known in advance). It never outlives its engine (checked every chunk and every 0.2 s while
holding): an engine killed mid-fault leaves no allocator.
Standard library only; prints what it has allocated so the node's fault log says how far it got.
"""

from __future__ import annotations

import mmap
import os
import sys
import time

CHUNK = 4 << 20
PAGE = 4096
# How often (bytes touched) the counter is read: every page touched after a kill, before the victim's memory is freed,
# can make the kernel kill again, so the allocator stops within 64 pages of the first kill, not within a chunk.
LOOK = 64 * PAGE


def _engine_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _oom_kills(path: str | None) -> int:
    if path is None:
        return 0
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except OSError:
        pass
    return 0


def main(argv: list[str]) -> int:
    nbytes, hold_s, engine = int(argv[0]), float(argv[1]), int(argv[2])
    counter = argv[3] if len(argv) > 3 else None
    sys.stdin.readline()
    kills = _oom_kills(counter)
    held: list[mmap.mmap] = []
    total = 0
    t0 = time.monotonic()
    while total < nbytes:
        if not _engine_alive(engine):
            return 0
        # An anonymous mapping, not a bytearray: a bytearray is zero-filled (charged) whole at creation, so no
        # check between its pages could stop it; a mapping's pages are charged one by one, as they are touched.
        chunk = mmap.mmap(-1, min(CHUNK, nbytes - total))
        killed = False
        touched = 0
        for i in range(0, len(chunk), PAGE):
            chunk[i] = 1
            touched = i + PAGE
            if counter is not None and i % LOOK == 0 and _oom_kills(counter) != kills:
                killed = True
                break
        held.append(chunk)
        total += min(touched, len(chunk))
        if killed:
            print(f"the OOM killer acted after {total >> 20} MiB: stop growing", flush=True)
            break
        if total % (64 << 20) < CHUNK:
            print(f"allocated {total >> 20} MiB after {time.monotonic() - t0:.3f}s", flush=True)
    print(f"allocated {total >> 20} MiB in {time.monotonic() - t0:.3f}s; holding {hold_s:g}s", flush=True)
    end = time.monotonic() + hold_s
    while time.monotonic() < end and _engine_alive(engine):
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
