"""The cluster agent's ``net`` action: iptables/tc inside one compute container's network namespace, nothing else.

Network faults edit a node's namespace with the host's tools (:mod:`chaos.net.impair`). On the container Slurm
cluster the engine is the unprivileged user ``chaos`` on the login node, so it cannot; the agent on the docker host
can. Handing it an arbitrary argv would hand every holder of the token root on the docker host (``iptables
--modprobe=CMD`` runs CMD, ``tc -batch FILE`` reads host files, ``tc exec bpf ... run CMD`` runs one, ``ip netns
exec`` enters anything), so the agent takes exactly the command *shapes* :class:`chaos.net.impair.Impairment`
issues, and :func:`validate` refuses every other one before anything runs:

- ``iptables-save -t filter`` (the snapshot);
- ``iptables -w -I CHAIN 1 | -A CHAIN | -D CHAIN`` + a rule built only from the matches network faults use
  (``-s/-d ADDR``, ``-i/-o IFACE``, ``-p tcp|udp``, ``--dport/--sport PORT``, ``-m comment|tcp|udp|statistic``,
  ``--mode random``, ``--probability P``) that must carry a ``torch-chaos:RUN:FAULT`` comment and jump to
  ``DROP``: the agent can add and remove torch-chaos's own DROP rules and no other rule;
- ``tc qdisc show dev IF``, ``tc qdisc del dev IF root``, ``tc qdisc add dev IF root netem|tbf`` with numeric
  parameters only.

Every argument is a short token of a small alphabet (no ``/`` but in an address's prefix length, no ``..``, no
spaces, no quotes); there is no shell. The agent runs the validated argv as ``nsenter --net=<the container's
namespace> -- TOOL ...`` where the namespace is the one of *this* cluster's compute container (pinned by a
descriptor opened before its pid is checked again), so it can only ever change the network of a compute host of
its own cluster, and only in the ways above.

The engine's side is :mod:`chaos.cluster.netcmd` (``python -m chaos.cluster.netcmd --config FILE --host cN -- TOOL
ARGS``): a command prefix, like ``nsenter ... --``, that :class:`~chaos.net.impair.Impairment` puts before each
tool, so the fault kinds run unchanged.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable

TOOLS = ("iptables", "iptables-save", "tc")
MAX_ARGS = 40
MAX_ARG = 160  # characters: the longest real one is a torch-chaos comment (it names the run)
MAX_OUTPUT = 65536  # bytes of stdout/stderr returned
EXEC_TIMEOUT_S = 15.0
TOKEN_RE = re.compile(r"^[A-Za-z0-9_.:%+=,-]+$")  # an argument's alphabet: no '/', no quotes, no spaces
ADDR_RE = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(/(\d{1,2}))?$")
IFACE_RE = re.compile(r"^[a-z][a-z0-9]{0,14}$")
CHAIN_RE = re.compile(r"^(INPUT|OUTPUT|FORWARD)$")
COMMENT_RE = re.compile(r"^torch-chaos:[A-Za-z0-9_.-]{1,128}:[A-Za-z0-9_.@-]{1,16}$")
PORT_RE = re.compile(r"^\d{1,5}$")
NUMBER_RE = re.compile(r"^\d{1,9}(\.\d{1,9})?(ms|us|s|%|bit|kbit|mbit|gbit|b|kb|k|mb|m|gb|g)?$", re.IGNORECASE)
# The rule options network faults use, and what each one's value must be (None: the option takes none).
RULE_OPTIONS: dict[str, Callable[[str], bool] | None] = {
    "-s": lambda v: _address(v), "-d": lambda v: _address(v),
    "-i": lambda v: bool(IFACE_RE.match(v)), "-o": lambda v: bool(IFACE_RE.match(v)),
    "-p": lambda v: v in ("tcp", "udp"),
    "--dport": lambda v: bool(PORT_RE.match(v)) and 0 < int(v) < 65536,
    "--sport": lambda v: bool(PORT_RE.match(v)) and 0 < int(v) < 65536,
    "-m": lambda v: v in ("comment", "tcp", "udp", "statistic"),
    "--comment": lambda v: bool(COMMENT_RE.match(v)),
    "--mode": lambda v: v == "random",
    "--probability": lambda v: bool(re.match(r"^(0(\.\d{1,9})?|1(\.0{1,9})?)$", v)),
    "-j": lambda v: v == "DROP",
}
QDISCS = {"netem": ("delay", "loss"), "tbf": ("rate", "burst", "latency")}


class Refused(ValueError):
    """The argv is not one of the shapes the agent runs; the message says which part."""


def _address(value: str) -> bool:
    m = ADDR_RE.match(value)
    return bool(m) and all(int(m.group(i)) < 256 for i in range(1, 5)) and (m.group(6) is None or
                                                                           int(m.group(6)) <= 32)


def validate(argv: object) -> list[str]:
    """``argv`` as a list of str when it is a command the agent runs; :class:`Refused` (with why) otherwise."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise Refused("argv must be a non-empty list of strings")
    if len(argv) > MAX_ARGS:
        raise Refused(f"argv has more than {MAX_ARGS} arguments")
    for arg in argv:
        if not 0 < len(arg) <= MAX_ARG:
            raise Refused(f"an argument is empty or longer than {MAX_ARG} characters")
        if arg != arg.strip() or (not TOKEN_RE.match(arg) and not _address(arg)) or ".." in arg:
            raise Refused(f"argument {arg[:40]!r} has characters the agent does not pass on")
    tool, args = argv[0], argv[1:]
    if tool not in TOOLS:
        raise Refused(f"the tool must be one of {', '.join(TOOLS)} (a bare name; the agent's PATH finds it)")
    if tool == "iptables-save":
        if args != ["-t", "filter"]:
            raise Refused("iptables-save takes exactly -t filter")
    elif tool == "iptables":
        _iptables(args)
    else:
        _tc(args)
    return list(argv)


def _iptables(args: list[str]) -> None:
    if args[:1] != ["-w"]:
        raise Refused("iptables must start with -w")
    rest = args[1:]
    if len(rest) >= 3 and rest[0] == "-I" and CHAIN_RE.match(rest[1]) and rest[2] == "1":
        spec = rest[3:]
    elif len(rest) >= 2 and rest[0] in ("-A", "-D") and CHAIN_RE.match(rest[1]):
        spec = rest[2:]
    else:
        raise Refused("iptables takes -I CHAIN 1, -A CHAIN or -D CHAIN (CHAIN: INPUT, OUTPUT, FORWARD)")
    seen: list[str] = []
    i = 0
    while i < len(spec):
        option = spec[i]
        check = RULE_OPTIONS.get(option)
        if check is None or i + 1 >= len(spec) or not check(spec[i + 1]):
            raise Refused(f"rule option {option!r} is not one the agent passes on, or its value is not allowed")
        seen.append(option)
        i += 2
    if "--comment" not in seen or seen[-1] != "-j":
        raise Refused("a rule must carry a torch-chaos comment and end with -j DROP")


def _tc(args: list[str]) -> None:
    if len(args) < 4 or args[0] != "qdisc" or args[2] != "dev" or not IFACE_RE.match(args[3]):
        raise Refused("tc takes qdisc show|add|del dev IFACE ...")
    verb, rest = args[1], args[4:]
    if verb == "show" and not rest:
        return
    if verb == "del" and rest == ["root"]:
        return
    if verb == "add" and len(rest) >= 2 and rest[0] == "root" and rest[1] in QDISCS:
        words = QDISCS[rest[1]]
        if all(a in words or NUMBER_RE.match(a) for a in rest[2:]):
            return
    raise Refused("tc takes qdisc show dev IF, qdisc del dev IF root, or qdisc add dev IF root netem|tbf with "
                  "numeric parameters")


def nsenter_run(pid: int, argv: list[str], pid_now: Callable[[], int | None]) -> tuple[int, str, str]:
    """Run a validated ``argv`` in the network namespace of process ``pid`` (a container's init). The namespace is
    pinned by a descriptor first and the container's pid read again after (``pid_now``): a container that died
    in between could have its pid reused by anything, even a process in the host's own namespace."""
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if pid_now() != pid:
            return 1, "", "the container's process changed while the agent entered it (restarted?); try again"
        proc = subprocess.run(["nsenter", f"--net=/proc/self/fd/{fd}", "--", *argv], capture_output=True,
                              timeout=EXEC_TIMEOUT_S, check=False, pass_fds=(fd,), stdin=subprocess.DEVNULL,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
    finally:
        os.close(fd)
    out = proc.stdout[:MAX_OUTPUT].decode("utf-8", "replace")
    err = proc.stderr[:MAX_OUTPUT].decode("utf-8", "replace")
    return proc.returncode, out, err


def leftover_rules(saved: str) -> list[tuple[str, list[str]]]:
    """``iptables-save -t filter`` output to (run id, the ``iptables -w -D ...`` argv that removes it) for each
    torch-chaos rule in it: what ``chaos cleanup`` removes after a run that could not heal (its engine killed)."""
    found = []
    for line in saved.splitlines():
        if not line.startswith("-A ") or "torch-chaos:" not in line:
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        comment = words[words.index("--comment") + 1] if "--comment" in words[:-1] else ""
        if COMMENT_RE.match(comment):
            found.append((comment.split(":")[1], ["iptables", "-w", "-D", *words[1:]]))
    return found
