"""The slurm runtime: the engine runs where ``salloc``/``srun``/``scancel`` work (a login node), as an ordinary user.

It holds one allocation of ``cluster.nodes + cluster.slurm.spares`` hosts (``salloc --no-shell --no-kill``: without
``--no-kill`` Slurm ends the whole job when one host is lost) and starts each chaos node's ``torchrun`` as its own
job step pinned to one host (``srun --overlap --jobid J -N1 -n1 -w HOST``), so a fault can hit one node. A
replacement is a new step on a spare host when one is free. Faults are what Slurm gives a user: ``scancel
--signal=KILL|STOP|CONT JOB.STEP`` on a step, and a helper step (:mod:`chaos.runtimes.slurm_helper`) that reads and
signals the user's own processes on one host. Slurm's exit codes are not trusted for STOP/CONT (on a partial
allocation ``scancel`` delivers the signal yet prints "Invalid job id specified" and exits 225): the effect is
judged by the processes' state, read by the helper.

Hosts are known only once ``salloc`` returns, which happens in :meth:`SlurmRuntime.prepare` (after the golden run,
itself a run of its own allocation; inside the engine's try/finally, so teardown always releases it). Until then the
plan names hosts by placeholders (``{slurm-host:node1}``, ``{slurm-channel}``) that each step's command and
environment get substituted with; the ``slurm_allocated`` event records the real ones. The job is named
``torch-chaos-<run id>`` and its comment names the engine (``engine=<host>:<pid>``), so ``chaos cleanup`` finds
allocations whose engine is gone with ``squeue``.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.capabilities import CHECKPOINT_STORAGE, FREEZE, HOST_LOSS, KILL, KILL_WORKERS, NODE_NETWORK, STORAGE_LAYER
from chaos.channel import listen
from chaos.cluster.agent import AgentError, ask, read_config
from chaos.cluster.netcmd import prefix
from chaos.cluster.netexec import leftover_rules
from chaos.cluster.spec import clusters_up, engine_run_argv
from chaos.events import Ev, signal_exit_code
from chaos.machine import Check
from chaos.marks import ENGINE_VAR, TREE_VAR, engine_mark, kill_marked, leftover_owner_files
from chaos.plan import OWN_STACK_STORE_PORT, Addressing, NodePlan, Plan, node_names
from chaos.registry import fault_plugins
from chaos.runtimes.base import NodeLogs, Runtime, Unsupported
from chaos.runtimes.slurm_commands import AGENT_FILE_ENV as AGENT_FILE_ENV  # read from here by callers
from chaos.runtimes.slurm_commands import (  # the runtime's words to Slurm (options, argv, parsers)
    AGENT_TIMEOUT_S,
    CHANNEL_PLACEHOLDER,
    HELPER_TIMEOUT_S,
    HOST_PLACEHOLDER,
    JOB_PREFIX,
    NO_ROOT,
    NO_ROOT_NET,
    POLL_S,
    STARTING_POLL_S,
    TEARDOWN_MARGIN_S,
    TOOLS,
    SlurmOptions,
    _ip,
    agent_file,
    channel_bind,
    comment_orphaned,
    engine_comment,
    helper_environ,
    host_lost,
    job_name,
    lost_hosts_dir,
    nodes_pythonpath,
    parse_job_id,
    parse_jobs,
    parse_node_states,
    parse_steps,
    route_source,
    salloc_argv,
    slurm_environ,
    srun_argv,
    substitute,
    time_limit_s,
)
from chaos.storage.layer import choose

if TYPE_CHECKING:
    from chaos.machine import Check
    from chaos.scenario import Scenario

def _run(argv: list[str], timeout: float = 30.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          env=slurm_environ() if env is None else env, stdin=subprocess.DEVNULL)


def _login_node_advice() -> str:
    """Where to run the engine instead: a login node; when a container cluster is up on this host (``chaos cluster
    up``), the exact ``docker exec`` line that runs it on that cluster's login node."""
    advice = "run the engine on a login node of the cluster (where `srun hostname` works)"
    for state in clusters_up():
        repo = (state.get("repo") or {}).get("path")
        argv = engine_run_argv(state, f"{repo}/SCENARIO.yaml")
        if argv is not None:
            return (f"{advice}; the container cluster {state.get('name', '')!r} is up here, and this runs a scenario "
                    f"on its login node (SCENARIO.yaml: a path under {repo}, which it mounts): {' '.join(argv)}")
    return advice


class SlurmRuntime(Runtime):
    name = "slurm"
    summary = "one Slurm job step per node inside one allocation (salloc/srun as an ordinary user)"
    # Faults needing root on the hosts (their network, a memory cgroup) are not Slurm's to give. The storage layer
    # is a FUSE mount each node's host makes as the user (fusermount3), checked on every allocated host.
    capabilities = frozenset({KILL, KILL_WORKERS, FREEZE, CHECKPOINT_STORAGE, STORAGE_LAYER})
    golden_beside_engine = False  # the engine is on a login node: the golden run is one on the cluster, its own
    # allocation before the faulted run's (chaos.golden.golden_where)
    fuse_on_engine_host = False  # the nodes write the shared filesystem from their hosts, past the login node ...
    fuse_on_node_hosts = True  # ... so each node's host runs the layer around the node's command (hostlayer.py)
    # Losing a host and the hosts' networks (partition, isolate ...): only where a cluster agent gives them (the
    # container cluster's, chaos.cluster.agent), asked on the login node before the run creates anything.
    conditional_capabilities = frozenset({HOST_LOSS, NODE_NETWORK})
    net_tools_on_engine = False  # iptables/tc run by the agent on the docker host, never by the engine
    options = SlurmOptions
    cleanup_order = 5  # the allocation first: its steps die with it, then marked srun clients go

    @classmethod
    def create(cls, scenario: Scenario, run_id: str, run_dir: str | Path) -> Runtime:
        return cls(run_id, run_dir, scenario.cluster.slurm)  # type: ignore[attr-defined]

    @classmethod
    def machine_checks(cls, options: Any = None) -> list[Check]:
        missing = [t for t in TOOLS if shutil.which(t) is None]
        # Required for a Slurm scenario (``options`` given: its cluster.slurm); in the plain `chaos doctor` an
        # optional line, since a machine off any Slurm cluster is not a broken machine.
        checks = [Check("slurm client tools", not missing,
                        "salloc, srun, scancel, squeue, scontrol, sinfo on PATH" if not missing
                        else f"not on PATH: {', '.join(missing)}",
                        _login_node_advice(), required=options is not None)]
        if options is not None and options.channel_host is not None:
            try:
                _, warning = channel_bind(options.channel_host, options.allow_any_address)
                checks.append(Check("slurm channel_host", True, warning or f"{options.channel_host} is this host's",
                                    "", required=True))
            except ValueError as exc:
                checks.append(Check("slurm channel_host", False, str(exc),
                                    "give an address of this host the compute nodes reach, or leave "
                                    "cluster.slurm.channel_host out", required=True))
        return checks

    @classmethod
    def scenario_problems(cls, scenario: Scenario) -> list[str]:
        """An allocation shorter than the run would be ended by Slurm mid-run (the steps cancelled, read as lost
        nodes, not as the deadline); FUSE on the login node would see none of the nodes' writes."""
        problems = []
        options: SlurmOptions = scenario.cluster.slurm  # type: ignore[attr-defined]
        limit = time_limit_s(options.time)
        need = scenario.limits.deadline_s + TEARDOWN_MARGIN_S
        if limit is not None and limit < need:
            minutes = math.ceil(need / 60)
            problems.append(f"cluster.slurm.time: {options.time!r} is {limit} s, shorter than limits.deadline_s "
                            f"({scenario.limits.deadline_s:g} s) plus {TEARDOWN_MARGIN_S} s for teardown: Slurm "
                            f"would end the allocation mid-run, which reads as lost nodes; give at least "
                            f"\"{minutes // 60:02d}:{minutes % 60:02d}:00\", or a shorter deadline_s")

        plugins = fault_plugins()
        for i, fault in enumerate(scenario.faults):
            kind = plugins.get(fault.kind)
            net_kinds = sorted(k for k, p in plugins.items() if p.drop_rules_only)
            if kind is not None and NODE_NETWORK in kind.needs and not kind.drop_rules_only:
                problems.append(f"faults[{i}].kind: {fault.kind} on slurm: only {' and '.join(net_kinds)} go through "
                                "the cluster agent (iptables DROP rules); qdisc and queue impairments (delay, loss, "
                                "bandwidth) are not measured there yet; use cluster.runtime: docker")
        return problems

    @classmethod
    def capability_check(cls, capability: str, options: Any = None) -> Check:
        """host_loss, node_network: the agent's address is readable here (the cluster's user only can) and the
        agent answers, and takes the action the capability needs (an agent from before ``net`` does not)."""

        if capability not in (HOST_LOSS, NODE_NETWORK):
            return super().capability_check(capability, options)
        name, no_root, action, faults = (("slurm: host loss (a cluster agent)", NO_ROOT, "lose", "the host_loss fault")
                                         if capability == HOST_LOSS else
                                         ("slurm: node network (a cluster agent)", NO_ROOT_NET, "net",
                                          "the network faults"))
        path = agent_file()
        try:
            config = read_config(path)
            answer = ask(config, "ping", timeout=5.0)
            if action not in answer.get("actions", ["lose", "return", "ping"]):
                raise AgentError(f"the cluster agent at {config['address']}:{config['port']} predates the {action} "
                                 "action (chaos cluster down, then up, with this torch-chaos)")
        except AgentError as exc:
            why = no_root if not Path(path).exists() else f"{no_root}; here: {exc}"
            return Check(name, False, why, "run on the container cluster's controller (chaos cluster up slurm), "
                         f"or drop {faults}")
        return Check(name, True, f"the cluster agent at {config['address']}:{config['port']} answers")

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        if shutil.which("squeue") is None:
            return []
        try:
            proc = _run(["squeue", "-h", f"--user={getpass.getuser()}", "-o", "%i|%j|%k"])
        except (OSError, subprocess.TimeoutExpired):
            return []
        removed = cls._return_lost_hosts(run_id, only_orphans)
        for job, name, comment in parse_jobs(proc.stdout):
            if run_id is not None and name != job_name(run_id):
                continue
            if only_orphans and not comment_orphaned(comment):
                continue
            # cleanup goes on whatever one scancel does (a slow slurmctld right after a host loss): the other
            # runtimes' cleanups come after this one
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                removed += cls._sweep_orphan(job, name)
                if _run(["scancel", job]).returncode == 0:
                    removed.append(f"slurm job {job} ({name})")
        return removed + cls._cleanup_rules(run_id)

    @classmethod
    def _sweep_orphan(cls, job: str, name: str) -> list[str]:
        """While the dead engine's allocation still runs, its hosts can still be reached: unmount its storage
        layers' mounts there first (after the scancel nothing of ours runs on them)."""
        nodelist = _run(["squeue", "-h", "-j", job, "-t", "RUNNING", "-o", "%N"]).stdout.strip()
        if not nodelist:
            return []
        hosts = _run(["scontrol", "show", "hostnames", nodelist]).stdout.split()
        if not hosts:
            return []
        swept = cls._sweep_storage(job, name.removeprefix(JOB_PREFIX), hosts, sys.executable)
        return [f"storage mount ({u})" for u in swept["unmounted"]]

    @classmethod
    def _cleanup_rules(cls, run_id: str | None) -> list[str]:
        """The iptables rules of runs that could not heal (their engine killed mid-fault), on every host, through
        the cluster agent: a rule is left while its run's allocation is pending or running (``squeue``, any user),
        and removed once it is gone or being cancelled. Where there is no agent there are no rules (a real cluster)."""

        try:
            config = read_config(agent_file())
            hosts = sorted(parse_node_states(_run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10).stdout))
            # a job being cancelled (CG, completing: the cleanup above just scancelled it) is gone already
            live = {n for _, n, _ in parse_jobs(_run(["squeue", "-h", "-t", "PD,R,S,CF", "-o", "%i|%j|%k"]).stdout)}
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

    @classmethod
    def _return_lost_hosts(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        """Hosts an engine that is gone had the agent lose and never returned: the cluster as the run found it."""

        out = []
        for owner, info in leftover_owner_files(lost_hosts_dir(), run_id, only_orphans):
            left = []
            for host in info.get("hosts", []):
                try:
                    ask(read_config(str(info.get("agent_file", ""))), "return", str(host), timeout=AGENT_TIMEOUT_S)
                    out.append(f"host {host} returned (docker start by the cluster agent; run {info.get('run_id')})")
                except (AgentError, OSError, ValueError) as exc:
                    left.append(host)
                    out.append(f"host {host} NOT returned: {exc}")
            if left:
                continue  # kept for the next cleanup
            owner.unlink(missing_ok=True)
        return out

    def __init__(self, run_id: str, run_dir: str | Path, options: SlurmOptions | None = None):
        super().__init__(run_id, run_dir)
        self.options = options or SlurmOptions()
        self.job_id: str | None = None
        self.hosts: list[str] = []
        self.host_of: dict[str, str] = {}  # node -> host its current step runs on
        self.spares: list[str] = []
        self.channel_host: str | None = None  # the address the nodes are given (CHAOS_CHANNEL)
        self.channel_bind: str | None = None  # the address the engine listens on (the same, but for 0.0.0.0/::)
        self._channel_warning: str | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs = NodeLogs(self.log_path)
        self._step_names: dict[str, str] = {}  # node -> its current step's name
        self._starts: dict[str, tuple[float, bool]] = {}  # node -> (srun started at, replacement), until seen
        self._judged: dict[int, int] = {}  # srun pid -> its node's exit code, once judged (srun exited 0)
        self._starts_count: dict[str, int] = {}  # node -> steps started (a unique step name each)
        self._effect_t: dict[str, float] = {}  # node -> when the last crash/freeze signal went out (effect_time)
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._states: dict[str, str] = {}
        self._stop = threading.Event()
        self._observer: threading.Thread | None = None
        self._lost: dict[str, bool] = {}  # host lost by lose_host -> returned since
        self._asked_lost: set[str] = set()  # hosts lose_host asked the agent for, answered or not

    # --- the plan ----------------------------------------------------------------------------------------------

    def addressing(self, scenario: Scenario) -> Addressing:
        # Each node is a host of its own (its own network stack: the store's fixed port is free there); hosts are
        # known once salloc returns, so the plan holds placeholders each step gets substituted.
        addresses = {n: HOST_PLACEHOLDER % n for n in node_names(scenario)}
        return Addressing(addresses, OWN_STACK_STORE_PORT, python=self.python,
                          env={"PYTHONPATH": nodes_pythonpath()}, channel_host=CHANNEL_PLACEHOLDER)

    @property
    def python(self) -> str:
        """The nodes' interpreter (``cluster.slurm.python``, default the engine's: the same path on a shared
        filesystem)."""
        return self.options.python or sys.executable

    def salloc_command(self, plan: Plan) -> list[str]:
        return salloc_argv(self.options, len(plan.nodes) + self.options.spares + self._services(plan), self.run_id,
                           engine_comment())

    @staticmethod
    def _services(plan: Plan) -> int:
        return (1 if plan.store is not None else 0) + len(plan.servers)

    def dry_run_commands(self, plan: Plan) -> list[str]:
        lines = [shlex.join(self.salloc_command(plan)),
                 "# then, with J the job id salloc prints and one of its hosts per node (the rest are spares):"]
        for node in ([plan.store] if plan.store else []) + plan.servers + plan.nodes:
            assert node is not None
            lines.append(shlex.join(srun_argv("J", HOST_PLACEHOLDER % node.name, f"{self.run_id[-6:]}-{node.name}-1",
                                              str(self.run_dir), node.argv)))

        if choose(plan.scenario, self.fuse_on_engine_host, self.fuse_on_node_hosts) == "fuse" and plan.checkpoint_dir:
            lines.append(f"# storage layer: every node's command runs as {self.python} -m chaos.storage host "
                         f"--mount {plan.checkpoint_dir} ... -- <command> (a FUSE mount on the node's host, checked "
                         f"first on every host: srun ... {self.python} -m chaos.storage check-host)")
        lines.append(f"# faults: scancel --signal=KILL|STOP|CONT J.STEP; kill_worker: srun --overlap --jobid=J "
                     f"-N1 -n1 -w HOST {self.python} -m chaos.runtimes.slurm_helper "
                     "kill-workers <run>/<node>")
        lines.append(f"# host_loss: the cluster agent ({agent_file()}) docker-kills HOST's container; teardown "
                     "returns it (docker start)")
        lines.append(f"# network faults: iptables/tc in HOST's network namespace, run by the cluster agent "
                     f"({agent_file()}; python -m chaos.cluster.netcmd --host HOST -- iptables ...)")
        lines.append(f"# teardown: scancel J; chaos cleanup: squeue --user=$USER --name={job_name(self.run_id)}")
        return lines

    # --- the allocation ----------------------------------------------------------------------------------------

    def prepare(self, plan: Plan) -> None:
        argv = self.salloc_command(plan)
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
                                  env=slurm_environ())
        except FileNotFoundError:
            raise RuntimeError("salloc is not on PATH: the slurm runtime runs on a login node of a Slurm "
                               "cluster (chaos doctor says what is missing)") from None
        said = (proc.stderr + proc.stdout).strip()
        if proc.returncode != 0 or "Granted job allocation" not in said:
            with contextlib.suppress(RuntimeError):
                self.job_id = parse_job_id(said)  # a job that exists is cancelled at teardown
            raise RuntimeError(f"salloc refused the allocation (exit {proc.returncode}): {said[-500:] or '(nothing)'}; "
                               "check cluster.slurm (partition, account, time, extra_args) against `sinfo` and "
                               f"your accounts; the line was: {shlex.join(argv)}")
        self.job_id = parse_job_id(said)
        nodelist = _run(["squeue", "-h", "-j", self.job_id, "-o", "%N"]).stdout.strip()
        if not nodelist:
            raise RuntimeError(f"squeue lists no hosts for job {self.job_id} right after salloc granted it")
        self.hosts = _run(["scontrol", "show", "hostnames", nodelist]).stdout.split()
        salloc_s = time.monotonic() - start
        services = ([plan.store.name] if plan.store else []) + [s.name for s in plan.servers]
        wanted = services + [n.name for n in plan.nodes]
        if len(self.hosts) < len(wanted):
            raise RuntimeError(f"salloc gave {len(self.hosts)} host(s) ({nodelist!r}) for {len(wanted)} node(s)")
        self.host_of = dict(zip(wanted, self.hosts[:len(wanted)], strict=True))
        self.spares = self.hosts[len(wanted):]
        given = self.options.channel_host
        if given is None:
            self.channel_host = self.channel_bind = route_source(self.hosts[0])
        else:  # checked again here: the scenario may have been judged on another machine (a dry run, --no-machine)
            try:
                self.channel_bind, self._channel_warning = channel_bind(given, self.options.allow_any_address)
            except ValueError as exc:
                raise RuntimeError(str(exc)) from None
            if self._channel_warning:
                print(f"warning: {self._channel_warning}", file=sys.stderr)
            unspecified = (ip := _ip(self.channel_bind)) is not None and ip.is_unspecified
            self.channel_host = route_source(self.hosts[0]) if unspecified else given  # 0.0.0.0 reaches no one
        self._check_shared_run_dir()
        port = (plan.channel or '').rpartition(':')[2]
        self._events.append({"event": Ev.SLURM_ALLOCATED, "job_id": self.job_id, "hosts": self.hosts,
                             "nodes": dict(self.host_of), "spares": list(self.spares),
                             "channel": f"{self.channel_host}:{port}",
                             **({"channel_bind": f"{self.channel_bind}:{port}"}
                                if self.channel_bind != self.channel_host else {}),
                             **({"warning": self._channel_warning} if self._channel_warning else {}),
                             "salloc_s": round(salloc_s, 3), "command": argv})
        self._observer = threading.Thread(target=self._observe_loop, name="torch-chaos-slurm-observer", daemon=True)
        self._observer.start()

    def _check_shared_run_dir(self) -> None:
        """Every allocated host must see the run directory: the checkpoints are there (a replacement on a spare
        resumes from them; corrupt_checkpoint changes them), and so is each step's working directory. A directory
        only the login node has would make checkpoints host-local, with no error from Slurm, so one step per host
        looks for a file written here just now."""
        assert self.job_id is not None
        probe = self.run_dir / f".visible-{os.getpid()}-{time.monotonic_ns()}"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        hosts = len(self.hosts)
        check = ["test", "-e", str(probe)]
        if self.storage_layer is not None:  # the same step asks each host whether it can serve the layer
            check = [self.python, "-m", "chaos.storage", "check-host", "--visible", str(probe)]
        try:
            proc = _run(["srun", "--overlap", f"--jobid={self.job_id}", f"--nodes={hosts}", f"--ntasks={hosts}",
                         "--ntasks-per-node=1", f"--job-name={self.run_id[-6:]}-shared", "--kill-on-bad-exit=0",
                         *check], timeout=HELPER_TIMEOUT_S, env=helper_environ())
        finally:
            probe.unlink(missing_ok=True)
        if proc.returncode != 0 and self.storage_layer is not None and "not visible" not in proc.stderr:
            raise RuntimeError(f"the storage layer cannot run on every allocated host (srun exit {proc.returncode}: "
                               f"{proc.stderr.strip()[-400:] or 'no answer'}): each node's host mounts the "
                               "checkpoint directory through FUSE as you (fusermount3, /dev/fuse, libfuse3 and "
                               "mfusepy for the nodes' python); set storage.layer: inotify (no storage faults, no "
                               "loads seen) or off, or ask the cluster's admins for FUSE on the compute hosts")
        if proc.returncode != 0:
            raise RuntimeError(f"the run directory {self.run_dir} is not visible on every allocated host "
                               f"({', '.join(self.hosts)}; srun exit {proc.returncode}: "
                               f"{proc.stderr.strip()[-300:] or 'a host did not find it'}): run with --out on a "
                               "filesystem every host shares (the checkpoints and the nodes' working directories "
                               "are there)")

    def channel_socket(self, host: str, port: int) -> socket.socket:
        """The channel listens on the engine's address towards the compute nodes (the interface the kernel routes
        to the first allocated host from), not on every interface: on a login node that is the cluster network,
        which the nodes reach; the run's token keeps out whatever else can reach that address."""

        assert self.channel_bind is not None, "prepare() makes the allocation before the channel opens"
        return listen(self.channel_bind, port)

    # --- nodes -------------------------------------------------------------------------------------------------

    def _substituted(self, node: NodePlan) -> tuple[list[str], dict[str, str]]:
        assert self.channel_host is not None
        hosts = dict(self.host_of)
        argv = [substitute(a, hosts, self.channel_host) for a in node.argv]
        env = {k: substitute(v, hosts, self.channel_host) for k, v in node.env.items()}
        return argv, env

    def _place(self, name: str) -> tuple[str, bool]:
        """The host for ``name``'s next step: its own the first time; for a replacement a free spare (the old
        host becomes a spare unless Slurm says it is down), else its own again."""
        if name not in self._procs:
            return self.host_of[name], False
        old = self.host_of[name]
        if self.spares:
            new = self.spares.pop(0)
            if not host_lost(self._states.get(old, "")) and old not in self._lost:  # a lost host never comes back
                self.spares.append(old)
            self.host_of[name] = new
            return new, True
        if old in self._lost:
            raise RuntimeError(f"{name}'s host {old} is lost and no spare host is left")  # can_replace said so
        return old, True

    def can_replace(self, name: str) -> str | None:
        host = self.host_of.get(name)
        if host is not None and (host in self._lost or host_lost(self._states.get(host, ""))) and not self.spares:
            return f"its host {host} is lost and the allocation has no spare host left"
        return None

    def start_node(self, node: NodePlan) -> None:
        if self.job_id is None:
            raise RuntimeError("no Slurm allocation: prepare() was not called")
        host, replacement = self._place(node.name)
        argv, env = self._substituted(node)
        if self.storage_layer is not None:
            argv = self.storage_layer.node_command(self.python, argv)
        self._starts_count[node.name] = self._starts_count.get(node.name, 0) + 1
        step_name = f"{self.run_id[-6:]}-{node.name}-{self._starts_count[node.name]}"
        fh = self._logs.reopen(node.name, where=host)
        full_env = {**slurm_environ(), **env, TREE_VAR: f"{self.run_id}/{node.name}", ENGINE_VAR: engine_mark()}
        self._procs[node.name] = subprocess.Popen(
            srun_argv(self.job_id, host, step_name, str(self.run_dir), argv), env=full_env, stdout=fh,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        with self._lock:
            self._step_names[node.name] = step_name
            self._starts[node.name] = (time.monotonic(), replacement)

    def exit_code(self, name: str) -> int | None:
        proc = self._procs.get(name)
        if proc is None:
            return None
        code = signal_exit_code(proc.poll())  # srun says 137 for a SIGKILLed step: -9, as on every runtime
        if code != 0:
            return code
        if proc.pid not in self._judged:
            self._judged[proc.pid] = self._lost_host_code(name)
        return self._judged[proc.pid]

    def _lost_host_code(self, name: str) -> int:
        """srun exits 0 when its step's host is lost ("srun: error: Node failure on c2", measured): a lost host
        must not read as a node that finished. It is lost when srun said so in the node's log, or when Slurm,
        asked now, says the host does not respond (``*``) or is down; then the node died as if SIGKILLed."""
        host = self.host_of.get(name, "")
        try:
            with open(self.log_path(name), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 4096))
                # "c2" must not match "Node failure on c20"
                said = bool(host) and re.search(rb"Node failure on " + re.escape(host.encode()) + rb"(?![\w.-])",
                                                fh.read()) is not None
        except OSError:
            said = False
        state = ""
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            state = parse_node_states(_run(["sinfo", "-h", "-N", "-n", host, "-o", "%N %t"], timeout=10).stdout
                                      ).get(host, "")
        if said or host_lost(state) or host in self._lost:
            with self._lock:
                self._events.append({"t": time.time(), "event": Ev.SLURM_NODE_STATE, "host": host,
                                     "state": state or "?", "previous": self._states.get(host, "?"),
                                     "node_failure": name})
                if state:
                    self._states[host] = state  # the replacement must not go back to it
            return -int(signal.SIGKILL)
        return 0

    def _step_id(self, name: str, wait_s: float = 10.0) -> str:
        """JOB.STEP of the node's current step (a step just started may take a moment to be listed)."""
        assert self.job_id is not None
        step_name = self._step_names.get(name)
        if step_name is None:
            raise RuntimeError(f"{name} has no job step")
        deadline = time.monotonic() + wait_s
        while True:
            steps = parse_steps(_run(["squeue", "--steps", "-h", "-j", self.job_id, "-o", "%i %j"]).stdout,
                                self.job_id)
            if step_name in steps:
                return steps[step_name]
            if time.monotonic() > deadline or self.exit_code(name) is not None:
                raise RuntimeError(f"{name}'s job step {step_name} is not running (squeue --steps lists none)")
            time.sleep(0.2)

    def helper(self, name: str, action: str, *args: str) -> dict[str, Any]:
        """Run the helper as a step on ``name``'s host; its JSON answer."""
        assert self.job_id is not None
        host = self.host_of[name]
        argv = srun_argv(self.job_id, host, f"{self.run_id[-6:]}-helper", str(self.run_dir),
                         [self.python, "-m", "chaos.runtimes.slurm_helper", action, f"{self.run_id}/{name}", *args])
        proc = _run(argv, timeout=HELPER_TIMEOUT_S, env=helper_environ())
        for line in reversed(proc.stdout.splitlines()):
            if line.startswith("{"):
                return dict(json.loads(line))
        raise RuntimeError(f"the helper step on {host} answered nothing (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-300:]}")

    def effect_time(self, name: str) -> float | None:
        return self._effect_t.pop(name, None)

    def _scancel(self, sig: str, step: str, name: str | None = None) -> str:
        proc = _run(["scancel", f"--signal={sig}", step])
        if name is not None:
            self._effect_t[name] = time.time()  # the signal is out; what follows only checks it
        # Slurm's exit code is not the verdict (225 "Invalid job id specified" on a partial allocation while the
        # signal was delivered): the caller judges by the processes' state.
        return f"exit {proc.returncode}" + (f", said {proc.stderr.strip()!r}" if proc.stderr.strip() else "")

    def kill(self, name: str) -> str:
        step = self._step_id(name)
        said = self._scancel("KILL", step, name)
        proc = self._procs[name]
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        how = f"scancel --signal=KILL {step} ({said}) on {self.host_of[name]}"
        # The signal is sent: from here the crash happened whatever the check below can say, so a failing helper
        # step makes it "not checked", never "not injected" (which would also skip its recovery).
        try:
            left = self.helper(name, "state").get("processes", {})
            if left:  # a process outside the step's tracking: kill it the user's way, and say so
                self.helper(name, "signal-all", "--signal", str(int(signal.SIGKILL)))
                return f"{how}: {len(left)} process(es) outlived the step and were SIGKILLed by a helper step"
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            ended = "its srun ended" if proc.poll() is not None else "its srun still ran after 5 s"
            return f"{how}: {ended}; the host's processes not checked ({exc})"
        return f"{how}: no process of the node's step left (read by a helper step)"

    def kill_workers(self, name: str, sig: int = signal.SIGKILL, local_rank: int | None = None) -> str:
        args = ["--signal", str(int(sig))] + (["--local-rank", str(local_rank)] if local_rank is not None else [])
        answer = self.helper(name, "kill-workers", *args)
        what = signal.Signals(sig).name
        signalled = answer.get("signalled", [])
        if not signalled:
            raise RuntimeError(f"{name} has no worker" + (f" with LOCAL_RANK={local_rank}" if local_rank is not None
                                                          else "") + f" on {self.host_of[name]}")
        if answer.get("no_launcher"):
            return (f"{what} to the training process on {self.host_of[name]} (no launcher on this node), by a "
                    "helper step")
        return (f"{what} to {len(signalled)} worker process(es) on {self.host_of[name]} (pid "
                f"{', '.join(map(str, signalled))}) by a helper job step; the torchrun agent stays")

    def _states_of(self, name: str) -> dict[str, str]:
        return dict(self.helper(name, "state").get("processes", {}))

    def freeze(self, name: str) -> str:
        step = self._step_id(name)
        said = self._scancel("STOP", step, name)
        how = f"scancel --signal=STOP {step} ({said})"
        try:
            states = self._states_of(name)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            # the STOP is sent: recorded as injected, so its heal (CONT) runs, with what could not be checked
            return f"{how} on {self.host_of[name]}: the processes' state not checked ({exc})"
        if not states:
            raise RuntimeError(f"no process of {name} on {self.host_of[name]}: the freeze acted on nothing")
        running = [p for p, s in states.items() if s != "T"]
        if running:  # not every process stopped (outside the step's tracking, or the signal was lost)
            with contextlib.suppress(RuntimeError, OSError, ValueError, subprocess.TimeoutExpired):
                self.helper(name, "signal-all", "--signal", str(int(signal.SIGSTOP)))
            how += f"; {len(running)} process(es) still running, sent SIGSTOP by a helper step"
            try:
                states = self._states_of(name)  # read again: the claim below is what the host says now
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
                return f"{how}: their state after it not checked ({exc})"
        stopped = sum(1 for s in states.values() if s == "T")
        return (f"{how}: {stopped} of {len(states)} process(es) on {self.host_of[name]} stopped (state T, read by a "
                "helper step)")

    def thaw(self, name: str) -> None:
        if self.exit_code(name) is not None:
            return
        with contextlib.suppress(RuntimeError):
            self._scancel("CONT", self._step_id(name, wait_s=2))
        stopped = [p for p, s in self._states_of(name).items() if s == "T"]
        if stopped:
            self.helper(name, "signal-all", "--signal", str(int(signal.SIGCONT)))

    def node_pids(self, name: str) -> list[int]:
        raise Unsupported("the slurm runtime's nodes are processes on other hosts")

    # --- host loss, through the cluster agent ------------------------------------------------------------------

    def _agent(self) -> dict[str, Any]:
        try:
            return read_config(agent_file())
        except AgentError as exc:
            raise Unsupported(f"{NO_ROOT} ({exc})") from None

    def lose_host(self, name: str) -> tuple[str, dict[str, Any]]:
        """The agent docker-kills the container of ``name``'s host. srun learns it only from Slurm (it exits 0
        after "Node failure", once slurmctld marks the host down), and :meth:`_lost_host_code` reads that as
        killed; the host is never a spare again."""

        host = self.host_of[name]
        config = self._agent()
        # before asking: a request that times out or is interrupted may still have killed the container; teardown
        # returns every host asked for (starting a running container changes nothing), and `chaos cleanup` does
        # after an engine that died first (the owner file)
        self._asked_lost.add(host)
        record = self._write_lost_hosts()
        answer = ask(config, "lose", host, timeout=AGENT_TIMEOUT_S)
        with self._lock:
            self._lost[host] = False
        where = f"{config['address']}:{config['port']}"
        return (f"docker kill of {answer['container']} (host {host}) by the cluster agent at {where}",
                {"host": host, "container": answer["container"], "agent": where, "t_agent": answer["t"],
                 "cleanup_record": record})

    def _lost_hosts_owner(self) -> Path:
        return lost_hosts_dir() / f"{self.run_id}.json"

    def _write_lost_hosts(self) -> str:
        """The owner file's path, or why it could not be written (then only this engine's teardown returns the
        host: the fault still goes on, its details say so)."""
        owner = self._lost_hosts_owner()
        try:
            owner.parent.mkdir(parents=True, exist_ok=True)
            owner.write_text(json.dumps({"run_id": self.run_id, "engine_pid": os.getpid(),
                                         "agent_file": agent_file(), "hosts": sorted(self._asked_lost)}))
        except OSError as exc:
            return f"not written ({exc}): after an engine crash, `chaos cluster down` and up restore the host"
        return str(owner)

    def return_host(self, host: str) -> dict[str, Any]:
        """The agent docker-starts the host's container: slurmd comes back (ReturnToService=2 makes it usable),
        but not into this run's allocation, and not as its spare."""

        answer = ask(self._agent(), "return", host, timeout=AGENT_TIMEOUT_S)
        with self._lock:
            self._lost[host] = True
        return {"returned": host, "mechanism": f"docker start of {answer['container']} by the cluster agent",
                "t_agent": answer["t"]}

    # --- the hosts' networks, through the cluster agent ----------------------------------------------------------

    def net_enter(self, name: str) -> list[str]:
        """The prefix that runs a host tool in ``name``'s host's network namespace: the agent runs it there (as
        ``nsenter --net``) when it is one of the shapes network faults issue (chaos.cluster.netexec). The namespace
        is the host's, not the node's: every process of the host shares it, as on a real machine."""

        self._agent()  # Unsupported, with why, where there is no agent
        return prefix(agent_file(), self.host_of[name])

    def net_where(self, name: str) -> str:
        return f"{name} ({self.host_of[name]})"

    def net_by(self) -> str | None:
        config = self._agent()
        return f"the cluster agent at {config['address']}:{config['port']}"

    def net_address(self, plan: Plan, name: str) -> str:
        """The node's host's address on the cluster network (the plan holds only a placeholder), resolved on the
        login node the way the nodes resolve it."""
        return socket.gethostbyname(self.host_of[name])

    # --- Slurm's view --------------------------------------------------------------------------------------------

    def _observe_loop(self) -> None:
        """Ask Slurm about the allocated hosts every POLL_S, and about this job's steps every STARTING_POLL_S while
        a started step is not listed yet (a thread: never blocks a tick). It wakes every STARTING_POLL_S, so a
        step started between two host polls is still timed to that resolution."""
        assert self.job_id is not None
        hosts = ",".join(self.hosts)
        last_hosts = -POLL_S
        while not self._stop.wait(STARTING_POLL_S):
            now = time.monotonic()
            ask_hosts = now - last_hosts >= POLL_S
            if not ask_hosts and not self._starts:
                continue
            try:
                if ask_hosts:
                    last_hosts = now
                    self._record_states(parse_node_states(
                        _run(["sinfo", "-h", "-N", "-n", hosts, "-o", "%N %t"], timeout=10).stdout))
                if self._starts:
                    self._record_steps(parse_steps(_run(["squeue", "--steps", "-h", "-j", self.job_id, "-o",
                                                         "%i %j"], timeout=10).stdout, self.job_id))
            except (OSError, subprocess.TimeoutExpired):
                continue

    def _record_states(self, states: dict[str, str]) -> None:
        with self._lock:
            for host, state in states.items():
                before = self._states.get(host)
                if before is not None and before != state:
                    self._events.append({"t": time.time(), "event": Ev.SLURM_NODE_STATE, "host": host, "state": state,
                                         "previous": before})
                self._states[host] = state

    def _record_steps(self, steps: dict[str, str]) -> None:
        now = time.monotonic()
        with self._lock:
            for node, (started, replacement) in list(self._starts.items()):
                step_name = self._step_names.get(node)
                if step_name in steps:
                    self._events.append({"t": time.time(), "event": Ev.SLURM_STEP_STARTED, "node": node,
                                         "host": self.host_of.get(node, "?"), "step": steps[step_name],
                                         "after_s": round(now - started, 3), "replacement": replacement})
                    del self._starts[node]
                elif (proc := self._procs.get(node)) is not None and proc.poll() is not None:
                    del self._starts[node]  # its srun ended before Slurm listed it: nothing more to time

    def observe(self) -> list[dict[str, Any]]:
        with self._lock:
            out, self._events = self._events, []
        return out

    # --- teardown ----------------------------------------------------------------------------------------------

    def teardown(self) -> list[str]:
        self._stop.set()
        cleaned: list[str] = []
        live = [h for h in self.hosts if h not in self._lost]
        if self.job_id is not None and self.storage_layer is not None and live:
            swept = self._sweep_storage(self.job_id, self.run_id, live, self.python)
            cleaned += [f"storage mount ({u})" for u in swept["unmounted"]]
            with self._lock:
                self._events.append(swept)
        if self.job_id is not None:
            released: dict[str, Any] = {"event": Ev.SLURM_RELEASED, "job_id": self.job_id, "ok": False}
            try:  # teardown must go on: the srun clients, the marks and the logs below are this engine's own
                done = _run(["scancel", self.job_id])
                released["ok"] = done.returncode == 0
                if not released["ok"]:
                    released["why"] = f"scancel exited {done.returncode}: {done.stderr.strip()[:200]}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                released["why"] = f"scancel: {exc}"
            if released["ok"]:
                cleaned.append(f"slurm job {self.job_id}")
            with self._lock:
                self._events.append(released)
        # Ctrl-C while salloc waited: the job may exist without its id known here; its name finds it.
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            _run(["scancel", f"--name={job_name(self.run_id)}", f"--user={getpass.getuser()}"])
        for proc in self._procs.values():  # srun clients end with their steps; a stuck one is killed
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        cleaned += [f"process {p.pid}" for p in kill_marked(self.run_id)]
        back = True
        for host in sorted(self._asked_lost):  # the cluster as the run found it: every host back
            if not self._lost.get(host, False):
                try:
                    self.return_host(host)
                    cleaned.append(f"host {host} returned (docker start by the cluster agent)")
                except (RuntimeError, OSError) as exc:
                    back = False
                    cleaned.append(f"host {host} NOT returned: {exc}")
        if back:
            self._lost_hosts_owner().unlink(missing_ok=True)  # else `chaos cleanup` tries again
        self._logs.close()
        if self._observer is not None:
            self._observer.join(timeout=5)
        return cleaned

    @staticmethod
    def _sweep_storage(job_id: str, run_id: str, hosts: list[str], python: str) -> dict[str, Any]:
        """Unmount the run's storage-layer mounts on its hosts, one helper step each, before the allocation goes
        (after it, nothing of ours runs there): a server killed with its step leaves a dead mount, and the live
        ones end their servers. Returns the history's ``storage_swept`` record."""
        argv = ["srun", "--overlap", f"--jobid={job_id}", f"--nodes={len(hosts)}", f"--ntasks={len(hosts)}",
                "--ntasks-per-node=1", f"--nodelist={','.join(hosts)}", f"--job-name={run_id[-6:]}-sweep",
                "--kill-on-bad-exit=0", python, "-m", "chaos.storage", "sweep", "--run-id", run_id]
        record: dict[str, Any] = {"event": Ev.STORAGE_SWEPT, "hosts": hosts, "ok": False, "unmounted": []}
        try:
            proc = _run(argv, timeout=HELPER_TIMEOUT_S, env=helper_environ())
            record.update(ok=proc.returncode == 0,
                          unmounted=[line.strip() for line in proc.stdout.splitlines() if "unmounted" in line])
            if proc.returncode != 0:
                record["why"] = f"srun exited {proc.returncode}: {proc.stderr.strip()[-200:]}"
        except (OSError, subprocess.TimeoutExpired) as exc:
            record["why"] = f"srun: {exc}"
        return record

    def describe(self) -> dict[str, Any]:
        return {"runtime": self.name, "slurm": self.options.model_dump(exclude_none=True),
                "crash_mechanism": "scancel --signal=KILL JOB.STEP", "freeze_mechanism": "scancel --signal=STOP/CONT "
                "JOB.STEP, checked by process state", "kill_worker_mechanism": "a helper job step signals the workers",
                "host_loss_mechanism": "docker kill of the host's container by the container cluster's agent",
                "network_mechanism": "iptables/tc in the host container's network namespace, run by the container "
                "cluster's agent (nsenter --net)"}
