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

This module is the Runtime interface and the allocation's lifecycle (salloc, the shared-directory check, the
observer, teardown, cleanup); it delegates to its parts: :mod:`~chaos.runtimes.slurm_steps` (the nodes' job steps),
:mod:`~chaos.runtimes.slurm_hosts` (where each node runs, the spares, lost hosts), :mod:`~chaos.runtimes.slurm_network`
(the channel's address towards the nodes, the cluster agent's network access) and
:mod:`~chaos.runtimes.slurm_commands` (the words to Slurm).
"""

from __future__ import annotations

import contextlib
import getpass
import math
import os
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
from chaos.cluster.agent import AgentError, ask, read_config
from chaos.cluster.spec import clusters_up, engine_run_argv
from chaos.events import Ev
from chaos.machine import Check
from chaos.marks import kill_marked
from chaos.plan import OWN_STACK_STORE_PORT, Addressing, NodePlan, Plan, node_names
from chaos.registry import fault_plugins
from chaos.runtimes.base import NodeLogs, Runtime, Unsupported
from chaos.runtimes.slurm_commands import AGENT_FILE_ENV as AGENT_FILE_ENV  # read from here by callers
from chaos.runtimes.slurm_commands import (  # the runtime's words to Slurm (options, argv, parsers)
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
    agent_file,
    comment_orphaned,
    engine_comment,
    helper_environ,
    job_name,
    nodes_pythonpath,
    parse_job_id,
    parse_jobs,
    parse_node_states,
    run_slurm,
    salloc_argv,
    slurm_environ,
    srun_argv,
    substitute,
    time_limit_s,
)
from chaos.runtimes.slurm_hosts import Hosts, return_leftover_hosts
from chaos.runtimes.slurm_network import (
    channel_addresses,
    channel_check,
    channel_socket,
    cleanup_rules,
    host_address,
    net_by,
    net_enter,
)
from chaos.runtimes.slurm_steps import Steps
from chaos.storage.layer import choose

if TYPE_CHECKING:
    from chaos.machine import Check
    from chaos.scenario import Scenario

_run = run_slurm  # a module name tests replace to answer for Slurm


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
        if options is not None and (channel := channel_check(options)) is not None:
            checks.append(channel)
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
        removed = return_leftover_hosts(run_id, only_orphans)
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
        return removed + cleanup_rules(run_id)

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

    def __init__(self, run_id: str, run_dir: str | Path, options: SlurmOptions | None = None):
        super().__init__(run_id, run_dir)
        self.options = options or SlurmOptions()
        self.alloc = Hosts(run_id, self._emit)  # the allocation's hosts, and which are lost
        self.channel_host: str | None = None  # the address the nodes are given (CHAOS_CHANNEL)
        self.channel_bind: str | None = None  # the address the engine listens on (the same, but for 0.0.0.0/::)
        self._channel_warning: str | None = None
        self._logs = NodeLogs(self.log_path)
        self.steps = Steps(run_id, self.run_dir, self.python, self.alloc, self._logs, self.log_path, self._emit)
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._observer: threading.Thread | None = None

    def _emit(self, event: dict[str, Any]) -> None:
        """A history event for observe() to hand on (from the observer thread and the engine's alike)."""
        with self._lock:
            self._events.append(event)

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
                self.alloc.job_id = parse_job_id(said)  # a job that exists is cancelled at teardown
            raise RuntimeError(f"salloc refused the allocation (exit {proc.returncode}): {said[-500:] or '(nothing)'}; "
                               "check cluster.slurm (partition, account, time, extra_args) against `sinfo` and "
                               f"your accounts; the line was: {shlex.join(argv)}")
        alloc = self.alloc
        alloc.job_id = parse_job_id(said)
        nodelist = _run(["squeue", "-h", "-j", alloc.job_id, "-o", "%N"]).stdout.strip()
        if not nodelist:
            raise RuntimeError(f"squeue lists no hosts for job {alloc.job_id} right after salloc granted it")
        alloc.hosts = _run(["scontrol", "show", "hostnames", nodelist]).stdout.split()
        salloc_s = time.monotonic() - start
        services = ([plan.store.name] if plan.store else []) + [s.name for s in plan.servers]
        wanted = services + [n.name for n in plan.nodes]
        if len(alloc.hosts) < len(wanted):
            raise RuntimeError(f"salloc gave {len(alloc.hosts)} host(s) ({nodelist!r}) for {len(wanted)} node(s)")
        alloc.host_of = dict(zip(wanted, alloc.hosts[:len(wanted)], strict=True))
        alloc.spares = alloc.hosts[len(wanted):]
        self.channel_host, self.channel_bind, self._channel_warning = channel_addresses(self.options, alloc.hosts[0])
        if self._channel_warning:
            print(f"warning: {self._channel_warning}", file=sys.stderr)
        self._check_shared_run_dir()
        port = (plan.channel or '').rpartition(':')[2]
        self._emit({"event": Ev.SLURM_ALLOCATED, "job_id": alloc.job_id, "hosts": alloc.hosts,
                    "nodes": dict(alloc.host_of), "spares": list(alloc.spares),
                    "channel": f"{self.channel_host}:{port}",
                    **({"channel_bind": f"{self.channel_bind}:{port}"} if self.channel_bind != self.channel_host
                       else {}),
                    **({"warning": self._channel_warning} if self._channel_warning else {}),
                    "salloc_s": round(salloc_s, 3), "command": argv})
        self._observer = threading.Thread(target=self._observe_loop, name="torch-chaos-slurm-observer", daemon=True)
        self._observer.start()

    def _check_shared_run_dir(self) -> None:
        """Every allocated host must see the run directory: the checkpoints are there (a replacement on a spare
        resumes from them; corrupt_checkpoint changes them), and so is each step's working directory. A directory
        only the login node has would make checkpoints host-local, with no error from Slurm, so one step per host
        looks for a file written here just now."""
        job_id, names = self.alloc.job_id, self.alloc.hosts
        assert job_id is not None
        probe = self.run_dir / f".visible-{os.getpid()}-{time.monotonic_ns()}"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        hosts = len(names)
        check = ["test", "-e", str(probe)]
        if self.storage_layer is not None:  # the same step asks each host whether it can serve the layer
            check = [self.python, "-m", "chaos.storage", "check-host", "--visible", str(probe)]
            if getattr(self.storage_layer, "passthrough", False):  # storage.passthrough: each host must do it too
                check.append("--passthrough")
        try:
            proc = _run(["srun", "--overlap", f"--jobid={job_id}", f"--nodes={hosts}", f"--ntasks={hosts}",
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
                               f"({', '.join(names)}; srun exit {proc.returncode}: "
                               f"{proc.stderr.strip()[-300:] or 'a host did not find it'}): run with --out on a "
                               "filesystem every host shares (the checkpoints and the nodes' working directories "
                               "are there)")

    def channel_socket(self, host: str, port: int) -> socket.socket:
        return channel_socket(self.channel_bind, port)

    # --- nodes -------------------------------------------------------------------------------------------------

    def _substituted(self, node: NodePlan) -> tuple[list[str], dict[str, str]]:
        assert self.channel_host is not None
        hosts = dict(self.alloc.host_of)
        argv = [substitute(a, hosts, self.channel_host) for a in node.argv]
        env = {k: substitute(v, hosts, self.channel_host) for k, v in node.env.items()}
        return argv, env

    def can_replace(self, name: str) -> str | None:
        return self.alloc.can_replace(name)

    def start_node(self, node: NodePlan) -> None:
        if self.alloc.job_id is None:
            raise RuntimeError("no Slurm allocation: prepare() was not called")
        host, replacement = self.alloc.place(node.name, self.steps.started(node.name))
        argv, env = self._substituted(node)
        if self.storage_layer is not None:
            argv = self.storage_layer.node_command(self.python, argv)
        self.steps.start(node.name, host, replacement, argv, env)

    def exit_code(self, name: str) -> int | None:
        return self.steps.exit_code(name)

    def helper(self, name: str, action: str, *args: str) -> dict[str, Any]:
        """Run the helper as a step on ``name``'s host; its JSON answer."""
        return self.steps.helper(name, action, *args)

    def effect_time(self, name: str) -> float | None:
        return self.steps.effect_time(name)

    def kill(self, name: str) -> str:
        step = self.steps.step_id(name)
        said = self.steps.scancel("KILL", step, name)
        proc = self.steps.procs[name]
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        how = f"scancel --signal=KILL {step} ({said}) on {self.alloc.host_of[name]}"
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
                                                          else "") + f" on {self.alloc.host_of[name]}")
        if answer.get("no_launcher"):
            return (f"{what} to the training process on {self.alloc.host_of[name]} (no launcher on this node), by a "
                    "helper step")
        return (f"{what} to {len(signalled)} worker process(es) on {self.alloc.host_of[name]} (pid "
                f"{', '.join(map(str, signalled))}) by a helper job step; the torchrun agent stays")

    def freeze(self, name: str) -> str:
        step = self.steps.step_id(name)
        said = self.steps.scancel("STOP", step, name)
        how = f"scancel --signal=STOP {step} ({said})"
        try:
            states = self.steps.states_of(name)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            # the STOP is sent: recorded as injected, so its heal (CONT) runs, with what could not be checked
            return f"{how} on {self.alloc.host_of[name]}: the processes' state not checked ({exc})"
        if not states:
            raise RuntimeError(f"no process of {name} on {self.alloc.host_of[name]}: the freeze acted on nothing")
        running = [p for p, s in states.items() if s != "T"]
        if running:  # not every process stopped (outside the step's tracking, or the signal was lost)
            with contextlib.suppress(RuntimeError, OSError, ValueError, subprocess.TimeoutExpired):
                self.helper(name, "signal-all", "--signal", str(int(signal.SIGSTOP)))
            how += f"; {len(running)} process(es) still running, sent SIGSTOP by a helper step"
            try:
                states = self.steps.states_of(name)  # read again: the claim below is what the host says now
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
                return f"{how}: their state after it not checked ({exc})"
        stopped = sum(1 for s in states.values() if s == "T")
        return (f"{how}: {stopped} of {len(states)} process(es) on {self.alloc.host_of[name]} stopped (state T, read "
                "by a helper step)")

    def thaw(self, name: str) -> None:
        if self.exit_code(name) is not None:
            return
        with contextlib.suppress(RuntimeError):
            self.steps.scancel("CONT", self.steps.step_id(name, wait_s=2))
        stopped = [p for p, s in self.steps.states_of(name).items() if s == "T"]
        if stopped:
            self.helper(name, "signal-all", "--signal", str(int(signal.SIGCONT)))

    def node_pids(self, name: str) -> list[int]:
        raise Unsupported("the slurm runtime's nodes are processes on other hosts")

    # --- host loss, through the cluster agent ------------------------------------------------------------------

    def lose_host(self, name: str) -> tuple[str, dict[str, Any]]:
        return self.alloc.lose(name)

    def return_host(self, host: str) -> dict[str, Any]:
        return self.alloc.give_back(host)

    # --- the hosts' networks, through the cluster agent ----------------------------------------------------------

    def net_enter(self, name: str) -> list[str]:
        return net_enter(self.alloc.host_of[name])

    def net_where(self, name: str) -> str:
        return f"{name} ({self.alloc.host_of[name]})"

    def net_by(self) -> str | None:
        return net_by()

    def net_address(self, plan: Plan, name: str) -> str:
        return host_address(self.alloc.host_of[name])

    # --- Slurm's view --------------------------------------------------------------------------------------------

    def _observe_loop(self) -> None:
        """Ask Slurm about the allocated hosts every POLL_S, and about this job's steps every STARTING_POLL_S while
        a started step is not listed yet (a thread: never blocks a tick). It wakes every STARTING_POLL_S, so a
        step started between two host polls is still timed to that resolution."""
        assert self.alloc.job_id is not None
        hosts = ",".join(self.alloc.hosts)
        last_hosts = -POLL_S
        while not self._stop.wait(STARTING_POLL_S):
            now = time.monotonic()
            ask_hosts = now - last_hosts >= POLL_S
            if not ask_hosts and not self.steps.starts:
                continue
            try:
                if ask_hosts:
                    last_hosts = now
                    self.alloc.record_states(parse_node_states(
                        _run(["sinfo", "-h", "-N", "-n", hosts, "-o", "%N %t"], timeout=10).stdout))
                if self.steps.starts:
                    self.steps.record_listed(self.steps.listed())
            except (OSError, subprocess.TimeoutExpired):
                continue

    def observe(self) -> list[dict[str, Any]]:
        with self._lock:
            out, self._events = self._events, []
        return out

    # --- teardown ----------------------------------------------------------------------------------------------

    def teardown(self) -> list[str]:
        self._stop.set()
        cleaned: list[str] = []
        job_id = self.alloc.job_id
        live = [h for h in self.alloc.hosts if h not in self.alloc.lost]
        if job_id is not None and self.storage_layer is not None and live:
            swept = self._sweep_storage(job_id, self.run_id, live, self.python)
            cleaned += [f"storage mount ({u})" for u in swept["unmounted"]]
            self._emit(swept)
        if job_id is not None:
            released: dict[str, Any] = {"event": Ev.SLURM_RELEASED, "job_id": job_id, "ok": False}
            try:  # teardown must go on: the srun clients, the marks and the logs below are this engine's own
                done = _run(["scancel", job_id])
                released["ok"] = done.returncode == 0
                if not released["ok"]:
                    released["why"] = f"scancel exited {done.returncode}: {done.stderr.strip()[:200]}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                released["why"] = f"scancel: {exc}"
            if released["ok"]:
                cleaned.append(f"slurm job {job_id}")
            self._emit(released)
        # Ctrl-C while salloc waited: the job may exist without its id known here; its name finds it.
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            _run(["scancel", f"--name={job_name(self.run_id)}", f"--user={getpass.getuser()}"])
        self.steps.wait_clients()
        cleaned += [f"process {p.pid}" for p in kill_marked(self.run_id)]
        cleaned += self.alloc.give_all_back()
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
