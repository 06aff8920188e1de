"""``python -m chaos.storage``: the storage layer's processes.

* ``serve --mount DIR --events FILE [--control DIR] [--backing DIR]``: the server the engine starts on its own host
  (:class:`~chaos.storage.layer.StorageLayer`);
* ``host --mount DIR --events FILE --run-id R -- COMMAND...``: a node's command run through a layer on the node's
  own host (:mod:`chaos.storage.hostlayer`); ``host-serve`` is that layer's server;
* ``check-host [--visible FILE]``: whether this host can serve the layer (and sees FILE): a runtime asks each host
  before the first node starts;
* ``sweep [--run-id R]``: unmount this host's torch-chaos mounts (teardown and ``chaos cleanup`` on a node's host);
* ``build-libfuse``: build libfuse 3.17 into the user's cache, for ``storage.passthrough``
  (:mod:`chaos.storage.libfuse`).
"""

from __future__ import annotations

import argparse
import os
import sys

from chaos.storage import hostlayer, libfuse
from chaos.storage.mounts import fuse_problem


def _common(s: argparse.ArgumentParser) -> None:
    s.add_argument("--mount", required=True, help="the directory the job uses (mounted over)")
    s.add_argument("--events", required=True, help="the run's events.jsonl (written by `serve`; read back by both)")
    s.add_argument("--run-id", default="run", help="marks the mount: fsname torch-chaos-<run-id>")
    s.add_argument("--pause-on", default="", help="comma-separated events to hold until acknowledged")
    s.add_argument("--progress-regex", help="a command workload's progress_regex (the step of a save)")
    s.add_argument("--passthrough", action="store_true", help="kernel passthrough of file data (storage.passthrough; "
                   "needs root and libfuse >= 3.17 as FUSE_LIBRARY_PATH)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.storage")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve a checkpoint directory through the recording FUSE passthrough")
    _common(s)
    s.add_argument("--backing", help="where the bytes live (default: the mount directory itself, underneath)")
    s.add_argument("--control", help="directory of rules.json / applied (storage faults)")
    s.add_argument("--log", action="append", default=[], metavar="NODE=PATH", help="a node's log, read for steps")
    s.add_argument("--engine-pid", type=int, help="operations of this process are neither recorded nor ruled")
    h = sub.add_parser("host", help="run a node's command through a storage layer on this host")
    _common(h)
    h.add_argument("node_command", nargs=argparse.REMAINDER, help="-- then the node's command")
    hs = sub.add_parser("host-serve", help="the server of a layer on a node's host (started by `host`)")
    _common(hs)
    hs.add_argument("--parent", type=int, required=True, help="the node's command: unmount once it is gone")
    hs.add_argument("--offer-fd", type=int, help="with --passthrough: write INIT's word here (the wrapper's pipe)")
    c = sub.add_parser("check-host", help="whether this host can serve the storage layer")
    c.add_argument("--visible", help="a file that must be visible here (the shared run directory)")
    c.add_argument("--passthrough", action="store_true", help="also whether it can do storage.passthrough")
    w = sub.add_parser("sweep", help="unmount this host's torch-chaos mounts")
    w.add_argument("--run-id", help="only this run's (default: every one of this user's)")
    sub.add_parser("build-libfuse", help="build libfuse 3.17 (for storage.passthrough) into the user's cache")
    args = parser.parse_args(argv)
    if args.command == "build-libfuse":
        try:
            path = libfuse.build()
        except libfuse.BuildError as exc:
            print(f"build-libfuse: {exc}", file=sys.stderr)
            return 1
        print(f"libfuse {libfuse.VERSION}: {path}")
        return 0
    pause_on = frozenset(e for e in getattr(args, "pause_on", "").split(",") if e)
    if args.command == "serve":
        # lazy: mfusepy, only for the server (the other subcommands run where FUSE may be absent)
        from chaos.storage.server import serve

        try:
            serve(args.mount, args.events, args.control, args.backing, args.run_id, pause_on, args.engine_pid,
                  progress_regex=args.progress_regex, logs=dict(item.split("=", 1) for item in args.log),
                  passthrough=args.passthrough)
        except (OSError, RuntimeError) as exc:
            print(f"storage layer: cannot serve {args.mount}: {exc}", file=sys.stderr)
            return 1
        return 0

    if args.command == "host":
        command = args.node_command[1:] if args.node_command[:1] == ["--"] else args.node_command
        return hostlayer.host(args.mount, args.events, args.run_id, command, args.pause_on, args.progress_regex,
                              args.passthrough)
    if args.command == "host-serve":
        try:
            hostlayer.serve_host(args.mount, args.events, args.run_id, args.parent, pause_on, args.progress_regex,
                                 args.passthrough, args.offer_fd)
        except (OSError, RuntimeError) as exc:
            print(f"torch-chaos storage layer: cannot serve {args.mount}: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.command == "check-host":
        problems = [p for p in (fuse_problem(),) if p]
        if args.passthrough:
            problems += [p for p in libfuse.passthrough_problems() if p not in problems]
        if args.visible and not os.path.exists(args.visible):
            problems.append(f"{args.visible} is not visible here")
        for problem in problems:
            print(f"{os.uname().nodename}: {problem}", file=sys.stderr)
        return 1 if problems else 0
    for path in hostlayer.sweep(args.run_id):
        print(f"{os.uname().nodename}: unmounted {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
