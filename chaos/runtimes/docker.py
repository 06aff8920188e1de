"""The docker runtime: one container per node on an internal network the run creates, through the Docker SDK.

The network is ``internal`` with an explicit subnet, so nothing routes off the machine. The repository (workload
code and the ``chaos`` package) is bind-mounted read-only and the run directory read-write at the same paths as
on the host: a code change needs no image rebuild, and commands, the history file and checkpoints have the same
paths inside and out. Every object is labelled ``torch-chaos=<run-id>`` plus the engine's pid, so teardown and
``chaos cleanup`` remove exactly what torch-chaos made, and tell orphans of a dead engine from live runs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from pydantic import Field

from chaos.capabilities import (
    CHECKPOINT_STORAGE,
    CPU_QUOTA,
    FREEZE,
    KILL,
    KILL_WORKERS,
    LAYER_OUTLIVES_NODE,
    MEMORY_CGROUP,
    NODE_NETWORK,
    RENDEZVOUS_SERVERS,
    STORAGE_LAYER,
)
from chaos.cgroup import layout, proc_cgroup
from chaos.events import NODE_BANNER, signal_exit_code
from chaos.image import VENV, ImageBuildError, build_image_with, image_tag, image_with
from chaos.machine import APT, Check
from chaos.marks import DELAYERS, ENGINE_VAR, TREE_VAR, engine_mark, kill_marked, with_local_rank
from chaos.plan import (
    OWN_STACK_ENV,
    OWN_STACK_STORE_PORT,
    REPO_ROOT,
    STORE_NODE,
    Addressing,
    NodePlan,
    Plan,
    node_names,
    rendezvous_server_names,
)
from chaos.registry import launcher_of
from chaos.runtimes.base import Runtime
from chaos.spec import Strict

if TYPE_CHECKING:
    from chaos.scenario import Scenario

LABEL = "torch-chaos"
ENGINE_LABEL = "torch-chaos.engine-pid"
# /24s carved from this block for run networks; one not used by any existing docker network is picked.
POOL = ipaddress.ip_network("172.30.0.0/16")
EXIT_POLL_S = 0.2


class DockerUnavailable(RuntimeError):
    """The engine cannot be reached or the image is missing: what to run is in the message."""


def client() -> Any:
    try:
        import docker
    except ImportError:
        raise DockerUnavailable("the docker SDK is missing: pip install docker") from None
    try:
        c = docker.from_env(timeout=60)
        c.ping()
    except Exception as exc:
        raise DockerUnavailable(f"no Docker engine reachable ({type(exc).__name__}); start it: "
                                "`systemctl start docker`, or `dockerd &` (apt-get install -y docker.io)") from None
    return c


def used_subnets(c: Any) -> list[ipaddress.IPv4Network]:
    nets = []
    for net in c.api.networks():
        for cfg in (net.get("IPAM") or {}).get("Config") or []:
            try:
                nets.append(ipaddress.ip_network(cfg.get("Subnet", ""), strict=False))
            except ValueError:
                continue
    return [n for n in nets if isinstance(n, ipaddress.IPv4Network)]


def pick_subnet(run_id: str, used: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    subnets = list(POOL.subnets(new_prefix=24))
    start = zlib.crc32(run_id.encode()) % len(subnets)
    for k in range(len(subnets)):
        candidate = subnets[(start + k) % len(subnets)]
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise DockerUnavailable(f"every /24 in {POOL} is taken by a docker network; remove some (`chaos cleanup --all`)")


def _engine_dead(labels: dict[str, str]) -> bool:
    pid = labels.get(ENGINE_LABEL, "")
    return not (pid.isdigit() and psutil.pid_exists(int(pid)))


def remove_objects(run_id: str | None, only_orphans: bool = False) -> list[str]:
    """Remove torch-chaos containers, then networks (one run's, or every run's); returns what went."""
    try:
        c = client()
    except DockerUnavailable:
        return []
    selector = f"{LABEL}={run_id}" if run_id else LABEL
    removed = []
    for ct in c.api.containers(all=True, filters={"label": selector}):
        if only_orphans and not _engine_dead(ct.get("Labels") or {}):
            continue
        try:
            c.api.remove_container(ct["Id"], force=True)
            removed.append(f"container {ct['Names'][0].lstrip('/')}")
        except Exception as exc:  # keep going: one stubborn container must not strand the rest
            removed.append(f"container {ct['Names'][0].lstrip('/')} NOT removed: {exc}")
    for net in c.api.networks(filters={"label": selector}):
        if only_orphans and not _engine_dead(net.get("Labels") or {}):
            continue
        try:
            c.api.remove_network(net["Id"])
            removed.append(f"network {net['Name']}")
        except Exception:  # still has endpoints of a live run: leave it
            continue
    return removed


SERVER_BIN = "/opt/torch-chaos/bin"


def host_binary(argv: list[str], binds: dict[str, dict[str, str]]) -> list[str]:
    """A rendezvous server's command line (an etcd member) made to run the host's own binary, bound read-only
    into the container: the node image is Python and torch only, and the server is the same program the local
    and netns runtimes run (Debian's etcd is linked against libc alone, as the image's Debian has it)."""
    binary = shutil.which(argv[0])
    if binary is None:
        raise RuntimeError(f"{argv[0]} is not installed on this host: the docker runtime runs a rendezvous server "
                           "from the host's binary (chaos doctor names the package)")
    inside = f"{SERVER_BIN}/{Path(binary).name}"
    binds[os.path.realpath(binary)] = {"bind": inside, "mode": "ro"}
    return [inside, *argv[1:]]


class DockerOptions(Strict):
    image: str | None = Field(None, description="image to run nodes in (default: the one `chaos image build` makes "
                              "for this torch version)")


# How long a crash waits for the daemon's `die` event of the killed container (it came 27 ms after the kill here).
DIE_WAIT_S = 2.0


class DockerRuntime(Runtime):
    name = "docker"
    summary = "one container per node on an internal network (needs dockerd and `chaos image build`)"
    capabilities = frozenset({KILL, KILL_WORKERS, FREEZE, NODE_NETWORK, CHECKPOINT_STORAGE, STORAGE_LAYER,
                              LAYER_OUTLIVES_NODE, MEMORY_CGROUP, CPU_QUOTA, RENDEZVOUS_SERVERS})
    options = DockerOptions
    cleanup_order = 10  # containers first: their processes carry marks too, a paused one dies only with it

    @classmethod
    def create(cls, scenario: Scenario, run_id: str, run_dir: str | Path) -> Runtime:
        runtime = cls(run_id, run_dir, image=scenario.cluster.docker.image)
        # A launcher whose nodes need more than torch (Ray) runs in the node image plus its packages, made from the
        # node image on first use (chaos.image.build_image_with), unless the scenario names its own image.
        packages = launcher_of(scenario.cluster).image_packages()
        if packages and scenario.cluster.docker.image is None:
            runtime.image, runtime.image_packages = image_with(packages), packages
        return runtime

    @classmethod
    def machine_checks(cls, options: Any = None) -> list[Check]:
        return docker_checks(options.image if options is not None else None)

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        return remove_objects(run_id, only_orphans=only_orphans)

    def __init__(self, run_id: str, run_dir: str | Path, image: str | None = None):
        super().__init__(run_id, run_dir)
        self.image = image or image_tag()
        self.image_packages: tuple[str, ...] = ()  # built into self.image from the node image when missing
        self.short = run_id[-6:]
        self.network_name = f"tchaos-{self.short}"
        self.addresses: dict[str, str] = {}
        self.subnet: ipaddress.IPv4Network | None = None
        self._client: Any = None
        self._ids: dict[str, str] = {}
        self._states: dict[str, tuple[float, dict[str, Any]]] = {}
        self._ns_fds: list[int] = []
        self._died: dict[str, float] = {}  # when the daemon saw a killed node's container die (effect_time)

    @property
    def docker(self) -> Any:
        if self._client is None:
            self._client = client()
        return self._client

    def container_name(self, name: str) -> str:
        return f"tchaos-{self.short}-{name}"

    def labels(self) -> dict[str, str]:
        return {LABEL: self.run_id, ENGINE_LABEL: str(os.getpid())}

    def addressing(self, scenario: Scenario) -> Addressing:
        try:
            used = used_subnets(self.docker)
        except DockerUnavailable:
            used = []  # a dry run on a machine without an engine still shows the plan
        self.subnet = pick_subnet(self.run_id, used)
        hosts = list(self.subnet.hosts())
        names = node_names(scenario)
        servers = rendezvous_server_names(scenario.cluster)
        self.addresses = {n: str(hosts[249] if n == STORE_NODE else hosts[239 + servers.index(n)] if n in servers
                                 else hosts[9 + i]) for i, n in enumerate(names)}
        # The engine's channel listens on the network's gateway: the host's side of the run's bridge, which
        # every container reaches, not routed off the machine (the network is internal); the run's token keeps
        # out what else could reach it (docs/design.md, "The history channel").
        return Addressing(dict(self.addresses), OWN_STACK_STORE_PORT, python=f"{VENV}/bin/python",
                          env=dict(OWN_STACK_ENV), channel_host=str(hosts[0]))

    def prepare(self, plan: Plan) -> None:
        import docker.types

        if self.image_packages and not self.docker.api.images(name=self.image):
            with open(self.run_dir / "logs" / "image.log", "a") as log:
                try:
                    build_image_with(self.image_packages, log=lambda line: print(line, file=log, flush=True))
                except ImageBuildError as exc:
                    raise DockerUnavailable(str(exc)) from None
        if not self.docker.api.images(name=self.image):
            raise DockerUnavailable(f"image {self.image} is not built here: run `chaos image build`")
        assert self.subnet is not None
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(
            subnet=str(self.subnet), gateway=str(next(self.subnet.hosts())))])
        self.docker.networks.create(self.network_name, driver="bridge", internal=True, ipam=ipam,
                                    labels=self.labels(), check_duplicate=True)

    def start_node(self, node: NodePlan) -> None:
        api = self.docker.api
        cname = self.container_name(node.name)
        for existing in api.containers(all=True, filters={"name": f"^/{cname}$"}):
            api.remove_container(existing["Id"], force=True)  # a replacement keeps the same name and address
        log = self.log_path(node.name)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as fh:
            fh.write(f"\n{NODE_BANNER}{node.name} at {time.time():.3f}\n".encode())
        env = {**node.env, "PYTHONPATH": str(REPO_ROOT), TREE_VAR: f"{self.run_id}/{node.name}",
               ENGINE_VAR: engine_mark()}
        binds = {str(REPO_ROOT): {"bind": str(REPO_ROOT), "mode": "ro"},
                 str(self.run_dir): {"bind": str(self.run_dir), "mode": "rw"}}
        argv = node.argv
        if node.role == "server":
            argv = host_binary(argv, binds)
        host_config = api.create_host_config(
            binds=binds,
            network_mode=self.network_name, init=True, shm_size="256m",
            # cluster.resources.cpus: the container's cgroup cpuset, the node's own cores
            cpuset_cpus=",".join(map(str, node.cpus)) if node.cpus is not None else None)
        networking = api.create_networking_config({self.network_name: api.create_endpoint_config(
            ipv4_address=self.addresses[node.name])})
        created = api.create_container(
            self.image, command=["/bin/sh", "-c", 'exec "$@" >>"$0" 2>&1', str(log), *argv],
            name=cname, hostname=node.name, environment=env, labels=self.labels(), working_dir=str(self.run_dir),
            host_config=host_config, networking_config=networking, detach=True)
        api.start(created["Id"])
        self._ids[node.name] = created["Id"]

    def _state(self, name: str, max_age_s: float = 0.0) -> dict[str, Any] | None:
        cid = self._ids.get(name)
        if cid is None:
            return None
        cached = self._states.get(cid)
        if cached is not None and time.monotonic() - cached[0] <= max_age_s:
            return cached[1]
        import docker.errors

        try:
            state = dict(self.docker.api.inspect_container(cid)["State"])
        except docker.errors.NotFound:
            state = {"Status": "removed", "ExitCode": -9, "Pid": 0}
        except Exception:
            # A slow or restarting engine is not a dead node: keep the last known state (running if none).
            return cached[1] if cached is not None else {"Status": "running", "ExitCode": 0, "Pid": 0}
        self._states[cid] = (time.monotonic(), state)
        return state

    def exit_code(self, name: str) -> int | None:
        # The engine asks every tick; an API round trip per node per tick would compete with training for CPU.
        state = self._state(name, max_age_s=EXIT_POLL_S)
        if state is None or state["Status"] in ("created", "running", "paused", "restarting"):
            return None
        return signal_exit_code(int(state["ExitCode"]))  # docker says 137 for a SIGKILL: -9, as on every runtime

    def _pid(self, name: str) -> int:
        state = self._state(name)
        if not state or not state.get("Pid"):
            raise RuntimeError(f"{name} is not running")
        return int(state["Pid"])

    def kill(self, name: str) -> str:
        state = self._state(name) or {}
        asked = time.time()
        self.docker.api.kill(self._ids[name], signal="SIGKILL")
        if state.get("Status") == "paused":
            with contextlib.suppress(Exception):  # the engine may have unpaused it on the way to the kill
                self.docker.api.unpause(self._ids[name])
        died = self._died_at(self._ids[name], asked)
        if died is not None:
            self._died[name] = died
        return "docker kill (SIGKILL to the container's init: every process in it dies)"

    def _died_at(self, cid: str, asked: float) -> float | None:
        """When the daemon saw the container die (the ``die`` event of its event stream, its own clock: this host's),
        waiting at most :data:`DIE_WAIT_S` for it; None when it did not come or the stream failed.

        Why: ``docker kill`` returns tens of milliseconds after the container is dead (measured: the daemon logged
        the kill at +18 ms and the death at +45 ms, the call returned at +104 ms), and recovery counts from the
        fault's time, so the fault's time is the death, not the return (issue 36)."""
        try:
            stream = self.docker.api.events(since=int(asked) - 1, until=int(time.time() + DIE_WAIT_S) + 1,
                                            filters={"container": cid, "event": "die"}, decode=True)
        except Exception:  # an engine that will not stream events: the fault's time stays the call's return
            return None
        try:
            for event in stream:
                at = event.get("timeNano", 0) / 1e9 or float(event.get("time", 0))
                if at >= asked - 0.5:  # this kill's death, not an older one of the same container
                    return at
        except Exception:
            return None
        finally:
            with contextlib.suppress(Exception):
                stream.close()
        return None

    def effect_time(self, name: str) -> float | None:
        """A crash's effect: when the daemon saw the container die (:meth:`_died_at`); None for other faults."""
        return self._died.pop(name, None)

    def kill_workers(self, name: str, sig: int = signal.SIGKILL, local_rank: int | None = None) -> str:
        init = psutil.Process(self._pid(name))  # docker-init; its child is torchrun (or the training process)
        agents = init.children()
        tree = [p for a in agents for p in (a, *a.children(recursive=True))]
        workers = self.select_workers(tree, agents[0].pid) if agents else []
        workers = [p for p in workers if p.pid not in {a.pid for a in agents}]
        what = signal.Signals(sig).name
        if not workers:
            if sig == signal.SIGKILL:
                self.kill(name)
                return "docker kill (the training process is the container's only process: no launcher on this node)"
            workers = agents  # the training process itself: it dies of the signal, and the container with it
        chosen = with_local_rank(workers, local_rank) if workers is not agents else workers
        if not chosen:
            raise RuntimeError(f"{name} has no worker with LOCAL_RANK={local_rank}")
        for proc in chosen:
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
        return f"{what} to {len(chosen)} worker process(es) from the host; {self.agent_words()}"

    def node_pids(self, name: str) -> list[int]:
        init = psutil.Process(self._pid(name))
        return [init.pid] + [p.pid for p in init.children(recursive=True)]

    def memory_cgroup(self, name: str) -> Path:
        lay = layout()
        if lay is None:
            raise RuntimeError("no memory cgroup controller on this machine")
        return proc_cgroup(self._pid(name), lay)

    def cpu_quota(self, name: str) -> tuple[int, int]:
        host = self.docker.api.inspect_container(self._ids[name])["HostConfig"]
        if host.get("NanoCpus"):
            raise RuntimeError(f"{name}'s container has a --cpus limit (NanoCpus), which docker refuses to combine "
                               "with a CPU quota")
        return int(host.get("CpuQuota") or 0), int(host.get("CpuPeriod") or 0)

    def set_cpu_quota(self, name: str, quota_us: int, period_us: int) -> str:
        # docker update ignores 0 ("leave as is"), so "no quota" is written as the kernel's -1 (and its default
        # period): the cgroup reads back exactly as before; docker's record then says -1/100000 instead of unset.
        quota, period = (quota_us, period_us) if quota_us > 0 else (-1, period_us or 100_000)
        self.docker.api.update_container(self._ids[name], cpu_quota=quota, cpu_period=period)
        return f"docker update --cpu-quota {quota} --cpu-period {period} (the container's CFS quota)"

    def freeze(self, name: str) -> str:
        self.docker.api.pause(self._ids[name])
        return "docker pause (cgroup freezer on every process of the container)"

    def thaw(self, name: str) -> None:
        state = self._state(name) or {}
        if state.get("Status") == "paused":
            self.docker.api.unpause(self._ids[name])

    def net_enter(self, name: str) -> list[str]:
        # Pinned by an open descriptor: a fault heals the namespace it was applied to even if the container was
        # replaced meanwhile (its pid may then belong to anyone, even a process in the host's namespace).
        fd = os.open(f"/proc/{self._pid(name)}/ns/net", os.O_RDONLY)
        self._ns_fds.append(fd)
        return ["nsenter", f"--net=/proc/{os.getpid()}/fd/{fd}", "--"]

    def teardown(self) -> list[str]:
        for fd in self._ns_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._ns_fds.clear()
        # Helper processes on the host (NFQUEUE delayers) carry the run's mark like node processes do.
        cleaned = [f"process {p.pid}" for p in kill_marked(f"{self.run_id}/{DELAYERS}")]
        if self._client is None:
            return cleaned
        for name, cid in self._ids.items():  # unpause first: removing a frozen container can hang on cgroup v1
            state = self._state(name) or {}
            if state.get("Status") == "paused":
                with contextlib.suppress(Exception):
                    self.docker.api.unpause(cid)
        return cleaned + remove_objects(self.run_id)

    def describe(self) -> dict[str, Any]:
        return {"runtime": self.name, "image": self.image, "network": f"{self.network_name} (internal, "
                f"subnet {self.subnet})", "freeze_mechanism": "docker pause (cgroup freezer)",
                "crash_mechanism": "docker kill (SIGKILL)"}


def docker_checks(image: str | None = None) -> list[Check]:
    """The engine, the node image, and debootstrap (needed only while the image is not built)."""
    tag = image or image_tag()
    have_debootstrap = shutil.which("debootstrap") is not None
    try:
        c = client()
    except DockerUnavailable as exc:
        # without an engine the image cannot be looked up, so debootstrap may well be needed: say so now
        return [Check("docker engine", False, str(exc).split(";")[0],
                      f"{APT} docker.io && (dockerd > /var/log/dockerd.log 2>&1 &)"),
                Check("docker image", False, f"{tag}: cannot tell without an engine", "chaos image build"),
                Check("debootstrap (offline image build)", have_debootstrap,
                      "present" if have_debootstrap else "missing (needed unless the image is built)",
                      f"{APT} debootstrap")]
    version = c.version().get("Version", "?")
    present = bool(c.api.images(name=tag))
    return [Check("docker engine", True, f"reachable, version {version}"),
            Check("docker image", present, f"{tag} {'built' if present else 'not built'}",
                  "" if present else "chaos image build"),
            Check("debootstrap (offline image build)", have_debootstrap or present,
                  "present" if have_debootstrap else "missing (not needed: the image is built)" if present
                  else "missing", f"{APT} debootstrap")]
