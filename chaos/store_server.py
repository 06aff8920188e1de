"""A dedicated c10d rendezvous store: the TCPStore that torchrun would otherwise host inside node 0's agent.

Running it as its own process (every agent then has ``is_host=false``) means a node crash no longer takes the
job's store with it. It serves until it is killed.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from datetime import timedelta


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    from torch.distributed import TCPStore

    store = TCPStore(args.host, args.port, is_master=True, multi_tenant=True, wait_for_workers=False,
                     timeout=timedelta(seconds=60))
    print(f"c10d store listening on {args.host}:{args.port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while store is not None:
        time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
