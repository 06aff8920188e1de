"""The container image the docker runtime starts nodes in.

Its tag is a hash of everything that decides its content (:func:`image_inputs`), so a scenario finds the image
that matches the host's torch without anyone naming it, and a torch upgrade on the host gets a new image instead
of silently testing the old one.

Two recipes make it. ``debootstrap`` needs no registry: the base system comes from the Debian mirror the host's
apt already uses and the wheels from the host's pip configuration, so it works on machines that can reach only
those (the common case for CI runners behind a mirror). ``dockerfile`` is the usual ``FROM python`` build for
machines with a registry. ``auto`` never probes the network to choose: it picks ``dockerfile`` only when the base
image is already local.

The docker SDK is imported inside functions: ``chaos`` must import without it (see ``chaos/__init__.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMAGE_REPO = "torch-chaos"
VENV = "/opt/torch-chaos-venv"
DEBIAN_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "python3-venv", "iproute2", "iptables", "procps", "ca-certificates")
# Bump whenever a recipe changes what ends up in the image: the tag changes with it, so old images are not reused.
BUILD_RECIPE_VERSION = "1"
# torchrun's etcd rendezvous backends import the python-etcd client in the nodes, so a host that has it (the
# `etcd` extra) gets it in the image too, at the host's versions; it is an input of the tag like torch.
ETCD_CLIENT = ("python-etcd", "urllib3", "dnspython")
IMAGE_PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INPUTS_LABEL = "torch-chaos.inputs"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# The CPU index keeps the image small (no CUDA wheels): nodes in containers train on CPU. compileall is kept
# because shipping .pyc files makes `import torch` measurably faster in every container start; its exit 1 is
# expected (torch ships Python-3.12-only test modules that do not compile under 3.11).
DOCKERFILE = """\
FROM python:{python}-slim
RUN apt-get update \\
 && apt-get install -y --no-install-recommends {apt_packages} \\
 && rm -rf /var/lib/apt/lists/* /usr/share/doc /usr/share/man
RUN python -m venv {venv} \\
 && {venv}/bin/pip install --no-cache-dir --index-url {torch_index} torch=={torch} \\
 && {venv}/bin/pip install --no-cache-dir numpy=={numpy} {etcd_client} \\
 && ({venv}/bin/python -m compileall -q {venv}/lib || [ $? -eq 1 ])
ENV PATH={path}
LABEL {label}={inputs_sha}
WORKDIR /
"""

# Every chroot command runs in its own mount namespace: /proc and /dev are mounted there only, so they vanish when
# the command exits, even if the build is killed, and can never be left bind-mounted under a tree we delete.
_CHROOT_SCRIPT = 'mount -t proc proc "$0/proc" && mount --bind /dev "$0/dev" && exec chroot "$0" "$@"'
_CHROOT_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
               "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}
_START_DOCKER = "start it with `systemctl start docker` (or `dockerd &` where there is no systemd)"


class ImageBuildError(RuntimeError):
    """A build failed for a reason the user can act on; the message says what to run."""


@dataclass
class BuildResult:
    tag: str
    method: str  # "debootstrap" | "dockerfile" | "cached"
    seconds: float
    size_bytes: int


def _dist_version(name: str) -> str:
    # importlib.metadata instead of `import torch`: importing torch costs seconds and this runs on every scenario.
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        raise ImageBuildError(f"{name} is not installed on the host, and the image copies the host's version: "
                              f"`pip install {name}`") from None


def _etcd_client_pins() -> list[str]:
    """python-etcd and its dependencies at the host's versions, or none where the host lacks python-etcd (an
    etcd rendezvous is then refused before any image is used: chaos doctor)."""
    try:
        return [f"{name}=={importlib.metadata.version(name)}" for name in ETCD_CLIENT]
    except importlib.metadata.PackageNotFoundError:
        return []


def _python_minor() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def image_inputs() -> dict[str, str]:
    """Everything that decides the image's content; the tag hashes exactly this, nothing else."""
    return {
        "torch": _dist_version("torch"),
        "numpy": _dist_version("numpy"),
        "python": _python_minor(),
        "debian": DEBIAN_SUITE,
        "packages": ",".join(PACKAGES),
        "recipe": BUILD_RECIPE_VERSION,
        "etcd_client": ",".join(_etcd_client_pins()) or "none",
    }


def _inputs_sha() -> str:
    return hashlib.sha256(json.dumps(image_inputs(), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def image_tag() -> str:
    """The tag scenarios use when they name no image."""
    return f"{IMAGE_REPO}:{_inputs_sha()[:12]}"


def _client(timeout: int = 60) -> Any:
    try:
        import docker
    except ImportError:
        raise ImageBuildError("the docker SDK is not installed: `pip install docker`") from None
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as e:  # the SDK raises DockerException, requests errors or PermissionError depending on why
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        hint = _START_DOCKER
        if "Permission denied" in str(e):
            hint = "run as root or join the docker group: `sudo usermod -aG docker $USER` (then log in again)"
        raise ImageBuildError(f"docker engine unreachable at {where} ({e}); {hint}") from None
    return client


def _has_image(client: Any, ref: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(ref)
    except ImageNotFound:
        return False
    return True


def _image_size(client: Any, tag: str) -> int:
    return int(client.images.get(tag).attrs.get("Size", 0))


def _base_image() -> str:
    return f"python:{_python_minor()}-slim"


@contextlib.contextmanager
def _build_lock(log: Callable[[str], None]) -> Iterator[None]:
    # Parallel test workers may all find the image missing at once; one builds, the others wait and reuse it.
    path = Path(tempfile.gettempdir()) / "torch-chaos-image.lock"
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another image build holds {path}; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_image(method: str = "auto", force: bool = False, log: Callable[[str], None] = print) -> BuildResult:
    """Make sure the image for this host's torch exists, building it only when it does not (or ``force``)."""
    if method not in ("auto", "debootstrap", "dockerfile"):
        raise ValueError(f"unknown method {method!r} (auto, debootstrap or dockerfile)")
    start = time.monotonic()
    tag = image_tag()
    client = _client(timeout=900)  # importing a 1 GB layer can keep the engine silent for longer than the default
    if not force and _has_image(client, tag):
        return BuildResult(tag, "cached", time.monotonic() - start, _image_size(client, tag))
    with _build_lock(log):
        if not force and _has_image(client, tag):  # someone else built it while we waited
            return BuildResult(tag, "cached", time.monotonic() - start, _image_size(client, tag))
        if method == "auto":
            method = "dockerfile" if _has_image(client, _base_image()) else "debootstrap"
        old_id = client.images.get(tag).id if _has_image(client, tag) else None
        log(f"building {tag} with {method} (inputs: {json.dumps(image_inputs(), sort_keys=True)})")
        if method == "debootstrap":
            _build_debootstrap(client, tag, log, start)
        else:
            _build_dockerfile(client, tag, log)
        if old_id is not None and old_id != client.images.get(tag).id:
            with contextlib.suppress(Exception):  # still used by a container: it goes with the next prune
                client.images.remove(old_id)
        result = BuildResult(tag, method, time.monotonic() - start, _image_size(client, tag))
        log(f"built {tag} in {result.seconds:.0f} s ({result.size_bytes / 1e9:.2f} GB)")
        return result


# --- dockerfile -------------------------------------------------------------------------------------------------


def dockerfile_text() -> str:
    inputs = image_inputs()
    return DOCKERFILE.format(
        python=inputs["python"], venv=VENV, torch_index=TORCH_CPU_INDEX,
        torch=inputs["torch"].split("+")[0],  # the CPU index's local label (+cpu) is implied by the index
        numpy=inputs["numpy"], etcd_client=" ".join(_etcd_client_pins()), path=IMAGE_PATH, label=INPUTS_LABEL,
        inputs_sha=_inputs_sha(),
        apt_packages=" ".join(p for p in PACKAGES if not p.startswith("python3")),
    )


def _build_dockerfile(client: Any, tag: str, log: Callable[[str], None]) -> None:
    stream = client.api.build(fileobj=io.BytesIO(dockerfile_text().encode()), tag=tag, rm=True, forcerm=True,
                              pull=False, decode=True,
                              labels={INPUTS_LABEL: _inputs_sha(), "torch-chaos.method": "dockerfile"})
    for chunk in stream:
        if "error" in chunk:
            raise ImageBuildError(f"docker build failed: {chunk['error'].strip()}")
        line = str(chunk.get("stream", "")).strip()
        if line:
            log(line)


# --- debootstrap ------------------------------------------------------------------------------------------------


def debian_mirror() -> str:
    """The mirror the host's apt uses: on machines that reach only their own mirror, it is the one that works."""
    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    if deb822.exists():
        for stanza in re.split(r"\n\s*\n", deb822.read_text()):
            fields = dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, re.M))
            if DEBIAN_SUITE in fields.get("Suites", "").split() and fields.get("URIs"):
                return fields["URIs"].split()[0]
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            m = re.match(rf"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+{DEBIAN_SUITE}\s", line + " ")
            if m:
                return m.group(1)
    return DEFAULT_MIRROR


def _check_debootstrap_prerequisites() -> None:
    if os.geteuid() != 0:
        raise ImageBuildError("the debootstrap build needs root (debootstrap and chroot): run it with sudo, or "
                              f"`docker pull {_base_image()}` first so that method='auto' uses the Dockerfile")
    if not (shutil.which("debootstrap") or Path("/usr/sbin/debootstrap").exists()):
        raise ImageBuildError("debootstrap is not installed: `apt-get install -y debootstrap`")
    for tool in ("unshare", "chroot", "mount", "tar"):
        if not (shutil.which(tool) or Path("/usr/sbin", tool).exists()):
            raise ImageBuildError(f"{tool} is missing: `apt-get install -y util-linux coreutils mount tar`")


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> str:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, check=False)
    if proc.returncode not in ok:
        tail = "\n".join(proc.stdout.splitlines()[-25:])
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc.stdout


def _chroot(rootfs: Path, cmd: list[str], what: str, ok: tuple[int, ...] = (0,)) -> str:
    # A clean environment: the host's PIP_* / PYTHON* variables point at host paths that do not exist inside.
    return _run(["unshare", "--mount", "--fork", "--", "sh", "-c", _CHROOT_SCRIPT, str(rootfs), *cmd], what,
                env=_CHROOT_ENV, ok=ok)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].encode().decode("unicode_escape") for line in f]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


def _remove_tree(tmp: Path, log: Callable[[str], None]) -> None:
    # Deleting a tree that still has /dev bind-mounted into it would delete the host's /dev: unmount first, and
    # leave the tree in place if anything stays mounted.
    for point in _mounts_under(tmp):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    left = _mounts_under(tmp)
    if left:
        log(f"left {tmp} in place: still mounted there: {', '.join(left)}")
        return
    shutil.rmtree(tmp, ignore_errors=True)


def _build_debootstrap(client: Any, tag: str, log: Callable[[str], None], start: float) -> None:
    _check_debootstrap_prerequisites()
    inputs = image_inputs()

    def step(message: str) -> None:
        log(f"[{time.monotonic() - start:5.1f} s] {message}")

    tmp = Path(tempfile.mkdtemp(prefix="torch-chaos-image-"))
    rootfs, wheels = tmp / "rootfs", tmp / "wheels"
    pins = [f"torch=={inputs['torch']}", f"numpy=={inputs['numpy']}"]
    etcd_client = _etcd_client_pins()
    try:
        mirror = debian_mirror()
        # The wheels come from the host's pip (its index or mirror), fetched while debootstrap runs: the two wait on
        # different things. Host and image share the Python minor (checked below) and glibc era, so host tags fit.
        with ThreadPoolExecutor(1) as pool:
            def fetch() -> None:
                _run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--disable-pip-version-check",
                      "-q", "-d", str(wheels), *pins], "downloading wheels with the host's pip")
                if etcd_client:  # python-etcd is published as a source archive only: built into a wheel here
                    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
                          "-w", str(wheels), *etcd_client], "building the python-etcd wheel with the host's pip")

            download = pool.submit(fetch)
            step(f"debootstrap {DEBIAN_SUITE} from {mirror}; pip download {' '.join(pins)}")
            _run(["unshare", "--mount", "--fork", "--", "debootstrap", "--variant=minbase",
                  f"--include={','.join(PACKAGES)}", DEBIAN_SUITE, str(rootfs), mirror],
                 f"debootstrap (is {mirror} reachable? it is read from the host's apt sources)")
            step("debootstrap done")
            download.result()
        step(f"wheels: {sum(p.stat().st_size for p in wheels.iterdir()) / 1e6:.0f} MB")

        image_python = _chroot(rootfs, ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               "reading the image's python version").strip()
        if image_python != inputs["python"]:
            raise ImageBuildError(f"Debian {DEBIAN_SUITE} ships Python {image_python} but the host runs "
                                  f"{inputs['python']}, so the host's wheels would not fit: run the build with a "
                                  f"Python {image_python} interpreter, or `docker pull {_base_image()}` and use "
                                  "method='dockerfile'")

        _chroot(rootfs, ["python3", "-m", "venv", VENV], "creating the venv")
        shutil.move(str(wheels), rootfs / "tmp" / "wheels")
        step("installing wheels into the venv")
        # pip compiles on one core; installing without and compiling with -j0 measured 35 s instead of 64 s on 2 cores.
        _chroot(rootfs, [f"{VENV}/bin/pip", "install", "--no-compile", "--no-index", "--find-links", "/tmp/wheels",
                         *pins, *etcd_client], "pip install in the image")
        step("compileall")
        # Exit 1 is expected: torch ships Python-3.12-only test modules that cannot compile; everything else does.
        _chroot(rootfs, [f"{VENV}/bin/python", "-m", "compileall", "-j0", "-q", f"{VENV}/lib"], "compileall",
                ok=(0, 1))
        step("cleaning up the root filesystem")

        for junk in [rootfs / "tmp" / "wheels", rootfs / "usr/share/doc", rootfs / "usr/share/man",
                     *(rootfs / "var/cache/apt/archives").glob("*.deb"), *(rootfs / "var/lib/apt/lists").glob("*_*")]:
            if junk.is_dir():
                shutil.rmtree(junk)
            elif junk.exists():
                junk.unlink()

        step(f"importing the root filesystem as {tag}")
        _import_rootfs(client, rootfs, tag, [f"ENV PATH={IMAGE_PATH}", f"LABEL {INPUTS_LABEL}={_inputs_sha()}",
                                             "LABEL torch-chaos.method=debootstrap", "WORKDIR /"])
    finally:
        _remove_tree(tmp, log)


def _import_rootfs(client: Any, rootfs: Path, tag: str, changes: list[str]) -> None:
    # Streamed straight from tar into the engine: no second 1 GB copy on disk.
    with tempfile.TemporaryFile() as tar_err:
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", "-", "."],
                               stdout=subprocess.PIPE, stderr=tar_err)
        assert tar.stdout is not None

        def chunks() -> Iterator[bytes]:
            while block := tar.stdout.read(1 << 20):
                yield block

        try:
            out = client.api.import_image_from_stream(chunks(), repository=IMAGE_REPO, tag=tag.split(":", 1)[1],
                                                       changes=changes)
        finally:
            tar.stdout.close()
            rc = tar.wait()
        tar_err.seek(0)
        tar_message = tar_err.read().decode(errors="replace").strip()
    errors = [json.loads(line).get("error") for line in str(out).splitlines() if line.strip().startswith("{")]
    errors = [e for e in errors if e]
    if rc != 0 or errors:
        with contextlib.suppress(Exception):  # a truncated tar must not stay behind under the real tag
            client.images.remove(tag)
        raise ImageBuildError(f"docker import failed: tar exit {rc} {tar_message}; engine: {'; '.join(errors)}")


# --- images with a launcher's packages ----------------------------------------------------------------------------


def image_with(packages: tuple[str, ...], base: str | None = None) -> str:
    """The tag of the node image plus ``packages`` (pip requirements a launcher's nodes need beyond torch, e.g.
    ``ray[train]==2.60.0``): a hash of the base tag and the requirements, so a new base or version gets a new one."""
    base = base or image_tag()
    if not packages:
        return base
    sha = hashlib.sha256(json.dumps([base, sorted(packages)]).encode()).hexdigest()[:12]
    return f"{IMAGE_REPO}-extra:{sha}"


def build_image_with(packages: tuple[str, ...], base: str | None = None,
                     log: Callable[[str], None] = print) -> BuildResult:
    """Make the image of :func:`image_with` from the node image, building it only when it is missing.

    The wheels come from the host's pip (its index or mirror, as for the base image) into a folder bind-mounted in a
    container of the base image, whose venv installs them without a network (``--no-index``); the container is
    committed as the new tag and removed. The base image must exist (``chaos image build``)."""
    start = time.monotonic()
    base = base or image_tag()
    tag = image_with(packages, base)
    client = _client(timeout=900)
    if _has_image(client, tag):
        return BuildResult(tag, "cached", time.monotonic() - start, _image_size(client, tag))
    if not _has_image(client, base):
        raise ImageBuildError(f"the node image {base} is not built here: run `chaos image build` first")
    with _build_lock(log):
        if _has_image(client, tag):
            return BuildResult(tag, "cached", time.monotonic() - start, _image_size(client, tag))
        with tempfile.TemporaryDirectory(prefix="torch-chaos-wheels-") as wheels:
            log(f"building {tag}: {base} + {' '.join(packages)} (wheels from the host's pip)")
            _run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--disable-pip-version-check",
                  "-q", "-d", wheels, *packages], "downloading wheels with the host's pip")
            container = client.containers.create(
                base, command=[f"{VENV}/bin/pip", "install", "--no-index", "--find-links", "/wheels",
                               "--disable-pip-version-check", "-q", *packages],
                volumes={wheels: {"bind": "/wheels", "mode": "ro"}}, network_disabled=True,
                labels={INPUTS_LABEL: json.dumps({"base": base, "packages": sorted(packages)})})
            try:
                container.start()
                status = container.wait(timeout=900)
                if status.get("StatusCode") != 0:
                    tail = container.logs(tail=20).decode(errors="replace")
                    raise ImageBuildError(f"pip install of {' '.join(packages)} in {base} failed: {tail}")
                repo, _, version = tag.partition(":")
                container.commit(repository=repo, tag=version)
            finally:
                with contextlib.suppress(Exception):
                    container.remove(force=True)
    result = BuildResult(tag, "extra", time.monotonic() - start, _image_size(client, tag))
    log(f"built {tag} in {result.seconds:.0f} s ({result.size_bytes / 1e9:.2f} GB)")
    return result


@dataclass(frozen=True)
class PrunedImage:
    """One image ``chaos image prune`` looked at and did not keep: what it was, whether it is gone, and why."""

    tag: str
    size_bytes: int
    removed: bool
    why: str


def prune_images(keep: set[str], dry_run: bool = False) -> list[PrunedImage]:
    """Remove the node images (``torch-chaos:<tag>``) and launcher images (``torch-chaos-extra:<tag>``) not in
    ``keep`` (the tags a run on this machine would use now: the caller knows the launchers).

    Why: every change of an input (torch on the host, a launcher's pinned packages) makes a new tag of 1-3 GB
    and nothing else ever removes the old one. An image a container still uses is kept and said so; the Slurm
    cluster's image is ``chaos cluster``'s and left alone."""
    from docker.errors import APIError

    client = _client()
    current = image_tag()
    pruned: list[PrunedImage] = []
    for repo in (IMAGE_REPO, f"{IMAGE_REPO}-extra"):
        for image in client.images.list(name=repo):
            size = int(image.attrs.get("Size", 0))
            for tag in image.tags:
                if not tag.startswith(f"{repo}:") or tag in keep:
                    continue
                why = (f"built for other inputs than this machine's (the node image now is {current})"
                       if repo == IMAGE_REPO else "no installed launcher's packages on the current node image")
                if dry_run:
                    pruned.append(PrunedImage(tag, size, False, f"would be removed: {why}"))
                    continue
                try:
                    client.images.remove(tag)
                except APIError as exc:  # 409: a container (running or stopped) still uses it
                    pruned.append(PrunedImage(tag, size, False, f"kept: {exc.explanation or exc}"))
                    continue
                pruned.append(PrunedImage(tag, size, True, why))
    return pruned
