"""One node of a Ray cluster under torch-chaos: ``python -m chaos.launchers.ray_node head|worker ...``.

The engine starts one of these per node, as it starts torchrun's agent for an elastic job; the runtime's mark
(``CHAOS_TREE``) and the engine's environment (``CHAOS_*``) pass from it to ``ray start`` and from there to the
GCS, the raylet and every worker process the raylet spawns (measured, docs/launchers.md "Ray"), so the runtime's
crash, freeze and teardown reach Ray's processes like any others, and the probe in a Ray Train worker reaches the
engine's channel.

``head``: ``ray start --head --block`` (``--num-cpus 0``: no training runs on the head, it holds the GCS and the
driver), waits until the expected number of worker nodes joined (bounded: a clear error and exit 3 when they do
not), then runs the driver (the argv after ``--``) with ``RAY_ADDRESS`` set, stops its own Ray processes and exits
with the driver's exit code. ``worker``: ``ray start --address HEAD:PORT --block``, retried while the head is not up
yet (bounded), until the node is killed or its raylet ends (the head gone). Either: on SIGTERM or SIGINT it stops
everything it started, and on a normal end it removes its ``--temp-dir`` (Ray's session folders, sockets, logs).
Never ``ray stop``: that kills every Ray process of the machine by name, other nodes' and other runs' included.

On the head, the driver's output passes through this process line by line: Ray forwards the TrainController's
lines to the driver (``log_to_driver``), and the three that mark a worker group's failure and restart become
history events (source ``ray``, :func:`controller_event`), stamped when read, so a recovery can be split in Ray's
terms (chaos.analysis.breakdown). Every line is written on unchanged.

Standard library, psutil and :mod:`chaos.events` / :mod:`chaos.probe` (stdlib-only) only, so the engine can import
it for its constants without Ray installed; the ``ray`` command is taken from the same interpreter's environment.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import psutil

from chaos.events import Ev, Source
from chaos.probe import write_record

# Ray's unix sockets live under --temp-dir/session_<date>_<pid>/sockets/; a sun_path holds 107 bytes and the
# session part takes ~60 of them (measured), so the temp dir itself must stay short.
MAX_TEMP_DIR = 40
OBJECT_STORE_BYTES = 150 * 1024 * 1024  # Ray's minimum is 75 MiB; its default (30% of RAM) is far too much here
JOIN_TIMEOUT_S = 120.0  # head: how long worker nodes may take to join
CONNECT_TIMEOUT_S = 60.0  # worker: how long the head may take to come up
STOP_GRACE_S = 5.0  # SIGTERM to `ray start --block`, then SIGKILL to what is left
EXIT_NO_WORKERS = 3  # head: the worker nodes never joined
ENV = {"RAY_USAGE_STATS_ENABLED": "0"}
RUN_ID_FILE = "run_id"  # beside the nodes' temp dirs: which run they belong to (the launcher's cleanup reads it)

# Counts the worker nodes (alive, not the head) through the GCS client, without registering a driver.
_COUNT_WORKERS = """
import sys, time
from ray._raylet import GcsClient
want, deadline = int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
seen = -1
while time.monotonic() < deadline:
    try:
        infos = GcsClient(address=sys.argv[1]).get_all_node_info(timeout=2).values()
        seen = sum(1 for i in infos if i.state == 0 and not i.is_head_node)
    except Exception:
        seen = -1
    if seen >= want:
        sys.exit(0)
    time.sleep(0.5)
print(f"ray_node: {max(seen, 0)} of {want} worker node(s) joined the head at {sys.argv[1]} within {sys.argv[3]} s"
      if seen >= 0 else f"ray_node: the head's GCS at {sys.argv[1]} never answered within {sys.argv[3]} s",
      file=sys.stderr, flush=True)
sys.exit(1)
"""


# Ray Train V2's controller lines (ray.train.v2._internal.execution: failure_handling/default.py and
# worker_group/worker_group.py, Ray 2.60), matched anywhere in the forwarded line ("(TrainController pid=N) ...",
# with colour codes around the prefix).
_FAILURE = re.compile(r"\[FailurePolicy\] (?P<decision>[A-Z]+)\b")
_ERROR_COUNT = re.compile(r"Error count: (?P<error_count>\d+) \(max allowed: (?P<max_failures>-?\d+|inf)\)")
_GROUP = [(Ev.RAY_WORKER_GROUP_STARTING, re.compile(r"Attempting to start training worker group of size (\d+)")),
          (Ev.RAY_WORKER_GROUP_STARTED, re.compile(r"Started training worker group of size (\d+)"))]
COUNT_WITHIN_LINES = 5  # the "Error count" line follows the FailurePolicy line (its second line after "Source")


class ControllerLines:
    """Turns the controller's lines, in the order read, into history events: ``write(event, t, fields)``.

    The failure's decision and its count are two lines; the event carries both, stamped when the first was read.
    Ray prints a worker group's failure once per line, but a line forwarded twice (two readers of one log) would
    repeat it: a repeat within the count's window is the same failure."""

    def __init__(self, write: Any) -> None:
        self._write = write
        self._pending: tuple[float, dict[str, Any]] | None = None
        self._since = 0

    def feed(self, line: str, t: float) -> None:
        if self._pending is not None:
            m = _ERROR_COUNT.search(line)
            if m is not None:
                count, most = m.group("error_count"), m.group("max_failures")
                self._pending[1].update(error_count=int(count), **({} if most == "inf" else
                                                                     {"max_failures": int(most)}))
                self.flush()
                return
            self._since += 1
            if self._since >= COUNT_WITHIN_LINES:
                self.flush()
        m = _FAILURE.search(line)
        if m is not None:
            if self._pending is None:
                self._pending, self._since = (t, {"decision": m.group("decision")}), 0
            return
        for event, pattern in _GROUP:
            g = pattern.search(line)
            if g is not None:
                self._write(event, t, {"size": int(g.group(1))})

    def flush(self) -> None:
        if self._pending is not None:
            t, fields = self._pending
            self._pending = None
            self._write(Ev.RAY_FAILURE_DETECTED, t, fields)


def controller_event_writer(history: str | None, node: str, pid: int) -> Any:
    """A ``write(event, t, fields)`` that appends to the run's history (through the probe's writer: the channel
    when the run has one), or does nothing without a history; a failed write never stops the driver's output."""
    lock = threading.Lock()

    def write(event: Ev, t: float, fields: dict[str, Any]) -> None:
        if not history:
            return
        try:
            with lock:
                write_record({"t": t, "source": Source.RAY, "event": event, "node": node, "pid": pid, **fields},
                             history)
        except OSError:
            pass
    return write


def relay(stream: IO[bytes], out: IO[bytes], lines: ControllerLines, lock: threading.Lock) -> None:
    """Copy the driver's ``stream`` to ``out`` line by line, feeding each line to ``lines``."""
    for raw in iter(stream.readline, b""):
        t = time.time()
        out.write(raw)
        out.flush()
        try:
            with lock:
                lines.feed(raw.decode("utf-8", "replace"), t)
        except Exception:  # an event is never worth the driver's output
            pass
    with lock:
        lines.flush()


def ray_command() -> str:
    """The ``ray`` script of this interpreter's environment (PATH may not have it inside a run's node)."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def start_argv(role: str, args: argparse.Namespace) -> list[str]:
    """The ``ray start --block`` command line of a head or worker node."""
    argv = [ray_command(), "start", "--block", f"--node-ip-address={args.node_ip_address}",
            f"--temp-dir={args.temp_dir}", f"--object-store-memory={args.object_store_bytes}"]
    if role == "head":
        argv += ["--head", f"--port={args.port}", "--num-cpus=0", "--disable-usage-stats", "--include-dashboard=false"]
    else:
        argv += [f"--address={args.address}", f"--num-cpus={args.num_cpus}"]
    return argv


def check_temp_dir(path: str) -> str | None:
    if not os.path.isabs(path):
        return f"--temp-dir must be absolute, got {path!r}"
    if len(path) > MAX_TEMP_DIR:
        return (f"--temp-dir {path!r} is {len(path)} characters; Ray's socket paths under it must fit in 107 bytes, "
                f"keep it within {MAX_TEMP_DIR} (e.g. /tmp/ray-<run id>/<node>)")
    return None


class UnsafeTempDir(RuntimeError):
    """A temp folder that exists but is not this user's private directory: Ray's sockets and logs do not go there."""


def private_dir(path: Path) -> None:
    """Make ``path`` this user's private directory (0700), or accept it only when it already is one.

    The run's Ray folders sit under /tmp with a name that anyone who sees the run id can guess. A folder another
    local user made there first, or a link planted in its place, would have the engine's user (root, for netns)
    write Ray's sockets, logs and the run id through it; so an existing one must be a real directory, owned by this
    user and writable by nobody else (a replaced node finds its own folder from before, which is)."""
    try:
        os.mkdir(path, 0o700)
        return
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        what = ("a link" if stat.S_ISLNK(info.st_mode) else "not a directory" if not stat.S_ISDIR(info.st_mode)
                else f"owned by uid {info.st_uid}" if info.st_uid != os.getuid() else "writable by others")
        raise UnsafeTempDir(f"{path} exists and is {what}: Ray's session is not put there; remove it (or run "
                            "`chaos cleanup`) and run again")


def write_run_id(folder: Path, run_id: str) -> None:
    """``<folder>/run_id`` for the launcher's cleanup, never through a link planted in its place."""
    fd = os.open(folder / RUN_ID_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(run_id)


def remove_temp_dir(temp_dir: str) -> None:
    """Remove this node's Ray temp dir, and the run's parent folder once no other node's is left in it."""
    shutil.rmtree(temp_dir, ignore_errors=True)
    parent = Path(temp_dir).parent
    try:
        if all(p.name == RUN_ID_FILE for p in parent.iterdir()):
            shutil.rmtree(parent, ignore_errors=True)
    except OSError:
        pass


class Node:
    """The processes this node started: ``ray start --block`` (and its GCS, raylet, workers) and the driver."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ray: subprocess.Popen[bytes] | None = None
        self.driver: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.env = {**os.environ, **ENV}

    def start_ray(self, role: str) -> subprocess.Popen[bytes]:
        temp = Path(self.args.temp_dir)
        private_dir(temp.parent)  # the run's folder, shared by its nodes on one host
        private_dir(temp)
        if self.args.run_id:
            write_run_id(temp.parent, self.args.run_id)
        argv = start_argv(role, self.args)
        print(f"ray_node: {' '.join(argv)}", flush=True)
        self.ray = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL)
        return self.ray

    def descendants(self) -> list[psutil.Process]:
        """Every process below this one, and every process of this node's tree mark that re-parented (a Ray
        worker whose raylet died), so a stop misses nothing it started."""
        found: dict[int, psutil.Process] = {}
        try:
            found.update((p.pid, p) for p in psutil.Process().children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        mark = os.environ.get("CHAOS_TREE")
        if mark:
            for proc in psutil.process_iter(["pid"]):
                if proc.pid == os.getpid() or proc.pid in found:
                    continue
                try:
                    if proc.environ().get("CHAOS_TREE") == mark:
                        found[proc.pid] = proc
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                    continue
        return list(found.values())

    def stop(self) -> None:
        """SIGTERM to the driver and ``ray start`` (which stops its GCS and raylet), SIGKILL to what is left,
        then remove the node's temp dir."""
        self.stopping = True
        procs = self.descendants()
        for child in (self.driver, self.ray):
            if child is not None and child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in (self.driver, self.ray):
            if child is not None:
                try:
                    child.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
        left = [p for p in procs + self.descendants() if p.is_running()]
        for proc in left:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(left, timeout=2)
        remove_temp_dir(self.args.temp_dir)

    def on_signal(self, signum: int, _frame: object) -> None:
        print(f"ray_node: {signal.Signals(signum).name}: stopping this node's Ray processes", flush=True)
        self.stop()
        os._exit(128 + signum)


def run_head(args: argparse.Namespace, driver: Sequence[str]) -> int:
    node = Node(args)
    signal.signal(signal.SIGTERM, node.on_signal)
    signal.signal(signal.SIGINT, node.on_signal)
    ray = node.start_ray("head")
    address = f"{args.node_ip_address}:{args.port}"
    waiter = subprocess.Popen([sys.executable, "-c", _COUNT_WORKERS, address, str(args.expect_workers),
                               str(args.join_timeout_s)], env=node.env)
    while waiter.poll() is None:
        if ray.poll() is not None:
            waiter.kill()
            print(f"ray_node: `ray start --head` ended with {ray.returncode} before the cluster was up",
                  file=sys.stderr, flush=True)
            node.stop()
            return ray.returncode or 1
        time.sleep(0.2)
    if waiter.returncode != 0:
        node.stop()
        return EXIT_NO_WORKERS
    print(f"ray_node: {args.expect_workers} worker node(s) joined; driver: {' '.join(driver)}", flush=True)
    node.driver = subprocess.Popen(list(driver), env={**node.env, "RAY_ADDRESS": address}, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    write = controller_event_writer(os.environ.get("CHAOS_EVENTS"), os.environ.get("CHAOS_NODE", "node0"),
                                    node.driver.pid)
    lines, lock = ControllerLines(write), threading.Lock()
    relays = [threading.Thread(target=relay, args=(stream, out, lines, lock), daemon=True)
              for stream, out in ((node.driver.stdout, sys.stdout.buffer), (node.driver.stderr, sys.stderr.buffer))]
    for thread in relays:
        thread.start()
    code = node.driver.wait()
    for thread in relays:
        thread.join(timeout=STOP_GRACE_S)  # the driver's last lines before ours
    print(f"ray_node: the driver exited with {code}", flush=True)
    node.stop()
    return code


def run_worker(args: argparse.Namespace) -> int:
    node = Node(args)
    signal.signal(signal.SIGTERM, node.on_signal)
    signal.signal(signal.SIGINT, node.on_signal)
    deadline = time.monotonic() + args.connect_timeout_s
    while True:
        started = time.monotonic()
        code = node.start_ray("worker").wait()
        # `ray start --block` that ran a while and ended: the raylet died or lost the head. One that failed at once
        # could not reach the head yet: try again until the deadline.
        if time.monotonic() - started > 15 or time.monotonic() > deadline:
            break
        print(f"ray_node: `ray start` ended with {code}; the head may not be up yet, retrying", flush=True)
        time.sleep(1)
    print(f"ray_node: `ray start --block` ended with {code}", flush=True)
    node.stop()
    return code if code else 1  # a worker node is never meant to end on its own


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    driver: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, driver = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(prog="python -m chaos.launchers.ray_node", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="role", required=True)
    for role in ("head", "worker"):
        s = sub.add_parser(role)
        s.add_argument("--node-ip-address", required=True, help="the address Ray registers this node on")
        s.add_argument("--temp-dir", required=True, help=f"Ray's session folder (absolute, <= {MAX_TEMP_DIR} chars)")
        s.add_argument("--object-store-bytes", type=int, default=OBJECT_STORE_BYTES)
        s.add_argument("--run-id", default="", help=f"written to <temp dir>/../{RUN_ID_FILE} for chaos cleanup")
        if role == "head":
            s.add_argument("--port", type=int, required=True, help="the GCS port")
            s.add_argument("--expect-workers", type=int, required=True, help="worker nodes to wait for")
            s.add_argument("--join-timeout-s", type=float, default=JOIN_TIMEOUT_S)
        else:
            s.add_argument("--address", required=True, help="the head's GCS, HOST:PORT")
            s.add_argument("--num-cpus", type=int, default=1, help="CPUs this node offers to Ray")
            s.add_argument("--connect-timeout-s", type=float, default=CONNECT_TIMEOUT_S)
    args = p.parse_args(argv)
    if (problem := check_temp_dir(args.temp_dir)) is not None:
        p.error(problem)
    if args.role == "head" and not driver:
        p.error("head: the driver command goes after `--`")
    if args.role == "worker" and driver:
        p.error("worker: takes no driver command")
    return args, driver


def main(argv: Sequence[str] | None = None) -> int:
    args, driver = parse_args(argv)
    try:
        return run_head(args, driver) if args.role == "head" else run_worker(args)
    except UnsafeTempDir as exc:
        print(f"ray_node: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
