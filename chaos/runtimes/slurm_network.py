"""The slurm runtime's networking: how the nodes reach the engine, and how the hosts' networks are reached.

Two addresses matter on a Slurm cluster and neither is known before the allocation. The nodes report to the
engine's history channel, which must listen on an address of the login node that the compute hosts reach (the
interface routed towards the first allocated host, or ``cluster.slurm.channel_host``) and never on every interface
unasked. The hosts' networks (partition, isolate ...) need root there, which a user lacks: the container cluster's
agent (:mod:`chaos.cluster.agent`) runs the tools in a host's network namespace, and this module is how the runtime
finds and asks it, and sweeps the rules of runs that died mid-fault. Kept apart from the steps and the hosts so the
runtime's module reads as the Runtime interface, and the addressing rules are read in one place.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from typing import Any

from chaos.channel import listen
from chaos.cluster.agent import AgentError, ask, read_config
from chaos.cluster.netcmd import prefix
from chaos.cluster.netexec import leftover_rules
from chaos.machine import Check
from chaos.runtimes.base import Unsupported
from chaos.runtimes.slurm_commands import (
    NO_ROOT,
    SlurmOptions,
    _ip,
    agent_file,
    channel_bind,
    job_name,
    parse_jobs,
    parse_node_states,
    route_source,
    run_slurm,
)


def channel_check(options: SlurmOptions) -> Check | None:
    """``cluster.slurm.channel_host``, when given, is an address of this host (``chaos doctor``'s line), else None."""
    if options.channel_host is None:
        return None
    try:
        _, warning = channel_bind(options.channel_host, options.allow_any_address)
        return Check("slurm channel_host", True, warning or f"{options.channel_host} is this host's", "",
                     required=True)
    except ValueError as exc:
        return Check("slurm channel_host", False, str(exc), "give an address of this host the compute nodes reach, "
                     "or leave cluster.slurm.channel_host out", required=True)


def channel_addresses(options: SlurmOptions, first_host: str) -> tuple[str, str, str | None]:
    """(the address the nodes are given, the one the engine listens on, a warning or None), once the hosts are
    known. Checked again here: the scenario may have been judged on another machine (a dry run, --no-machine)."""
    given = options.channel_host
    if given is None:
        source = route_source(first_host)
        return source, source, None
    try:
        bind, warning = channel_bind(given, options.allow_any_address)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None
    unspecified = (ip := _ip(bind)) is not None and ip.is_unspecified
    return (route_source(first_host) if unspecified else given), bind, warning  # 0.0.0.0 reaches no one


def channel_socket(bind: str | None, port: int) -> socket.socket:
    """The channel listens on the engine's address towards the compute nodes (the interface the kernel routes to
    the first allocated host from), not on every interface: on a login node that is the cluster network, which the
    nodes reach; the run's token keeps out whatever else can reach that address."""
    assert bind is not None, "prepare() makes the allocation before the channel opens"
    return listen(bind, port)


def agent_config() -> dict[str, Any]:
    """The cluster agent's address, or Unsupported with why (a real cluster has no agent)."""
    try:
        return read_config(agent_file())
    except AgentError as exc:
        raise Unsupported(f"{NO_ROOT} ({exc})") from None


def net_enter(host: str) -> list[str]:
    """The prefix that runs a host tool in ``host``'s network namespace: the agent runs it there (as ``nsenter
    --net``) when it is one of the shapes network faults issue (chaos.cluster.netexec). The namespace is the
    host's, not the node's: every process of the host shares it, as on a real machine."""
    agent_config()  # Unsupported, with why, where there is no agent
    return prefix(agent_file(), host)


def net_by() -> str:
    config = agent_config()
    return f"the cluster agent at {config['address']}:{config['port']}"


def host_address(host: str) -> str:
    """The host's address on the cluster network (the plan holds only a placeholder), resolved on the login node
    the way the nodes resolve it."""
    return socket.gethostbyname(host)


def cleanup_rules(run_id: str | None) -> list[str]:
    """The iptables rules of runs that could not heal (their engine killed mid-fault), on every host, through the
    cluster agent: a rule is left while its run's allocation is pending or running (``squeue``, any user), and
    removed once it is gone or being cancelled. Where there is no agent there are no rules (a real cluster)."""
    try:
        config = read_config(agent_file())
        hosts = sorted(parse_node_states(run_slurm(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10).stdout))
        # a job being cancelled (CG, completing: the cleanup just scancelled it) is gone already
        live = {n for _, n, _ in parse_jobs(run_slurm(["squeue", "-h", "-t", "PD,R,S,CF", "-o", "%i|%j|%k"]).stdout)}
    except (AgentError, OSError, subprocess.TimeoutExpired):
        return []
    removed = []
    for host in hosts:
        try:
            saved = ask(config, "net", host, argv=["iptables-save", "-t", "filter"])
        except AgentError:
            continue  # a host that is down has no namespace left (its rules went with it)
        for rule_run, argv in leftover_rules(str(saved.get("stdout", ""))):
            if (run_id is not None and rule_run != run_id) or job_name(rule_run) in live:
                continue
            with contextlib.suppress(AgentError):
                if ask(config, "net", host, argv=argv).get("rc") == 0:
                    removed.append(f"iptables rule of {rule_run} on {host} ({' '.join(argv[3:])})")
    return removed
