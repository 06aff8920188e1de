"""The libfuse that FUSE passthrough needs (``storage.passthrough``, docs/storage.md "Passthrough (opt-in)").

Kernel passthrough (the kernel reads and writes a file's bytes on the server's own descriptor, the server never
sees them) needs libfuse >= 3.17 under mfusepy: 3.17 is where ``fuse_conn_info`` got ``want_ext`` and
``max_backing_stack_depth`` and ``fuse_file_info`` its ``backing_id`` in the layout mfusepy declares (3.16 had
passthrough with another layout that mfusepy does not describe, so it is not accepted). Debian bookworm ships 3.14
(``libfuse3.so.3``); 3.17 has the soname ``libfuse3.so.4`` and installs beside it.

:func:`find` looks, in order, at ``$TORCH_CHAOS_LIBFUSE`` (a path to the library), the build cache that
:func:`build` fills (``python -m chaos.storage build-libfuse``: ~10 s, only the library, from Debian's pinned
tarball, meson installed into a private venv inside the cache, never the user's site-packages), then the
system's. The server gets the library found as ``FUSE_LIBRARY_PATH`` (mfusepy reads it at import).

Standard library only: it runs on compute hosts that have only the nodes' Python.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from chaos.storage.mounts import fuse_problem

VERSION = "3.17.2"
MIN_VERSION = (3, 17)
TARBALL_URL = f"http://deb.debian.org/debian/pool/main/f/fuse3/fuse3_{VERSION}.orig.tar.gz"
TARBALL_SHA256 = "3d932431ad94e86179e5265cddde1d67aa3bb2fb09a5bd35c641f86f2b5ed06f"
SONAME = "libfuse3.so.4"
ENV_VAR = "TORCH_CHAOS_LIBFUSE"
DOWNLOAD_TIMEOUT_S = 60.0
APT_BUILD = "apt-get install -y gcc ninja-build pkg-config"


class BuildError(RuntimeError):
    """Why :func:`build` could not build the library, with what to install or do (no traceback for the user)."""


def cache_dir() -> Path:
    """Where :func:`build` puts the library: ``$XDG_CACHE_HOME`` (else ~/.cache)/torch-chaos/libfuse-<version>."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch-chaos" / f"libfuse-{VERSION}"


def version_of(path: str) -> tuple[int, int] | None:
    """The (major, minor) a libfuse3 shared library says it is (``fuse_version()``: major * 100 + minor); None when
    it cannot be loaded or is not libfuse."""
    try:
        lib = ctypes.CDLL(path)
        value = int(lib.fuse_version())
    except (OSError, AttributeError):
        return None
    return value // 100, value % 100


def _cached() -> str | None:
    found = sorted((cache_dir() / "prefix").glob(f"lib*/**/{SONAME}"))
    return str(found[0]) if found else None


def _system() -> list[str]:
    """The system's libfuse3 libraries, newest soname first (ldconfig's cache; ctypes.util finds only one name)."""
    paths: list[str] = []
    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None)
    if ldconfig is not None:
        try:
            out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        for line in out.splitlines():
            name, _, path = line.strip().partition(" => ")
            if name.startswith("libfuse3.so") and path:
                paths.append(path.strip())
    import ctypes.util

    found = ctypes.util.find_library("fuse3")
    if found:
        paths.append(found)
    return sorted(dict.fromkeys(paths), key=lambda p: SONAME not in p)


def candidates() -> list[tuple[str, str]]:
    """Every library :func:`find` would consider, in order, with where it came from."""
    found: list[tuple[str, str]] = []
    if env := os.environ.get(ENV_VAR):
        found.append((env, f"${ENV_VAR}"))
    if cached := _cached():
        found.append((cached, "build cache"))
    found += [(p, "system") for p in _system()]
    return found


def find() -> tuple[str | None, str]:
    """The first libfuse >= 3.17 (its path), or None and why none fits (what was found, and the fix)."""
    seen = []
    for path, origin in candidates():
        version = version_of(path)
        if version is not None and version >= MIN_VERSION:
            return path, f"libfuse {version[0]}.{version[1]} ({origin}: {path})"
        seen.append(f"{path} ({origin}): " + ("not loadable" if version is None else f"{version[0]}.{version[1]}"))
    where = "; ".join(seen) if seen else "no libfuse3 at all"
    return None, (f"no libfuse >= {MIN_VERSION[0]}.{MIN_VERSION[1]} ({where}); build one with `python -m "
                  f"chaos.storage build-libfuse` (~10 s, into {cache_dir()}) or set ${ENV_VAR} to a libfuse3.so.4")


PASSTHROUGH_KERNEL = (6, 9)  # FUSE passthrough (FOPEN_PASSTHROUGH, FUSE_DEV_IOC_BACKING_OPEN) came in Linux 6.9


def kernel_passthrough_problem(release: str | None = None) -> str | None:
    """Why this kernel cannot pass FUSE file data through, or None (its config, where readable, says
    CONFIG_FUSE_PASSTHROUGH; unreadable: the server finds out at INIT and refuses to serve)."""
    release = release or os.uname().release
    numbers = [int(p) for p in re.findall(r"\d+", release)[:2]]
    if len(numbers) == 2 and tuple(numbers) < PASSTHROUGH_KERNEL:
        return f"kernel {release} has no FUSE passthrough (Linux >= 6.9 with CONFIG_FUSE_PASSTHROUGH=y)"
    text = ""
    try:
        import gzip

        with gzip.open("/proc/config.gz", "rt") as f:
            text = f.read()
    except OSError:
        try:
            text = Path(f"/boot/config-{release}").read_text()
        except OSError:
            return None
    if "CONFIG_FUSE_PASSTHROUGH=y" not in text:
        return f"kernel {release} is built without CONFIG_FUSE_PASSTHROUGH=y"
    return None


def passthrough_problems() -> list[str]:
    """What this machine lacks for ``storage.passthrough`` (root, the kernel, libfuse >= 3.17), each with its fix."""
    return readiness()[1]


def readiness() -> tuple[str | None, list[str]]:
    """The libfuse a passthrough server would load (or None) and :func:`passthrough_problems`, from one search
    (the search runs ldconfig and loads each candidate)."""
    problems = [p for p in (fuse_problem(),) if p]
    if os.geteuid() != 0:
        problems.append("not root: a FUSE backing file needs CAP_SYS_ADMIN (run as root, or leave "
                        "storage.passthrough out)")
    if (why := kernel_passthrough_problem()) is not None:
        problems.append(why)
    library, why = find()
    if library is None:
        problems.append(why)
    return library, problems



def _download(dest: Path) -> None:
    import urllib.error  # only a build downloads (http.client, ssl: not for every command that imports this)
    import urllib.request

    try:
        with urllib.request.urlopen(TARBALL_URL, timeout=DOWNLOAD_TIMEOUT_S) as r, open(dest, "wb") as out:
            shutil.copyfileobj(r, out)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise BuildError(f"cannot download {TARBALL_URL} ({exc}): no network? Download it elsewhere and put it at "
                         f"{dest}, then run this again") from None
    digest = hashlib.sha256(dest.read_bytes()).hexdigest()
    if digest != TARBALL_SHA256:
        dest.unlink()
        raise BuildError(f"{TARBALL_URL} has sha256 {digest}, not the pinned {TARBALL_SHA256}: refused")


def _run(argv: list[str], log: Path, what: str) -> None:
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        tail = " / ".join(log.read_text(errors="replace").strip().splitlines()[-4:])
        raise BuildError(f"{what} failed (exit {rc}; full log {log}): {tail}")


def build(log: Path | None = None) -> str:
    """Download Debian's libfuse 3.17.2 tarball (sha256 pinned), build only the library with meson + ninja, and
    install it into :func:`cache_dir`; returns the library's path. Raises :class:`BuildError` saying what is
    missing. Kept for the next time: a second call with the library present returns it at once."""
    if cached := _cached():
        return cached
    missing = [tool for tool in ("cc", "ninja") if shutil.which(tool) is None]
    if missing:
        raise BuildError(f"{' and '.join(missing)} not found: the build needs a C compiler and ninja; install them "
                         f"({APT_BUILD})")
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    log = log or root / "build.log"
    tarball = root / f"fuse3_{VERSION}.orig.tar.gz"
    if not tarball.exists() or hashlib.sha256(tarball.read_bytes()).hexdigest() != TARBALL_SHA256:
        _download(tarball)
    venv = root / "venv"
    meson = venv / "bin" / "meson"
    if not meson.exists():  # meson in a venv of its own: never the user's site-packages
        _run([sys.executable, "-m", "venv", str(venv)], log, "creating the venv for meson")
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "meson"], log,
             "pip install meson (into the build cache's venv; needs PyPI or a pip mirror)")
    import tarfile  # only a build unpacks

    with tempfile.TemporaryDirectory(dir=root) as work:
        with tarfile.open(tarball) as tar:
            tar.extractall(work, filter="data")
        source = Path(work) / f"fuse-{VERSION}"
        prefix = root / "prefix"
        _run([str(meson), "setup", str(Path(work) / "build"), str(source), f"--prefix={prefix}",
              "-Dexamples=false", "-Dutils=false", "-Dtests=false", "-Dbuildtype=release"], log, "meson setup")
        _run(["ninja", "-C", str(Path(work) / "build"), "install"], log, "ninja (build and install)")
    cached = _cached()
    if cached is None:
        raise BuildError(f"the build finished but no {SONAME} is under {root / 'prefix'} (log {log})")
    return cached
