"""``chaos cluster up slurm``: a Slurm 22.05 controller and N compute containers from Debian's packages.

The image is the node image (:mod:`chaos.image`) plus Debian's ``slurmctld slurmd slurm-client munge`` and an
unprivileged user. It is built offline: the host's apt (its mirror, its proxy settings) downloads exactly the
packages the node image lacks (apt resolves against the image's own dpkg status), and ``docker build`` installs
them with no network at all. Its tag hashes every input, like the node image's, so a second build is a lookup.

``up`` creates an internal network, a shared volume and the containers (every object labelled, see
:mod:`chaos.cluster.spec`), puts one ``slurm.conf`` and a munge key made for this cluster into each, waits (bounded)
until ``sinfo`` shows every node idle, and writes the state file that the Slurm runtime reads. Any failure on the
way removes what was made. ``down`` removes everything by label, whatever the state file says.

The docker SDK is imported inside functions: ``chaos`` must import without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from chaos.cluster.spec import (
    AGENT_DIR,
    AGENT_FILE,
    CLUSTER_LABEL,
    CONTROLLER,
    ENTRYPOINT,
    HOME,
    ID_LABEL,
    MUNGE_KEY,
    PID_LABEL,
    ROLE_LABEL,
    SHARED_PATH,
    SLURM_CONF,
    STATE_LABEL,
    UID,
    USER,
    ClusterSpec,
    agent_config_path,
    check_name,
    check_nodes,
    read_state,
    slurm_conf,
    state,
    state_path,
)
from chaos.image import VENV, ImageBuildError, _build_lock, _client, image_tag
from chaos.machine import APT, Check
from chaos.plan import REPO_ROOT
from chaos.runtimes.docker import pick_subnet, used_subnets

SLURM_REPO = "torch-chaos-slurm"
# fuse3 (fusermount3, setuid) and libfuse3: the storage layer on each compute host mounts as the cluster's user.
SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "fuse3", "libfuse3-3")
# Bump whenever the recipe below changes what ends up in the image (the tag hashes it anyway; this is for humans).
SLURM_RECIPE_VERSION = "1"
DEFAULT_TIMEOUT_S = 60.0
POLL_S = 0.2
# Compute hosts get /dev/fuse and CAP_SYS_ADMIN in their bounding set: fusermount3 (setuid root) mounts the
# storage layer for the unprivileged user, as on a real cluster's compute node; the user gains nothing else.
FUSE_DEVICE = "/dev/fuse"
FUSE_FLAGS = f"--device {FUSE_DEVICE} --cap-add SYS_ADMIN"
AGENT_START_S = 15.0  # the agent imports the docker SDK and binds; seconds at most

# The container's command: munged, then slurmctld or slurmd in the foreground (logs go to `docker logs`).
# docker-init is PID 1 (init=True), so steps' zombies are reaped; the directories Slurm and munge want are made
# here because /run is fresh in every container.
ENTRY_SCRIPT = f"""\
#!/bin/sh
# torch-chaos Slurm node: $1 = controller | compute, $2 = this node's Slurm name
set -eu
chown munge:munge {MUNGE_KEY} && chmod 0400 {MUNGE_KEY}
mkdir -p /run/munge /run/slurm /var/log/munge /var/lib/munge /var/spool/slurmd /var/spool/slurmctld
chown munge:munge /run/munge /var/log/munge /var/lib/munge
chown slurm:slurm /run/slurm /var/spool/slurmctld
runuser -u munge -- /usr/sbin/munged
case "$1" in
  controller) chown {UID}:{UID} {SHARED_PATH}; exec /usr/sbin/slurmctld -D -i ;;
  compute) exec /usr/sbin/slurmd -D -N "$2" ;;
  *) echo "usage: $0 controller|compute NODE" >&2; exit 2 ;;
esac
"""

DOCKERFILE = f"""\
FROM {{base}}
COPY debs /tmp/debs
COPY tchaos-slurm-node {ENTRYPOINT}
RUN printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /tmp/debs/*.deb \\
 && rm -rf /tmp/debs /usr/sbin/policy-rc.d /usr/share/doc /usr/share/man {MUNGE_KEY} \\
 && groupadd -g {UID} {USER} && useradd -m -d {HOME} -u {UID} -g {UID} -s /bin/bash {USER} \\
 && mkdir -p {SHARED_PATH} && chown {UID}:{UID} {SHARED_PATH} && chmod 0755 {ENTRYPOINT}
"""


class ClusterError(RuntimeError):
    """Something the user can act on; the message says what to run."""


@dataclass
class Step:
    """One thing ``up`` does, as the docker CLI line that would do the same (what ``--dry-run`` prints)."""

    what: str
    command: str


@dataclass
class UpResult:
    state: dict[str, Any]
    image_s: float
    image_method: str
    containers_s: float
    idle_s: float
    steps: list[Step] = field(default_factory=list)


# --- the image ---------------------------------------------------------------------------------------------------


def slurm_image_inputs() -> dict[str, str]:
    return {"base": image_tag(), "packages": ",".join(SLURM_PACKAGES), "recipe": SLURM_RECIPE_VERSION,
            "dockerfile": hashlib.sha256(DOCKERFILE.encode()).hexdigest()[:16],
            "entrypoint": hashlib.sha256(ENTRY_SCRIPT.encode()).hexdigest()[:16]}


def slurm_image_tag() -> str:
    digest = hashlib.sha256(json.dumps(slurm_image_inputs(), sort_keys=True).encode()).hexdigest()
    return f"{SLURM_REPO}:{digest[:12]}"


def _docker() -> Any:
    try:
        return _client()
    except ImageBuildError as exc:
        raise ClusterError(str(exc)) from None


def _has_image(client: Any, ref: str) -> bool:
    return bool(client.api.images(name=ref))


def _host_is_bookworm() -> bool:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return False
    return "VERSION_CODENAME=bookworm" in text


def _apt(status: Path, archives: Path, lists: Path | None) -> list[str]:
    cmd = ["apt-get", "-q", "-y", "-o", f"Dir::State::status={status}", "-o", f"Dir::Cache::archives={archives}",
           "-o", "Debug::NoLocking=1"]
    if lists is not None:
        cmd += ["-o", f"Dir::State::Lists={lists}"]
    if os.geteuid() == 0:
        cmd += ["-o", "APT::Sandbox::User=root"]  # the _apt user cannot write into our private temp directory
    return cmd


def apt_download_command(status: Path, archives: Path, lists: Path | None = None) -> list[str]:
    """apt-get, resolving against the image's dpkg status: it downloads exactly what the image lacks."""
    return [*_apt(status, archives, lists), "install", "--download-only", "--no-install-recommends",
            *SLURM_PACKAGES]


def _download(tmp: Path, status: Path, log: Callable[[str], None]) -> list[Path]:
    """The .debs the image lacks, through the host's apt (its sources, mirror and proxy). When the host's package
    lists cannot provide them (never updated on a fresh machine, or older than the mirror), the lists are fetched
    again into a private directory: the host's own apt state is never touched."""
    archives = tmp / "archives"
    (archives / "partial").mkdir(parents=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    proc = subprocess.run(apt_download_command(status, archives), capture_output=True, text=True, check=False,
                          env=env)
    if proc.returncode != 0:
        log("the host's apt lists cannot provide them (stale, or never updated): `apt-get update` into a private "
            "directory, then again")
        lists = tmp / "lists"
        (lists / "partial").mkdir(parents=True)
        proc = subprocess.run([*_apt(status, archives, lists), "update"], capture_output=True, text=True,
                              check=False, env=env)
        if proc.returncode == 0:
            proc = subprocess.run(apt_download_command(status, archives, lists), capture_output=True, text=True,
                                  check=False, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-12:])
        raise ClusterError(f"downloading {' '.join(SLURM_PACKAGES)} with the host's apt failed (exit "
                           f"{proc.returncode}); is the Debian mirror in /etc/apt/sources.list* reachable?\n{tail}")
    return sorted(archives.glob("*.deb"))


def _image_dpkg_status(client: Any, base: str, dest: Path) -> None:
    created = client.api.create_container(base, command=["true"],
                                        labels={CLUSTER_LABEL: "(build)", PID_LABEL: str(os.getpid()),
                                                ROLE_LABEL: "build"})
    try:
        stream, _ = client.api.get_archive(created["Id"], "/var/lib/dpkg/status")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile("status")
            assert member is not None
            dest.write_bytes(member.read())
    finally:
        client.api.remove_container(created["Id"], force=True)


def _context_tar(base: str, debs: list[Path]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        add("Dockerfile", DOCKERFILE.format(base=base).encode())
        add("tchaos-slurm-node", ENTRY_SCRIPT.encode(), 0o755)
        for deb in debs:
            add(f"debs/{deb.name}", deb.read_bytes())
    return buf.getvalue()


def build_slurm_image(log: Callable[[str], None] = print, force: bool = False) -> tuple[str, str, float]:
    """Make sure the Slurm image exists; returns (tag, "cached" | "built", seconds)."""

    start = time.monotonic()
    client = _docker()
    tag, base = slurm_image_tag(), image_tag()
    if not force and _has_image(client, tag):
        return tag, "cached", time.monotonic() - start
    if not _has_image(client, base):
        raise ClusterError(f"the node image {base} is not built, and the Slurm image is built on it: run "
                           "`chaos image build` first (offline with debootstrap; ~3 min cold)")
    if shutil.which("apt-get") is None or not _host_is_bookworm():
        raise ClusterError("the Slurm image takes Debian bookworm's slurm packages through the host's apt, and "
                           "this host is not Debian bookworm: build on one, or `docker load` an image saved there "
                           f"(`docker save {tag}`)")
    with _build_lock(log):
        if not force and _has_image(client, tag):
            return tag, "cached", time.monotonic() - start
        log(f"building {tag} on {base}: {' '.join(SLURM_PACKAGES)} from the host's Debian mirror")
        with tempfile.TemporaryDirectory(prefix="torch-chaos-slurm-") as tmp:
            status = Path(tmp) / "status"
            _image_dpkg_status(client, base, status)
            debs = _download(Path(tmp), status, log)
            log(f"[{time.monotonic() - start:5.1f} s] {len(debs)} packages, "
                f"{sum(d.stat().st_size for d in debs) / 1e6:.1f} MB; docker build (no network)")
            context = _context_tar(base, debs)
        stream = client.api.build(fileobj=io.BytesIO(context), custom_context=True, tag=tag, rm=True,
                                  forcerm=True, pull=False, decode=True, network_mode="none",
                                  labels={"torch-chaos.slurm-inputs": json.dumps(slurm_image_inputs(),
                                                                                 sort_keys=True)})
        for chunk in stream:
            if "error" in chunk:
                raise ClusterError(f"docker build of {tag} failed: {str(chunk['error']).strip()}")
        log(f"[{time.monotonic() - start:5.1f} s] built {tag}")
    return tag, "built", time.monotonic() - start


# --- what exists -------------------------------------------------------------------------------------------------


@dataclass
class Found:
    """The labelled objects of clusters on this engine, by cluster name."""

    containers: list[dict[str, Any]] = field(default_factory=list)
    networks: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)

    def names(self) -> set[str]:
        return {(o.get("Labels") or {}).get(CLUSTER_LABEL, "") for o in self.containers + self.networks
                + self.volumes}

    def empty(self) -> bool:
        return not (self.containers or self.networks or self.volumes)


def find(client: Any, name: str | None = None, cluster_id: str | None = None) -> Found:
    """Every object of the cluster ``name`` (all clusters without one); with ``cluster_id``, only those one
    bring-up made (a failed ``up`` removes its own objects, never those of an ``up`` of the same name that won)."""
    selector = [f"{CLUSTER_LABEL}={name}" if name else CLUSTER_LABEL,
                *([f"{ID_LABEL}={cluster_id}"] if cluster_id else [])]
    volumes = client.api.volumes(filters={"label": selector}).get("Volumes") or []
    return Found(client.api.containers(all=True, filters={"label": selector}),
                 client.api.networks(filters={"label": selector}), volumes)


def remove(client: Any, found: Found) -> list[str]:
    """Containers, then networks, then volumes (a volume goes only once no container uses it)."""
    removed: list[str] = []
    for ct in found.containers:
        cname = ct["Names"][0].lstrip("/")
        try:
            client.api.remove_container(ct["Id"], force=True)
            removed.append(f"container {cname}")
        except Exception as exc:  # keep going: one stubborn container must not strand the rest
            removed.append(f"container {cname} NOT removed: {exc}")
    for net in found.networks:
        try:
            client.api.remove_network(net["Id"])
            removed.append(f"network {net['Name']}")
        except Exception as exc:
            removed.append(f"network {net['Name']} NOT removed: {exc}")
    for vol in found.volumes:
        try:
            client.api.remove_volume(vol["Name"], force=True)
            removed.append(f"volume {vol['Name']}")
        except Exception as exc:
            removed.append(f"volume {vol['Name']} NOT removed: {exc}")
    return removed


def _write_state(path: Path, content: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(content, indent=2) + "\n")
    os.replace(tmp, path)


def _claimed(labels: dict[str, str]) -> bool:
    """A state file names this bring-up, or its `up` is still running: not an orphan."""
    pid = labels.get(PID_LABEL, "")
    if pid.isdigit() and Path(f"/proc/{pid}").exists():
        return True
    try:
        recorded = json.loads(Path(labels.get(STATE_LABEL, "")).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and recorded.get("id") == labels.get(ID_LABEL)


# --- up ----------------------------------------------------------------------------------------------------------


def _labels(spec: ClusterSpec, cluster_id: str, role: str) -> dict[str, str]:
    return {CLUSTER_LABEL: spec.name, ID_LABEL: cluster_id, STATE_LABEL: str(state_path(spec.name)),
            PID_LABEL: str(os.getpid()), ROLE_LABEL: role}


def _label_flags(labels: dict[str, str]) -> str:
    return " ".join(f"--label {k}={v}" for k, v in labels.items())


def plan_steps(spec: ClusterSpec, image: str, cluster_id: str, repo: str | None) -> list[Step]:
    """What ``up`` does, in order, as docker CLI lines (the SDK calls it makes are these)."""
    steps = [
        Step("network", f"docker network create --driver bridge --internal --subnet {spec.subnet} "
             f"--gateway {spec.gateway} {_label_flags(_labels(spec, cluster_id, 'network'))} {spec.network}"),
        Step("volume", f"docker volume create {_label_flags(_labels(spec, cluster_id, 'volume'))} {spec.volume}"),
    ]
    for host in spec.hosts:
        role = "controller" if host == CONTROLLER else "compute"
        mounts = f"-v {spec.volume}:{SHARED_PATH}" + (f" -v {repo}:{repo}:ro" if repo else "")
        name = spec.container(host)
        fuse = f"{FUSE_FLAGS} " if role == "compute" else ""
        steps.append(Step(f"{role} {host}", f"docker create --name {name} --hostname {host} --init "
                          f"--network {spec.network} --ip {spec.address(host)} --network-alias {host} "
                          f"--shm-size 256m {fuse}{mounts} {_label_flags(_labels(spec, cluster_id, role))} "
                          f"{image} {ENTRYPOINT} {role} {host}"))
        steps.append(Step(f"{role} {host}", f"docker cp slurm.conf {name}:{SLURM_CONF} && docker cp munge.key "
                          f"{name}:{MUNGE_KEY} && docker start {name}"))
    steps.append(Step("agent", f"{sys.executable} -m chaos.cluster.agent {agent_config_path(spec.name)} --cluster "
                      f"{spec.name} &   # on {spec.gateway} only; its port and token into "
                      f"{spec.container(CONTROLLER)}:{AGENT_FILE} (0400 {USER})"))
    steps.append(Step("wait", f"docker exec {spec.container(CONTROLLER)} sinfo -h -N -o '%N %t'   # until every "
                      "node is idle"))
    steps.append(Step("state", f"write {state_path(spec.name)}"))
    return steps


def _config_tar(conf: str, munge_key: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, mode in ((SLURM_CONF.lstrip("/"), conf.encode(), 0o644),
                                 (MUNGE_KEY.lstrip("/"), munge_key, 0o400)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def new_spec(client: Any | None, name: str, nodes: int) -> ClusterSpec:
    used = used_subnets(client) if client is not None else []
    # Keyed by the name only: a dry run shows the subnet `up` will take (unless another network takes it meanwhile).
    return ClusterSpec(name, nodes, pick_subnet(f"cluster-{name}", used))


def dry_run(name: str, nodes: int, repo: str | None) -> tuple[ClusterSpec, str, list[Step]]:
    """The plan without touching anything (works without an engine: the subnet is then the first candidate)."""
    problems = [p for p in (check_name(name), check_nodes(nodes)) if p]
    if problems:
        raise ValueError("; ".join(problems))
    try:
        client: Any = _docker()
    except ClusterError:
        client = None
    spec = new_spec(client, name, nodes)
    image = slurm_image_tag()
    return spec, slurm_conf(spec), plan_steps(spec, image, "<new id>", repo)


def up(name: str = "slurm", nodes: int = 3, timeout_s: float = DEFAULT_TIMEOUT_S, repo: str | None = None,
       log: Callable[[str], None] = print) -> UpResult:
    """Bring the cluster up and wait until every node is idle; on any failure remove what was made."""
    problems = [p for p in (check_name(name), check_nodes(nodes)) if p]
    if problems:
        raise ValueError("; ".join(problems))
    client = _docker()
    existing = find(client, name)
    if not existing.empty():
        recorded = read_state(name)
        what = (f"{len(recorded['nodes'])} node(s) since {recorded['created']}" if recorded
                else f"{len(existing.containers)} container(s), no state file")
        raise ClusterError(f"a cluster named {name!r} is already up ({what}): `chaos cluster down --name {name}` "
                           f"first, or bring another up with `--name`")
    image, method, image_s = build_slurm_image(log)
    log(f"image {image} ({method}, {image_s:.1f} s)")
    cluster_id = secrets.token_hex(4)
    spec = new_spec(client, name, nodes)
    steps = plan_steps(spec, image, cluster_id, repo)
    start = time.monotonic()
    try:
        shared_host = _create(client, spec, image, cluster_id, repo)
        agent = start_agent(client, spec, cluster_id)
        containers_s = time.monotonic() - start
        log(f"[{containers_s:5.1f} s] {nodes + 1} containers started on {spec.network} ({spec.subnet}); waiting "
            f"for `sinfo` to show {spec.node_list} idle (at most {timeout_s:.0f} s)")
        wait_idle(client, spec, timeout_s)
        idle_s = time.monotonic() - start
        content = state(spec, cluster_id=cluster_id, image=image, shared_host_path=shared_host, repo=repo,
                        python=_python(), created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        agent=agent)
        content["engine"] = install_engine(client, spec, repo)
        _write_state(state_path(name), content)
    except ClusterError:
        stop_agents(name, cluster_id)
        remove(client, find(client, name, cluster_id))
        raise
    except Exception as exc:  # the engine refused something (a name or subnet taken meanwhile, no disk space ...)
        stop_agents(name, cluster_id)
        remove(client, find(client, name, cluster_id))
        raise ClusterError(f"bringing {name!r} up failed: {exc}; everything made so far was removed") from exc
    except BaseException:  # Ctrl-C: nothing stays half-made
        stop_agents(name, cluster_id)
        remove(client, find(client, name, cluster_id))
        raise
    log(f"[{idle_s:5.1f} s] {spec.node_list} idle; state: {state_path(name)}")
    return UpResult(content, image_s, method, containers_s, idle_s, steps)


def _python() -> str:
    return f"{VENV}/bin/python"


# The engine's own dependencies beyond what the node image has (torch, numpy): pure Python or wheels for CPython
# 3.11 on Debian 12's glibc, as the image is. Copied from this interpreter into the shared volume, as a real
# cluster's shared filesystem would carry a virtualenv, so `chaos run` works on the login node (the controller).
ENGINE_PACKAGES = ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "yaml", "rich",
                   "markdown_it", "mdurl", "pygments", "psutil", "orjson", "mfusepy", "regex")
ENGINE_SITE = f"{SHARED_PATH}/engine-site"


def engine_site_tar() -> bytes:
    """This interpreter's copies of the engine's dependencies, as a tar for ``put_archive`` (under engine-site/)."""
    import importlib

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ENGINE_PACKAGES:
            module = importlib.import_module(name)
            path = Path(module.__file__ or "")
            if path.name != "__init__.py":  # a single-file module (mfusepy.py)
                tar.add(str(path), arcname=f"engine-site/{path.name}")
                continue
            tar.add(str(path.parent), arcname=f"engine-site/{name}",
                    filter=lambda info: None if "__pycache__" in info.name else info)
    return buf.getvalue()


def install_engine(client: Any, spec: ClusterSpec, repo: str | None) -> dict[str, Any]:
    """Make ``chaos run`` work in the controller as the cluster's user: the repository (mounted at its own path)
    plus the engine's dependencies in ``/shared/engine-site``. Returns the state's ``engine`` entry: the
    PYTHONPATH to run with, or why the engine was not installed (the cluster itself works either way)."""
    if repo is None:
        return {"installed": False, "why": "--no-repo: the cluster has no torch-chaos source to run"}
    if sys.version_info[:2] != (3, 11) or platform.machine() != "x86_64":
        return {"installed": False, "why": f"the node image runs CPython 3.11 on x86_64; this engine is "
                f"{platform.python_version()} on {platform.machine()}, whose compiled packages (pydantic_core, "
                f"psutil, orjson) would not load there"}
    if not client.api.put_archive(spec.container(CONTROLLER), SHARED_PATH, engine_site_tar()):
        raise ClusterError(f"could not copy the engine's packages into {ENGINE_SITE}")
    return {"installed": True, "pythonpath": f"{repo}:{ENGINE_SITE}", "site": ENGINE_SITE,
            "packages": list(ENGINE_PACKAGES)}


def _create(client: Any, spec: ClusterSpec, image: str, cluster_id: str, repo: str | None) -> str:
    import docker.types

    api = client.api
    ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=str(spec.subnet),
                                                                       gateway=spec.gateway)])
    client.networks.create(spec.network, driver="bridge", internal=True, ipam=ipam, check_duplicate=True,
                           labels=_labels(spec, cluster_id, "network"))
    volume = api.create_volume(spec.volume, labels=_labels(spec, cluster_id, "volume"))
    archive = _config_tar(slurm_conf(spec), secrets.token_bytes(1024))
    binds = {spec.volume: {"bind": SHARED_PATH, "mode": "rw"}}
    if repo:
        binds[repo] = {"bind": repo, "mode": "ro"}
    for host in spec.hosts:
        role = "controller" if host == CONTROLLER else "compute"
        fuse: dict[str, Any] = ({"devices": [f"{FUSE_DEVICE}:{FUSE_DEVICE}:rwm"], "cap_add": ["SYS_ADMIN"]}
                                if role == "compute" else {})
        host_config = api.create_host_config(binds=binds, network_mode=spec.network, init=True, shm_size="256m",
                                             **fuse)
        networking = api.create_networking_config({spec.network: api.create_endpoint_config(
            ipv4_address=spec.address(host), aliases=[host])})
        created = api.create_container(image, command=[ENTRYPOINT, role, host], name=spec.container(host),
                                       hostname=host, labels=_labels(spec, cluster_id, role), detach=True,
                                       host_config=host_config, networking_config=networking,
                                       working_dir=SHARED_PATH if role == "controller" else "/")
        api.put_archive(created["Id"], "/", archive)
        api.start(created["Id"])
    return str(volume.get("Mountpoint", ""))


def exec_in(client: Any, container: str, cmd: list[str], user: str = "") -> tuple[int, str]:
    result = client.api.exec_create(container, cmd, user=user, stdout=True, stderr=True)
    output = client.api.exec_start(result["Id"])
    code = client.api.exec_inspect(result["Id"]).get("ExitCode")
    return int(code if code is not None else -1), output.decode(errors="replace")


def node_states(client: Any, spec_or_controller: ClusterSpec | str) -> dict[str, str]:
    """Slurm's state of every node (``idle``, ``down*``, ``alloc`` ...), from ``sinfo`` on the controller."""
    controller = (spec_or_controller.container(CONTROLLER) if isinstance(spec_or_controller, ClusterSpec)
                  else spec_or_controller)
    code, output = exec_in(client, controller, ["sinfo", "-h", "-N", "-o", "%N %t"])
    if code != 0:
        return {}
    return dict(line.split(None, 1) for line in output.splitlines() if len(line.split()) == 2)


def _logs_tail(client: Any, container: str, lines: int = 8) -> str:
    try:
        return client.api.logs(container, tail=lines).decode(errors="replace").strip()
    except Exception as exc:
        return f"(no logs: {exc})"


def wait_idle(client: Any, spec: ClusterSpec, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    while True:
        for host in spec.hosts:
            info = client.api.inspect_container(spec.container(host))["State"]
            if info.get("Status") != "running":
                raise ClusterError(f"{spec.container(host)} stopped (exit {info.get('ExitCode')}) while the "
                                   f"cluster came up; its last lines:\n{_logs_tail(client, spec.container(host))}")
        states = node_states(client, spec)
        if states and all(states.get(h) == "idle" for h in spec.node_names):
            return
        if time.monotonic() > deadline:
            seen = ", ".join(f"{h}={states.get(h, '?')}" for h in spec.node_names) or "sinfo gave no answer"
            raise ClusterError(f"the cluster was not idle after {timeout_s:.0f} s ({seen}); slurmctld's last "
                               f"lines:\n{_logs_tail(client, spec.container(CONTROLLER))}\n(raise --timeout on a "
                               "slow machine; everything made so far was removed)")
        time.sleep(POLL_S)


# --- the cluster agent (chaos.cluster.agent): started by up, stopped by down, cleanup and a failed up ----------


_agent_procs: dict[int, subprocess.Popen[bytes]] = {}  # agents this process started: reaped when stopped


def start_agent(client: Any, spec: ClusterSpec, cluster_id: str) -> dict[str, Any]:
    """Start the cluster's agent on the network's gateway address (the host's side of the internal bridge), wait
    until it listens, and put its address and token into the controller at AGENT_FILE, readable by the cluster's
    user only. Returns the state file's ``agent`` entry (never the token)."""

    config = agent_config_path(spec.name)
    config.parent.mkdir(parents=True, exist_ok=True)
    for sibling in (config, config.with_suffix(".ready")):
        sibling.unlink(missing_ok=True)
    token = secrets.token_hex(16)
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)  # new, 0600, never followed
    with os.fdopen(fd, "w") as fh:
        json.dump({"bind": spec.gateway, "subnet": str(spec.subnet), "token": token, "cluster": spec.name,
                   "cluster_id": cluster_id, "up_pid": os.getpid(), "state": str(state_path(spec.name))}, fh)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                                     os.environ.get("PYTHONPATH")]))}
    with open(config.with_suffix(".log"), "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "chaos.cluster.agent", str(config), "--cluster", spec.name],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env)
    _agent_procs[proc.pid] = proc
    ready = config.with_suffix(".ready")
    deadline = time.monotonic() + AGENT_START_S
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(config.with_suffix(".log").read_text(errors="replace").splitlines()[-8:])
            stop_agents(spec.name, cluster_id)
            for sibling in (config, ready, config.with_suffix(".log")):
                sibling.unlink(missing_ok=True)
            raise ClusterError(f"the cluster agent did not start listening on {spec.gateway} "
                               f"({'exit ' + str(proc.returncode) if proc.returncode is not None else 'timeout'}); "
                               f"its last lines:\n{tail}")
        time.sleep(0.05)
    port = int(json.loads(ready.read_text())["port"])
    controller = spec.container(CONTROLLER)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        directory = tarfile.TarInfo(AGENT_DIR.lstrip("/"))
        directory.type, directory.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(directory)
        data = json.dumps({"address": spec.gateway, "port": port, "token": token, "cluster": spec.name}).encode()
        info = tarfile.TarInfo(AGENT_FILE.lstrip("/"))
        info.size, info.mode, info.mtime = len(data), 0o400, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    client.api.put_archive(controller, "/", buf.getvalue())
    # Ownership by exec, not by the tar's header: the archive API's handling of uid/gid is not one to rely on.
    code, out = exec_in(client, controller, ["sh", "-c", f"chown {UID}:{UID} {AGENT_FILE} && chmod 0400 {AGENT_FILE}"])
    if code != 0:
        raise ClusterError(f"could not hand the agent's address to {USER} in {controller}: {out.strip()}")
    return {"pid": proc.pid, "address": f"{spec.gateway}:{port}", "file": AGENT_FILE, "config": str(config),
            "log": str(config.with_suffix(".log"))}


def running_agents() -> list[tuple[int, str, dict[str, Any] | None]]:
    """Every cluster agent process of this host: (pid, its cluster's name, its config or None if unreadable)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if "chaos.cluster.agent" not in args or "--cluster" not in args:
            continue
        at = args.index("chaos.cluster.agent")
        if at < 2 or args[at - 1] != "-m" or not Path(args[0]).name.startswith("python"):
            continue  # a wrapper (timeout, flock, a shell) naming it: not the agent itself
        cluster_at = args.index("--cluster")
        if at + 1 >= len(args) or cluster_at + 1 >= len(args):
            continue
        try:
            config: dict[str, Any] | None = json.loads(Path(args[at + 1]).read_text())
        except (OSError, ValueError):
            config = None
        found.append((int(entry.name), args[cluster_at + 1], config))
    return found


def _agent_claimed(name: str, config: dict[str, Any] | None) -> bool:
    """The agent's cluster is recorded in its state file (the path it was made with, whatever this process's state
    directory), or its `up` still runs: not an orphan. The same rule as the cluster's objects (:func:`_claimed`)."""
    if config is None:
        return False
    up_pid = config.get("up_pid")
    if isinstance(up_pid, int) and Path(f"/proc/{up_pid}").exists():
        return True
    try:
        recorded = json.loads(Path(str(config.get("state", ""))).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and recorded.get("id") == config.get("cluster_id")


def stop_agents(name: str | None, cluster_id: str | None = None, only_orphans: bool = False) -> list[str]:
    """Stop the agents of cluster ``name`` (all clusters' without one; only that bring-up's with ``cluster_id``;
    only those no cluster claims with ``only_orphans``): SIGTERM, then SIGKILL after 5 s. Their config, ready and
    log files go with them (the runs' histories record what the agent did)."""
    stopped = []
    for pid, cluster, config in running_agents():
        if name is not None and cluster != name:
            continue
        if cluster_id is not None and (config or {}).get("cluster_id") != cluster_id:
            continue
        if only_orphans and _agent_claimed(cluster, config):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        except PermissionError:
            stopped.append(f"cluster agent {pid} ({cluster}) NOT stopped: another user's")
            continue
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            proc = _agent_procs.get(pid)
            if proc is not None and proc.poll() is not None:
                break
            if _zombie(pid):
                break
            time.sleep(0.05)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc = _agent_procs.pop(pid, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        stopped.append(f"cluster agent {pid} ({cluster})")
        if config is not None and config.get("state"):
            path = Path(str(config["state"])).with_name(f"{cluster}.agent.json")
            try:
                same = json.loads(path.read_text()).get("cluster_id") == config.get("cluster_id")
            except (OSError, ValueError):
                same = False
            if same:
                for sibling in (path, path.with_suffix(".ready"), path.with_suffix(".log")):
                    sibling.unlink(missing_ok=True)
    return stopped


def _zombie(pid: int) -> bool:
    try:
        return ") Z " in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True


# --- down, status, cleanup, doctor -------------------------------------------------------------------------------


def down(name: str = "slurm") -> list[str]:
    """Remove the cluster's containers, network and volume (by label) and its state file; idempotent."""
    client = _docker()
    removed = stop_agents(name)
    removed += remove(client, find(client, name))
    path = state_path(name)
    if path.exists():
        path.unlink()
        removed.append(f"state file {path}")
    config = agent_config_path(name)  # an agent that already left keeps its files (its token among them): not here
    for leftover in (config, config.with_suffix(".ready"), config.with_suffix(".log")):
        if leftover.exists():
            leftover.unlink()
            removed.append(f"agent file {leftover}")
    return removed


def status(name: str = "slurm") -> dict[str, Any] | None:
    """The state file plus what is true now (containers' status, Slurm's node states); None when nothing is up."""
    client = _docker()
    found = find(client, name)
    recorded = read_state(name)
    if found.empty() and recorded is None:
        return None
    containers = {c["Names"][0].lstrip("/"): c.get("State", "?") for c in found.containers}
    controller = (recorded or {}).get("controller", {}).get("container", f"tchaos-{name}-{CONTROLLER}")
    slurm = node_states(client, controller) if containers.get(controller) == "running" else {}
    agents = [pid for pid, cluster, _ in running_agents() if cluster == name]
    agent = (f"running, pid {', '.join(map(str, agents))}" + (f", {recorded['agent']['address']}" if
             (recorded or {}).get("agent") else "")) if agents else "not running (host_loss refused)"
    return {"state": recorded, "state_file": str(state_path(name)), "containers": containers, "slurm": slurm,
            "agent": agent, "complete": recorded is not None and not found.empty()}


def cleanup(run_id: str | None, only_orphans: bool) -> list[str]:
    """``chaos cleanup``: clusters whose `up` died half-way or whose state file is gone (``--all``: every cluster).

    A cluster is not a run, so ``--run-id`` leaves clusters alone."""
    if run_id is not None:
        return []
    try:
        client = _docker()
    except ClusterError:
        return []
    found = find(client)
    if only_orphans:
        def orphan(o: dict[str, Any]) -> bool:
            return not _claimed(o.get("Labels") or {})

        found = Found([c for c in found.containers if orphan(c)], [n for n in found.networks if orphan(n)],
                      [v for v in found.volumes if orphan(v)])
    removed = stop_agents(None, only_orphans=only_orphans)
    removed += remove(client, found)
    if not only_orphans:
        for name in sorted(n for n in found.names() if n):
            path = state_path(name)
            if path.exists():
                path.unlink()
                removed.append(f"state file {path}")
    return removed


def machine_checks() -> list[Any]:
    """``chaos doctor``: can this machine bring a Slurm cluster up? Optional (nothing else needs it)."""

    name = "slurm cluster (chaos cluster up slurm)"
    try:
        client = _docker()
    except ClusterError as exc:
        return [Check(name, False, f"needs a Docker engine: {str(exc).split(';')[0]}",
                      f"{APT} docker.io && (dockerd > /var/log/dockerd.log 2>&1 &)", required=False)]
    tag = slurm_image_tag()
    if _has_image(client, tag):
        return [Check(name, True, f"image {tag} built")]
    if not _has_image(client, image_tag()):
        return [Check(name, False, f"its image is built on the node image {image_tag()}, which is not built",
                      "chaos image build", required=False)]
    if shutil.which("apt-cache") is None or not _host_is_bookworm():
        return [Check(name, False, "the image takes Debian bookworm's slurm packages through the host's apt; this "
                      "host is not Debian bookworm", f"docker load an image saved on a bookworm host "
                      f"(`docker save {tag}`)", required=False)]
    proc = subprocess.run(["apt-cache", "policy", "slurmd"], capture_output=True, text=True, check=False)
    candidate = next((line.split(":", 1)[1].strip() for line in proc.stdout.splitlines()
                      if line.strip().startswith("Candidate:")), "(none)")
    ok = candidate != "(none)"
    return [Check(name, ok, f"image {tag} not built yet (`up` builds it, seconds); slurmd {candidate} from the "
                  "host's apt" if ok else "the host's apt knows no slurmd package", "" if ok else "apt-get update",
                  required=False)]


@contextlib.contextmanager
def cluster(name: str = "slurm", nodes: int = 3, timeout_s: float = DEFAULT_TIMEOUT_S,
            repo: str | None = None, log: Callable[[str], None] = print) -> Iterator[UpResult]:
    """A documented fixture: ``with cluster(nodes=3) as c: ...``; down on the way out, whatever happened."""
    result = up(name, nodes, timeout_s, repo, log)
    try:
        yield result
    finally:
        down(name)
