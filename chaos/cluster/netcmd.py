"""The engine's side of the cluster agent's ``net`` action: a command prefix, like ``nsenter --net=... --``.

:class:`~chaos.net.impair.Impairment` puts :func:`prefix` before each iptables/tc command, so the network fault
kinds run unchanged on the container Slurm cluster; :func:`main` sends the command to the agent on the docker
host, which runs it only if it is one of the shapes :mod:`chaos.cluster.netexec` accepts. Kept apart from
netexec (the agent's side) so that the agent and its client do not import each other.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from chaos.cluster.agent import AgentError, ask, read_config
from chaos.cluster.netexec import EXEC_TIMEOUT_S


def prefix(config_path: str, host: str) -> list[str]:
    """What :meth:`chaos.runtimes.slurm.SlurmRuntime.net_enter` returns: tools after it run on ``host``."""
    return [sys.executable, "-m", "chaos.cluster.netcmd", "--config", config_path, "--host", host, "--"]


def main(argv: list[str] | None = None) -> int:
    """Send one command to the agent; print its stdout/stderr and exit with its status (2: the agent refused it
    or could not be reached, with the reason on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m chaos.cluster.netcmd")
    parser.add_argument("--config", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    try:
        answer = ask(read_config(args.config), "net", args.host, argv=command, timeout=EXEC_TIMEOUT_S + 5)
    except AgentError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.write(str(answer.get("stdout", "")))
        sys.stderr.write(str(answer.get("stderr", "")))
    rc = answer.get("rc")
    return rc if isinstance(rc, int) and 0 <= rc < 256 else 2


if __name__ == "__main__":
    sys.exit(main())
