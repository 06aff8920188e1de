"""The Slurm runtime's words to Slurm: ``cluster.slurm``'s options and their checks, the ``salloc``/``srun`` lines
the runtime issues, the parsers of what ``salloc``/``squeue``/``sinfo`` print, the history channel's address
towards the compute hosts, and the environment the steps and helpers get. Plain functions of their arguments (no
allocation, no process; :func:`run_slurm` alone runs a command, the one way the runtime's modules call a Slurm
tool), so :mod:`chaos.runtimes.slurm` (the runtime itself) and its parts (:mod:`~chaos.runtimes.slurm_steps`,
:mod:`~chaos.runtimes.slurm_hosts`, :mod:`~chaos.runtimes.slurm_network`) read as what they do, and these are
tested without Slurm.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import subprocess
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator

from chaos.cluster.spec import AGENT_FILE, state_dir
from chaos.marks import TREE_VAR
from chaos.plan import REPO_ROOT
from chaos.spec import Strict

JOB_PREFIX = "torch-chaos-"
HOST_PLACEHOLDER = "{slurm-host:%s}"
CHANNEL_PLACEHOLDER = "{slurm-channel}"
TOOLS = ("salloc", "srun", "scancel", "squeue", "scontrol", "sinfo")
# Flags the runtime sets itself: an extra_args entry giving one of them would change what the runtime relies on.
OWN_FLAGS = ("-N", "--nodes", "--no-shell", "--no-kill", "-k", "-J", "--job-name", "--comment", "-w", "--nodelist",
             "-I", "--immediate")
SHORT_WITH_VALUE = set("AbBcCdDFGJLmMnNpqStwx")  # salloc's short options that take a value (the rest of a cluster)
TIME_RE = re.compile(r"^(\d+|\d+:\d{2}|\d+:\d{2}:\d{2}|\d+-\d+|\d+-\d+:\d{2}|\d+-\d+:\d{2}:\d{2}|UNLIMITED|INFINITE)$")
POLL_S = 1.0  # how often the observer asks Slurm about the hosts (sinfo: ~10 ms)
STARTING_POLL_S = 0.2  # how often it asks about steps while one started and is not listed yet (its start's resolution)
HELPER_TIMEOUT_S = 30.0
AGENT_FILE_ENV = "TORCH_CHAOS_AGENT_FILE"  # where the cluster agent's address is, if not the container cluster's
NO_ROOT = ("losing a host needs root on it: a user on a real cluster has none; the container cluster's agent "
           "provides it (chaos cluster up)")
# The network faults the slurm runtime takes (through the cluster agent) are those of DROP rules alone
# (FaultKind.drop_rules_only), measured on the container cluster. The qdisc/NFQUEUE ones would pass the agent's
# allowlist (netem, tbf) or not (the delayer is a process in the namespace, which the agent never starts), and none
# is measured there: refused at validation.
NO_ROOT_NET = ("network faults need root on the hosts (iptables/tc in their network): a user on a real cluster has "
               "none; the container cluster's agent provides it (chaos cluster up)")


def agent_file() -> str:
    return os.environ.get(AGENT_FILE_ENV) or AGENT_FILE


class SlurmOptions(Strict):
    """``cluster.slurm``: where and how the allocation is made (``salloc``'s own options)."""

    partition: str | None = Field(None, description="salloc --partition (default: the cluster's default partition)")
    account: str | None = Field(None, description="salloc --account")
    time: str = Field("00:30:00", description="salloc --time, the allocation's wall-clock limit (Slurm's format: "
                      "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)")
    spares: int = Field(0, ge=0, le=64, description="hosts allocated beyond cluster.nodes; a replaced node's new "
                        "step goes to a free spare")
    extra_args: list[str] = Field(default_factory=list, description="more salloc options, as separate arguments "
                                  "(e.g. [--exclusive, --mem=0]); not the ones the runtime sets itself")
    wait_s: int | None = Field(None, ge=1, description="give up when Slurm has not granted the allocation within "
                               "this many seconds (salloc --immediate); default: wait as long as the queue takes "
                               "(Ctrl-C cancels the request)")
    python: str | None = Field(None, description="the interpreter on the compute nodes (default: the engine's own, "
                               "which a shared filesystem makes the same path everywhere)")
    allow_any_address: bool = Field(False, description="let channel_host be 0.0.0.0 or :: (every interface of this "
                                    "host: anyone who reaches any of them may try the run's token); a warning is "
                                    "recorded, and the nodes are given the routed address")
    channel_host: str | None = Field(None, description="the engine's address the compute nodes reach, an address "
                                     "of this host (default: the address this host routes to the first allocated "
                                     "host from); never 0.0.0.0 or :: unless allow_any_address is true")

    @field_validator("time")
    @classmethod
    def _time(cls, value: str) -> str:
        if not TIME_RE.match(value):
            raise ValueError(f"{value!r} is not a Slurm time limit; write MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                             "D-HH:MM:SS (e.g. 00:30:00)")
        return value

    @field_validator("channel_host")
    @classmethod
    def _channel_host(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        why = channel_host_problem(value, bool(info.data.get("allow_any_address")))
        if why is not None:
            raise ValueError(why)
        return value

    @field_validator("extra_args")
    @classmethod
    def _extra(cls, value: list[str]) -> list[str]:
        own_long = [f for f in OWN_FLAGS if f.startswith("--")]
        for arg in value:
            flag = arg.split("=", 1)[0]
            # salloc reads long options with getopt_long, which takes any unambiguous prefix (--job-n=x is
            # --job-name): a prefix of one the runtime sets would rename the job, and cleanup would not find it
            taken = flag if flag in OWN_FLAGS else next(
                (f for f in own_long if flag.startswith("--") and len(flag) > 3 and f.startswith(flag)), None)
            if taken is None and flag.startswith("-") and not flag.startswith("--"):
                taken = _own_short(flag[1:])  # a cluster of short options: -vN4, -Jname
            if taken is not None:
                raise ValueError(f"{arg!r}: the runtime sets {taken} itself (nodes come from cluster.nodes and "
                                 "cluster.slurm.spares; the job's name and comment identify it for cleanup; "
                                 "--no-shell and --no-kill are always given)")
        return value


# A host name (RFC 1123 labels) whose last label starts with a letter: "0", "0x0" or "127.1" are addresses to
# inet_aton (0.0.0.0, 127.0.0.1), never names, and would slip past the check of a literal address.
HOSTNAME_RE = re.compile(r"^(?=.{1,253}\.?$)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
                         r"[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$")


def _ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:0.0.0.0 is 0.0.0.0
    return mapped if mapped is not None else ip


def channel_host_problem(value: str, allow_any: bool) -> str | None:
    """Why ``cluster.slurm.channel_host`` cannot be the history channel's address, judged from the text alone (an
    address of *this* host is a machine check, :func:`channel_bind`): the design listens where the nodes reach
    the engine, never on every interface (a login node is shared with other users)."""
    ip = _ip(value)
    if ip is None:
        if HOSTNAME_RE.match(value):
            return None
        return f"{value!r} is neither an IP address nor a host name"
    if ip.is_unspecified:
        if allow_any:
            return None
        return (f"{value} is every interface of this host: anyone who reaches any of them may try the run's token "
                "(on a login node, every user); give the address the compute nodes reach the engine at (leave it "
                "out: the one this host routes to them from), or set cluster.slurm.allow_any_address: true to mean it")
    if ip.is_multicast or (ip.version == 4 and ip == ipaddress.IPv4Address("255.255.255.255")):
        return f"{value} is a multicast or broadcast address, not one the engine can listen on for the nodes"
    return None


def local_addresses() -> set[str]:
    """Every address of this host's interfaces (zone ids stripped)."""
    import psutil

    return {a.address.split("%", 1)[0] for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)}


def channel_bind(value: str, allow_any: bool) -> tuple[str, str | None]:
    """The address to listen on for ``cluster.slurm.channel_host`` (a name resolved) and a warning, if any;
    ValueError when it is not an address of this host (or is every one of them unasked)."""
    try:
        resolved = socket.getaddrinfo(value, None, type=socket.SOCK_STREAM)[0][4][0]
    except (OSError, UnicodeError) as exc:
        raise ValueError(f"cluster.slurm.channel_host: {value!r} does not resolve ({exc})") from None
    ip = _ip(str(resolved))
    assert ip is not None
    if ip.is_unspecified:
        if not allow_any:
            raise ValueError(f"cluster.slurm.channel_host: {value!r} resolves to {resolved}, every interface of this "
                             "host; set cluster.slurm.allow_any_address: true to mean it")
        return str(resolved), (f"cluster.slurm.channel_host {value}: the history channel listens on every interface "
                               "of this host (allow_any_address); anything that reaches one may try the run's token")
    here = local_addresses()
    if str(ip) not in here and str(resolved).split("%", 1)[0] not in here:
        shown = sorted(a for a in here if not (_ip(a) or ip).is_link_local)
        raise ValueError(f"cluster.slurm.channel_host: {value!r}" + (f" ({resolved})" if resolved != value else "")
                         + " is not an address of this host (its interfaces have " + ", ".join(shown[:8])
                         + (", ..." if len(shown) > 8 else "") + "): the engine listens there for the nodes' events")
    return str(resolved), None


def time_limit_s(value: str) -> int | None:
    """Seconds in a Slurm time limit (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``); None
    for ``UNLIMITED``/``INFINITE``. Slurm reads a lone number as minutes and two fields without a day as MM:SS."""
    if value in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = value.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hms = parts + [0] * (3 - len(parts))
        return int(days) * 86400 + hms[0] * 3600 + hms[1] * 60 + hms[2]
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


# How long a lose/return may take the agent: its docker client's own timeout (30 s) and a request ahead of it.
AGENT_TIMEOUT_S = 75.0

# Beyond limits.deadline_s, what the allocation must still cover: the engine's teardown and cancelling the steps.
TEARDOWN_MARGIN_S = 60


def _own_short(cluster: str) -> str | None:
    """The first short option the runtime sets in a cluster of short options (``-vN4``: ``-N``), reading as
    getopt does: an option that takes a value ends the cluster (``-pkilo`` is the partition ``kilo``)."""
    for char in cluster:
        if f"-{char}" in OWN_FLAGS:
            return f"-{char}"
        if char in SHORT_WITH_VALUE:
            return None
    return None


# --- parsing Slurm's output (pure, tested without a cluster) -----------------------------------------------------


def parse_job_id(salloc_output: str) -> str:
    """The job id in ``salloc``'s "Granted job allocation 12" (or "Pending job allocation 12")."""
    found = re.findall(r"(?:Granted|Pending) job allocation (\d+)", salloc_output)
    if not found:
        raise RuntimeError(f"salloc gave no job id; it said: {salloc_output.strip()[-500:] or '(nothing)'}")
    return found[-1]


def parse_node_states(sinfo_output: str) -> dict[str, str]:
    """``sinfo -h -N -o '%N %t'`` lines to host -> short state (a host listed twice, in two partitions, once)."""
    states: dict[str, str] = {}
    for line in sinfo_output.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states.setdefault(parts[0], parts[1])
    return states


def parse_steps(squeue_output: str, job_id: str) -> dict[str, str]:
    """``squeue --steps -h -o '%i %j'`` lines to step name -> JOB.STEP (this job's steps only)."""
    steps: dict[str, str] = {}
    for line in squeue_output.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(f"{job_id}."):
            steps[parts[1]] = parts[0]
    return steps


def parse_jobs(squeue_output: str) -> list[tuple[str, str, str]]:
    """``squeue -h -o '%i|%j|%k'`` lines to (job id, name, comment), torch-chaos jobs only."""
    jobs = []
    for line in squeue_output.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[1].startswith(JOB_PREFIX):
            jobs.append((parts[0], parts[1], parts[2]))
    return jobs


def host_lost(state: str) -> bool:
    """Whether sinfo's short state says the host is gone: not responding (``*``), down, failed or drained."""
    return state.endswith("*") or state.startswith(("down", "fail", "drain"))


def engine_comment() -> str:
    return f"engine={socket.gethostname()}:{os.getpid()}"


def comment_orphaned(comment: str) -> bool:
    """Whether the job's engine (its comment) is a process of this host that is gone; another host's: unknown,
    so not an orphan (``chaos cleanup --all`` removes it)."""
    match = re.search(r"engine=([^:\s]+):(\d+)", comment)
    if match is None or match.group(1) != socket.gethostname():
        return False
    return not Path(f"/proc/{match.group(2)}").exists()


def lost_hosts_dir() -> Path:
    """Where a run writes down the hosts it asked the cluster agent to lose, before asking: ``chaos cleanup``
    returns them when the engine died before its teardown could (``chaos.marks.leftover_owner_files``)."""

    return state_dir() / "slurm-lost-hosts"


def job_name(run_id: str) -> str:
    return f"{JOB_PREFIX}{run_id}"


def salloc_argv(options: SlurmOptions, hosts: int, run_id: str, comment: str) -> list[str]:
    argv = ["salloc", "--no-shell", "--no-kill", f"--nodes={hosts}", f"--job-name={job_name(run_id)}",
            f"--time={options.time}", f"--comment={comment}"]
    if options.partition:
        argv.append(f"--partition={options.partition}")
    if options.account:
        argv.append(f"--account={options.account}")
    if options.wait_s is not None:
        argv.append(f"--immediate={options.wait_s}")
    return argv + list(options.extra_args)


def srun_argv(job_id: str, host: str, step_name: str, cwd: str, command: list[str]) -> list[str]:
    """One step on one host, sharing the allocation's resources with the other steps (``--overlap``)."""
    return ["srun", "--overlap", f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={host}",
            f"--job-name={step_name}", f"--chdir={cwd}", "--kill-on-bad-exit=0", *command]


def substitute(text: str, hosts: dict[str, str], channel_host: str) -> str:
    for name, host in hosts.items():
        text = text.replace(HOST_PLACEHOLDER % name, host)
    return text.replace(CHANNEL_PLACEHOLDER, channel_host)


def route_source(host: str) -> str:
    """The address this machine sends from to reach ``host``: the engine's side of the path to the compute nodes
    (no packet is sent; a UDP connect only asks the routing table)."""
    address = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((address, 9))
        return str(s.getsockname()[0])


def nodes_pythonpath() -> str:
    """The repository, then the engine's own PYTHONPATH: where the engine's packages live beside the nodes'
    interpreter (the container cluster's ``/shared/engine-site``), the nodes' helpers and storage layer find theirs
    (mfusepy) there too."""
    extra = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([str(REPO_ROOT), *(p for p in extra.split(os.pathsep) if p and p != str(REPO_ROOT))])


def helper_environ() -> dict[str, str]:
    """A helper step's environment (kill-workers, the shared-directory and FUSE check, the storage sweep): the
    nodes' PYTHONPATH, and no process mark of its own (it must not count as one of a node's processes)."""
    env = {k: v for k, v in slurm_environ().items() if k != TREE_VAR}
    env["PYTHONPATH"] = nodes_pythonpath()
    return env


def slurm_environ() -> dict[str, str]:
    """This environment without Slurm's input variables: an engine started inside a job (an interactive
    allocation, a batch script) inherits that job's ``SLURM_*`` (``SLURM_JOB_NODELIST``, ``SLURM_CPUS_PER_TASK``
    ...), which Slurm's tools read as defaults, so the steps would take the outer job's shape and
    ``scontrol show hostnames`` its host list. ``SLURM_CONF`` (which cluster) is kept."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def run_slurm(argv: list[str], timeout: float = 30.0,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a Slurm tool (or a helper step) to its end, its output as text, never reading the engine's stdin; the
    steps' environment (:func:`slurm_environ`) unless ``env`` is given."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          env=slurm_environ() if env is None else env, stdin=subprocess.DEVNULL)
