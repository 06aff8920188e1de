"""What a container cluster is, as data: its names and addresses, its ``slurm.conf``, its state file.

Pure functions only (no docker, no files written): ``chaos cluster up --dry-run`` and the fast tests use them, and
:mod:`chaos.cluster.slurm` builds the real cluster from exactly the same values.

The state file (``<state dir>/clusters/<name>.json``, format :data:`STATE_VERSION`) is how the next user of the
cluster (the Slurm runtime) finds it: the controller container to run ``srun``/``sbatch``/``scontrol`` in, the
node names to pin steps with ``srun -w NODE``, the unprivileged user to run them as, and the shared volume's path
on the host and inside the containers. docs/design.md, "A Slurm cluster in containers", documents every key.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_VERSION = 1
STATE_DIR_ENV = "TORCH_CHAOS_STATE_DIR"
KINDS = ("slurm",)
MAX_NODES = 200  # addresses .10 to .209 of the cluster's /24
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")

# Labels on every object of a cluster (containers, network, volume). Not the docker runtime's ``torch-chaos`` run
# label: a cluster outlives the command that made it, and the runtime's cleanup judges orphans by a live engine.
CLUSTER_LABEL = "torch-chaos.cluster"  # the cluster's name
ID_LABEL = "torch-chaos.cluster-id"  # this bring-up (a second `up` of the same name gets a new one)
STATE_LABEL = "torch-chaos.cluster-state"  # the state file that claims the objects once `up` finished
PID_LABEL = "torch-chaos.cluster-pid"  # the `chaos cluster up` process, alive while it brings the cluster up
ROLE_LABEL = "torch-chaos.cluster-role"  # controller | compute | network | volume

# The repository (the chaos package and the workloads), bind-mounted read-only at the same path, as the docker
# runtime does: a code change needs no image rebuild.
REPO_ROOT_DEFAULT = str(Path(__file__).resolve().parent.parent.parent)
CONTROLLER = "ctl"
PARTITION = "chaos"
USER, UID, HOME = "chaos", 1000, "/home/chaos"
SHARED_PATH = "/shared"  # the shared volume, inside every container
SLURM_CONF = "/etc/slurm/slurm.conf"
MUNGE_KEY = "/etc/munge/munge.key"
ENTRYPOINT = "/usr/local/sbin/tchaos-slurm-node"
# Where the cluster agent's address and token are put in the controller (the login node), readable by USER only:
# the Slurm runtime finds the agent there (chaos.cluster.agent; docs/design.md, "The cluster agent").
AGENT_DIR = "/etc/torch-chaos"
AGENT_FILE = f"{AGENT_DIR}/agent.json"

# The lab's settings (issue 13): no cgroups in the containers (proctrack/linuxproc, task/none), the configured
# CPUs win over what slurmd detects (config_overrides), a node that comes back is usable again (ReturnToService=2),
# a silent slurmd is marked DOWN after 10 s (SlurmdTimeout; measured 15-18 s with the ping interval).
SLURMD_TIMEOUT_S = 10
# Slurm's default is 10 s. Once a job has run on a node, slurmctld's messages to that node, now dead, each wait
# this long before it is marked DOWN: measured 28.6-31.7 s to `down*` with 10, 19.5 s with 5 (without a job
# before, 15-17 s either way). Between containers on one bridge an RPC takes milliseconds, so 5 s is still ample.
MESSAGE_TIMEOUT_S = 5


def state_dir() -> Path:
    """``$TORCH_CHAOS_STATE_DIR``, else ``$XDG_STATE_HOME/torch-chaos``, else ``~/.local/state/torch-chaos``."""
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "torch-chaos"


def state_path(name: str) -> Path:
    return state_dir() / "clusters" / f"{name}.json"


def agent_config_path(name: str) -> Path:
    """The agent's own configuration (bind address, token; mode 0600), beside the state file; its ``.ready``
    (port and pid, once listening) and ``.log`` siblings go with it."""
    return state_dir() / "clusters" / f"{name}.agent.json"


def check_name(name: str) -> str | None:
    """What is wrong with a cluster name (it becomes part of container, network and volume names), or None."""
    if not NAME_RE.match(name):
        return (f"cluster name {name!r}: expected 1-31 characters, lowercase letters, digits and '-', starting with "
                "a letter")
    return None


def check_nodes(nodes: int) -> str | None:
    if nodes < 1:
        return f"--nodes {nodes}: a cluster needs at least 1 compute node"
    if nodes > MAX_NODES:
        return f"--nodes {nodes}: at most {MAX_NODES} compute nodes (one /24 network)"
    return None


@dataclass
class ClusterSpec:
    """One cluster's every name and address; deterministic given (name, nodes, subnet, cpus)."""

    name: str
    nodes: int
    subnet: ipaddress.IPv4Network
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def prefix(self) -> str:
        return f"tchaos-{self.name}"

    @property
    def network(self) -> str:
        return self.prefix

    @property
    def volume(self) -> str:
        return f"{self.prefix}-shared"

    @property
    def node_names(self) -> list[str]:
        """Slurm's node names, also the containers' hostnames: what ``srun -w NODE`` takes."""
        return [f"c{i}" for i in range(1, self.nodes + 1)]

    @property
    def node_list(self) -> str:
        """The nodes as a Slurm hostlist (``c[1-3]``)."""
        return "c1" if self.nodes == 1 else f"c[1-{self.nodes}]"

    def container(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    def address(self, host: str) -> str:
        if host == CONTROLLER:
            return str(self.subnet.network_address + 2)
        return str(self.subnet.network_address + 9 + int(host[1:]))

    @property
    def hosts(self) -> list[str]:
        return [CONTROLLER, *self.node_names]


def slurm_conf(spec: ClusterSpec) -> str:
    """The one ``slurm.conf`` every container gets (Slurm wants it identical everywhere)."""
    lines = [
        "# written by torch-chaos (`chaos cluster up slurm`): the container cluster's configuration",
        f"ClusterName=tchaos-{spec.name}",
        f"SlurmctldHost={CONTROLLER}({spec.address(CONTROLLER)})",
        "SlurmUser=slurm",
        "AuthType=auth/munge",
        "CryptoType=crypto/munge",
        "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        f"SlurmdTimeout={SLURMD_TIMEOUT_S}",
        "SlurmctldTimeout=30",
        f"MessageTimeout={MESSAGE_TIMEOUT_S}",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=60",
        "PropagateResourceLimits=NONE",
        "StateSaveLocation=/var/spool/slurmctld",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "SlurmctldPidFile=/run/slurm/slurmctld.pid",
        "SlurmdPidFile=/run/slurm/slurmd.pid",
        "SlurmctldPort=6817",
        "SlurmdPort=6818",
    ]
    for host in spec.node_names:
        lines.append(f"NodeName={host} NodeAddr={spec.address(host)} NodeHostname={host} CPUs={spec.cpus} "
                     "State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes={spec.node_list} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def state(spec: ClusterSpec, *, cluster_id: str, image: str, shared_host_path: str, repo: str | None,
          python: str, created: str, agent: dict[str, Any] | None = None) -> dict[str, Any]:
    """The state file's content (docs/design.md, "A Slurm cluster in containers": every key)."""
    controller = spec.container(CONTROLLER)
    return {
        "version": STATE_VERSION,
        "kind": "slurm",
        "name": spec.name,
        "id": cluster_id,
        "created": created,
        "image": image,
        "network": {"name": spec.network, "subnet": str(spec.subnet), "internal": True},
        "controller": {"hostname": CONTROLLER, "container": controller, "address": spec.address(CONTROLLER)},
        "nodes": [{"name": h, "container": spec.container(h), "address": spec.address(h)} for h in spec.node_names],
        "node_list": spec.node_list,
        "partition": PARTITION,
        "user": {"name": USER, "uid": UID, "gid": UID, "home": HOME},
        "shared": {"volume": spec.volume, "host_path": shared_host_path, "path": SHARED_PATH},
        "repo": None if repo is None else {"host_path": repo, "path": repo, "mode": "ro"},
        "python": python,
        "exec": ["docker", "exec", "-u", USER, "-w", SHARED_PATH, controller],
        "slurm": {"version": "22.05", "conf": SLURM_CONF, "slurmd_timeout_s": SLURMD_TIMEOUT_S,
                  "message_timeout_s": MESSAGE_TIMEOUT_S, "return_to_service": 2},
        # The host-side agent that loses and returns compute hosts (never its token: that is in its config and,
        # for the cluster's user, in AGENT_FILE on the controller).
        "agent": agent,
    }


def engine_run_argv(state: dict[str, Any], scenario: str) -> list[str] | None:
    """The command that runs ``chaos run SCENARIO`` on a container cluster's login node (its controller), as the
    cluster's user, runs written to the shared filesystem; None when the engine was not installed there. The
    scenario must be a path the controller sees (under the repository, mounted at its own path)."""
    engine = state.get("engine") or {}
    if not engine.get("installed"):
        return None
    return [*state["exec"][:-1], "-e", f"PYTHONPATH={engine['pythonpath']}", state["exec"][-1], state["python"],
            "-m", "chaos", "run", scenario, "--out", f"{state['shared']['path']}/runs"]


def read_state(name: str) -> dict[str, Any] | None:
    """A cluster's state file (``chaos cluster up`` writes it), or None when it is missing or unreadable."""
    try:
        return dict(json.loads(state_path(name).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def clusters_up() -> list[dict[str, Any]]:
    """The state of every container cluster recorded as up on this host (``chaos cluster up``), by name."""
    folder = state_path("x").parent
    states = [read_state(path.stem) for path in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    return [s for s in states if s is not None and s.get("exec")]
