"""``python -m chaos.storage serve --mount DIR --events FILE [--control DIR] [--backing DIR]``: the storage
layer's server process (started by the engine's :class:`~chaos.storage.layer.StorageLayer`)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.storage")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve a checkpoint directory through the recording FUSE passthrough")
    s.add_argument("--mount", required=True, help="the directory the job uses (mounted over)")
    s.add_argument("--backing", help="where the bytes live (default: the mount directory itself, underneath)")
    s.add_argument("--events", required=True, help="the run's events.jsonl")
    s.add_argument("--control", help="directory of rules.json / applied (storage faults)")
    s.add_argument("--run-id", default="run", help="marks the mount: fsname torch-chaos-<run-id>")
    s.add_argument("--pause-on", default="", help="comma-separated events to hold until acknowledged")
    s.add_argument("--progress-regex", help="a command workload's progress_regex (the step of a save)")
    s.add_argument("--log", action="append", default=[], metavar="NODE=PATH", help="a node's log, read for steps")
    s.add_argument("--engine-pid", type=int, help="operations of this process are neither recorded nor ruled")
    args = parser.parse_args(argv)
    from chaos.storage.server import serve

    try:
        serve(args.mount, args.events, args.control, args.backing, args.run_id,
              frozenset(e for e in args.pause_on.split(",") if e), args.engine_pid,
              progress_regex=args.progress_regex, logs=dict(item.split("=", 1) for item in args.log))
    except (OSError, RuntimeError) as exc:
        print(f"storage layer: cannot serve {args.mount}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
