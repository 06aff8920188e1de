"""A history channel server in a process of its own, for the hostile-input tests (tests/test_channel_limits.py):
its stderr shows any traceback, its thread count is its own, and its descriptor limit can be lowered.

``python tests/channel_server.py TOKEN OUT [NOFILE]``: listens on 127.0.0.1, prints ``host:port`` and its pid,
writes every event (and every limit reached, as ``{"limit": what}``) to OUT as a JSON line, lowers its
descriptor limit to NOFILE once listening (if given). On a line on stdin it prints the count of its threads; at
the end of stdin, its stats, and exits. ``chaos`` comes from PYTHONPATH (the code under test).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading

from chaos.channel import ChannelServer, listen


def main() -> int:
    token, out = sys.argv[1], sys.argv[2]
    lock = threading.Lock()
    fh = open(out, "a", buffering=1)

    def write(event: dict[str, object]) -> None:
        with lock:
            fh.write(json.dumps(event) + "\n")

    def on_limit(what: str, detail: str) -> None:
        write({"limit": what, "detail": detail})

    try:
        server = ChannelServer(listen("127.0.0.1", 0), write, lambda **fields: None, token=token,
                               on_limit=on_limit)
    except TypeError:  # a version without on_limit (the tests' check that they fail on the old code)
        server = ChannelServer(listen("127.0.0.1", 0), write, lambda **fields: None, token=token)
    server.start()
    if len(sys.argv) > 3:
        nofile = int(sys.argv[3])
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    print(server.address, os.getpid(), flush=True)
    for _ in sys.stdin:
        print(threading.active_count(), flush=True)
    print(json.dumps(server.stop(drain_s=0.2)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
