"""The container cluster's agent: the privileged things a run on the cluster may ask for, losing a host and
editing a compute host's network.

Losing a host needs root on it (or on what runs it). On a real Slurm cluster the engine runs as an ordinary user
and has none, so the Slurm runtime refuses ``host_loss`` there. On the container cluster the machine that runs the
containers can do it, the way a Chaos Mesh daemon on each Kubernetes node does what a pod may not: ``chaos cluster
up`` starts this agent on the host, beside the containers, and the runtime on the login node asks it.

What it can do, and nothing more (docs/design.md, "The cluster agent"):

- ``lose`` host ``cN``: ``docker kill`` of *this* cluster's compute container ``cN``, found by its labels (the
  cluster's name, this bring-up's id, role compute) and its name; never any other container.
- ``return`` host ``cN``: ``docker start`` of the same container (slurmd comes back; ``ReturnToService=2`` makes
  the node usable again).
- ``net`` on host ``cN`` with ``argv``: one iptables/tc command of the shapes network faults issue, run by
  ``nsenter`` in the network namespace of the same container; any other argv is refused before anything runs
  (:mod:`chaos.cluster.netexec` says exactly which, and why a free argv would be root on the docker host).
- ``ping``: changes nothing; says which actions it takes (how the runtime knows a capability is there).

The protocol is one JSON object per connection, one line each way: ``{"token": T, "action": A, "host": H}`` in,
``{"ok": true, "action": A, "host": H, "container": C, "done": "docker kill", "t": time.time()}`` (or ``{"ok":
false, "error": ...}``) out. Every field is checked: exactly these keys, the token compared in constant time, an
action of the four, a host name of the cluster's own. The agent listens on the cluster network's gateway address
only (the host's side of the internal bridge), and answers only peers whose address is on the cluster's subnet:
Linux delivers a packet for any local address from any interface, so binding alone would not keep out a peer that
routes to the gateway's address. The token (a random one per bring-up) is what keeps out anything else that can
reach it; it is written into the controller readable by the cluster's user only
(:data:`chaos.cluster.spec.AGENT_FILE`). A connection holds nothing but a descriptor until its request line shows
the token (read by one thread, :mod:`chaos.gate`, within READ_TIMEOUT_S; at most PER_PEER waiting from one
address); at most MAX_CONNECTIONS token-bearing requests are handled at once.

The agent leaves when its cluster's controller container is gone (``down``, or anything that removed it), so an
agent outlives its cluster by a few seconds at most; ``down`` and ``chaos cleanup`` stop it anyway.

Standard library only, but for the docker SDK it uses to reach the engine (imported when it starts serving).
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import ipaddress
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from chaos.cluster.netexec import Refused, nsenter_run, validate
from chaos.cluster.spec import CLUSTER_LABEL, ID_LABEL, ROLE_LABEL
from chaos.gate import Gate, Limits
from chaos.image import _client

ACTIONS = ("lose", "return", "net", "ping")
HOST_RE = re.compile(r"^c[1-9][0-9]{0,2}$")
MAX_CONNECTIONS = 16  # handler threads at once (token-bearing requests); more are closed unanswered
MAX_PENDING = 128  # connections waiting for their request line (no thread, no slot); beyond, the oldest is closed
# of those, from one address (beyond, that address's oldest is closed): one container's flood cannot push out the
# login node's request; as many as the slots, so a burst of the login node's own requests is not cut short by it
PER_PEER = MAX_CONNECTIONS
MAX_REQUEST = 4096  # bytes: a request is three short fields, or a net one's argv (40 short arguments at most)
READ_TIMEOUT_S = 2.0  # from accept to the request's newline (the client sends it at once)
WATCH_S = 2.0  # how often the agent looks whether its cluster is still there
MODULE = "chaos.cluster.agent"


class AgentError(RuntimeError):
    """The agent refused, or could not be reached; the message says why."""


class Docker(Protocol):
    """What the agent does to the engine: find one container, kill it, start it (a fake in the tests)."""

    def compute_container(self, cluster: str, cluster_id: str, host: str) -> str | None: ...

    def kill(self, container: str) -> None: ...

    def start(self, container: str) -> None: ...

    def controller_exists(self, cluster: str, cluster_id: str) -> bool: ...

    def pid(self, container: str) -> int | None:
        """The container's init process as the host sees it (None: not running)."""
        ...


class SdkDocker:
    """The docker SDK behind :class:`Docker`: containers are found by this cluster's labels, then by name."""

    def __init__(self) -> None:
        self.client = _client(timeout=30)

    def _containers(self, cluster: str, cluster_id: str, role: str) -> list[dict[str, Any]]:
        return list(self.client.api.containers(all=True, filters={"label": [
            f"{CLUSTER_LABEL}={cluster}", f"{ID_LABEL}={cluster_id}", f"{ROLE_LABEL}={role}"]}))

    def compute_container(self, cluster: str, cluster_id: str, host: str) -> str | None:
        want = f"/tchaos-{cluster}-{host}"
        for ct in self._containers(cluster, cluster_id, "compute"):
            if want in ct.get("Names", []):
                return str(want.lstrip("/"))
        return None

    def kill(self, container: str) -> None:
        self.client.api.kill(container)

    def start(self, container: str) -> None:
        self.client.api.start(container)

    def controller_exists(self, cluster: str, cluster_id: str) -> bool:
        return bool(self._containers(cluster, cluster_id, "controller"))

    def pid(self, container: str) -> int | None:
        state = self.client.api.inspect_container(container).get("State", {})
        return int(state["Pid"]) if state.get("Running") and state.get("Pid") else None


# What runs a validated net argv in a container's namespace: (pid, argv, the pid read again) -> (rc, out, err).
NetRunner = Callable[[int, list[str], Callable[[], int | None]], tuple[int, str, str]]


def _nsenter_run(pid: int, argv: list[str], pid_now: Callable[[], int | None]) -> tuple[int, str, str]:
    return nsenter_run(pid, argv, pid_now)


def handle(request: bytes, *, token: str, cluster: str, cluster_id: str, docker: Docker,
           runner: NetRunner = _nsenter_run) -> dict[str, Any]:
    """One request to its answer; refuses anything that is not exactly a request this agent takes."""

    refused = check_token(request, token)
    if refused is not None:
        return refused
    msg = json.loads(request.decode("utf-8"))  # check_token parsed it: a JSON object with the token
    action = msg.get("action")
    if action not in ACTIONS:
        return {"ok": False, "error": f"action must be one of {', '.join(ACTIONS)}"}
    expected = {"token", "action"} if action == "ping" else {"token", "action", "host"} | (
        {"argv"} if action == "net" else set())
    if set(msg) != expected:
        return {"ok": False, "error": f"{action} takes exactly the fields {', '.join(sorted(expected))}"}
    if action == "ping":
        return {"ok": True, "action": "ping", "cluster": cluster, "actions": list(ACTIONS), "t": time.time()}
    host = msg["host"]
    if not isinstance(host, str) or not HOST_RE.fullmatch(host):  # match() would take "c1\n" ($ before a newline)
        return {"ok": False, "error": "host must be a compute node's name (c1, c2, ...)"}
    argv: list[str] = []
    if action == "net":
        try:
            argv = validate(msg["argv"])
        except Refused as exc:
            return {"ok": False, "error": f"argv refused: {exc}"}
    try:
        container = docker.compute_container(cluster, cluster_id, host)
    except Exception as exc:  # the engine's answer, whatever it was, is the agent's
        return {"ok": False, "error": f"docker: {exc}"}
    if container is None:
        return {"ok": False, "error": f"cluster {cluster} has no compute node {host}"}
    if action == "net":
        return _net(docker, runner, container, host, argv)
    try:
        if action == "lose":
            docker.kill(container)
        else:
            docker.start(container)
    except Exception as exc:
        return {"ok": False, "error": f"docker {'kill' if action == 'lose' else 'start'} {container}: {exc}"}
    return {"ok": True, "action": action, "host": host, "container": container,
            "done": "docker kill" if action == "lose" else "docker start", "t": time.time()}


def _net(docker: Docker, runner: NetRunner, container: str, host: str, argv: list[str]) -> dict[str, Any]:
    """Run a validated argv in the container's network namespace; the tool's own status is the answer's ``rc``
    (a tool that refuses is not the agent refusing)."""
    try:
        pid = docker.pid(container)
        if pid is None:
            return {"ok": False, "error": f"{container} is not running"}
        rc, out, err = runner(pid, argv, lambda: docker.pid(container))
    except Exception as exc:
        return {"ok": False, "error": f"nsenter into {container}: {exc}"}
    return {"ok": True, "action": "net", "host": host, "container": container, "rc": rc, "stdout": out,
            "stderr": err, "done": f"nsenter --net {argv[0]}", "t": time.time()}


def check_token(request: bytes, token: str) -> dict[str, Any] | None:
    """The refusal of a request that does not carry the token (or is no JSON object), else None: asked before the
    request may take one of the MAX_CONNECTIONS slots, so that whoever lacks the token holds none."""
    try:
        msg = json.loads(request.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # b"[" * 1000 nests deeper than the parser goes
        return {"ok": False, "error": "not a JSON object"}
    if not isinstance(msg, dict):
        return {"ok": False, "error": "not a JSON object"}
    given = msg.get("token")
    # surrogatepass: a lone surrogate ("\ud800") is a wrong token, not an encoding error
    if not isinstance(given, str) or not hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                                                             token.encode()):
        return {"ok": False, "error": "wrong token"}
    return None


class AgentServer:
    """The agent's TCP server. One thread (:class:`chaos.gate.Gate`) accepts and reads each request line, without
    blocking, within READ_TIMEOUT_S: a connection costs no thread and no slot until its line shows the token.
    At most MAX_PENDING connections wait for their line, PER_PEER of them from one address (beyond, that
    address's oldest is closed), so neither idle connections nor one container's flood keep out the login node's
    requests. Token-bearing requests are handled in at most MAX_CONNECTIONS threads at once.

    ``serve_forever``/``shutdown``/``server_close``/``server_address`` as :mod:`socketserver`'s servers have."""

    def __init__(self, address: tuple[str, int], *, token: str, cluster: str, cluster_id: str, docker: Docker,
                 log: Any = None, runner: NetRunner = _nsenter_run, subnet: str | None = None):
        self.token, self.cluster, self.cluster_id, self.docker = token, cluster, cluster_id, docker
        self.runner = runner
        self.subnet = ipaddress.ip_network(subnet) if subnet else None  # who may connect (None: anyone)
        self.lock = threading.Lock()
        self.log = log or (lambda line: None)
        self._refused_peers: set[str] = set()  # peers off the subnet already logged (a flood is one line each)
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(128)
        except BaseException:
            self.socket.close()
            raise
        self.server_address = self.socket.getsockname()
        self.gate = Gate(self.socket, admit=self._admit, serve=self._serve, name="torch-chaos-agent",
                         limits=Limits(first_line_max=MAX_REQUEST, first_line_s=READ_TIMEOUT_S,
                                       max_pending=MAX_PENDING, per_peer=PER_PEER, max_served=MAX_CONNECTIONS),
                         on_limit=lambda what, detail: self.log(f"{time.time():.3f} limit reached ({what}): {detail}"),
                         allowed=self._allowed,
                         too_long=json.dumps({"ok": False, "error": f"request longer than {MAX_REQUEST} bytes"})
                         .encode() + b"\n")

    def _allowed(self, peer: str) -> bool:
        if self.subnet is None:
            return True
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(peer.split("%", 1)[0]) in self.subnet:
                return True
        # Linux takes a packet for any local address on any interface: a peer off the cluster network that
        # routes to the gateway's address reaches the socket; only the cluster's containers may ask
        if peer not in self._refused_peers and len(self._refused_peers) < 1024:
            self._refused_peers.add(peer)
            self.log(f"{time.time():.3f} refused a connection from {peer}: not on {self.subnet} (logged once)")
        return False

    def _admit(self, line: bytes, peer: str) -> tuple[bool, Any]:
        refusal = check_token(line, self.token)
        if refusal is not None:
            self.log(f"{time.time():.3f} - -: {refusal['error']} (from {peer})")
            return False, json.dumps(refusal).encode() + b"\n"
        return True, line

    def _serve(self, conn: socket.socket, peer: str, line: bytes, rest: bytes) -> None:
        conn.settimeout(READ_TIMEOUT_S)  # the answer's write: a peer that never reads is not waited for long
        with self.lock:  # one docker action at a time: a lose and a return never race
            answer = handle(line, token=self.token, cluster=self.cluster, cluster_id=self.cluster_id,
                            docker=self.docker, runner=self.runner)
        what = f" {answer['done']} rc={answer['rc']}" if answer.get("action") == "net" else ""
        self.log(f"{time.time():.3f} {answer.get('action', '-')} {answer.get('host', '-')}{what}: "
                 f"{'ok' if answer['ok'] else answer['error']}")
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(answer).encode() + b"\n")

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until :meth:`shutdown` (``poll_interval`` is socketserver's; the gate wakes at once)."""
        self.gate.run()

    def shutdown(self) -> None:
        """Stop serving_forever and wait for it to return (requests being handled finish on their own)."""
        self.gate.stop()

    def server_close(self) -> None:
        with contextlib.suppress(OSError):
            self.socket.close()


# --- the client (the Slurm runtime, on the login node) -------------------------------------------------------------


def read_config(path: str | Path) -> dict[str, Any]:
    """The agent's address and token as ``up`` wrote them into the controller; AgentError when unusable."""
    try:
        config = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise AgentError(f"{path} does not exist") from None
    except PermissionError:
        raise AgentError(f"{path} is not readable by this user") from None
    except (OSError, ValueError) as exc:
        raise AgentError(f"{path} is unreadable: {exc}") from None
    if not (isinstance(config, dict) and isinstance(config.get("address"), str)
            and isinstance(config.get("port"), int) and isinstance(config.get("token"), str)):
        raise AgentError(f"{path} lacks address, port or token")
    return config


def ask(config: dict[str, Any], action: str, host: str | None = None, timeout: float = 10.0,
        argv: list[str] | None = None) -> dict[str, Any]:
    """One request to the agent; its answer when ok, else AgentError with the agent's reason."""
    msg: dict[str, Any] = {"token": config["token"], "action": action}
    if host is not None:
        msg["host"] = host
    if argv is not None:
        msg["argv"] = argv
    where = f"{config['address']}:{config['port']}"
    try:
        with socket.create_connection((config["address"], config["port"]), timeout=timeout) as s:
            s.sendall(json.dumps(msg).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise AgentError(f"the cluster agent at {where} does not answer ({exc})") from None
    try:
        answer = json.loads(data)
    except ValueError:
        raise AgentError(f"the cluster agent at {where} answered no JSON: {data[:200]!r}") from None
    if not isinstance(answer, dict) or not answer.get("ok"):
        why = answer.get("error") if isinstance(answer, dict) else answer
        raise AgentError(f"the cluster agent at {where} refused {action}" + (f" {host}" if host else "") + f": {why}")
    return answer


# --- the daemon ------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m chaos.cluster.agent CONFIG``: serve until the cluster's controller is gone or SIGTERM.

    CONFIG (mode 0600, written by ``up``) holds the bind address, the token and the cluster's name and id: never
    on the command line, where every user's ``ps`` shows it. Once listening, the agent writes its port and pid
    to CONFIG's ``.ready`` sibling, which ``up`` waits for."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("config")
    parser.add_argument("--cluster", required=True, help="the cluster's name (for ps and cleanup; CONFIG rules)")
    args = parser.parse_args(argv)
    config = json.loads(Path(args.config).read_text())
    logfile = open(Path(args.config).with_suffix(".log"), "a", buffering=1)  # open for the server's life

    def log(line: str) -> None:
        logfile.write(line + "\n")

    docker = SdkDocker()
    server = AgentServer((config["bind"], 0), token=config["token"], cluster=config["cluster"],
                         cluster_id=config["cluster_id"], docker=docker, log=log, subnet=config.get("subnet"))
    ready = Path(args.config).with_suffix(".ready")
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(json.dumps({"port": server.server_address[1], "pid": os.getpid()}))
    os.replace(tmp, ready)
    log(f"{time.time():.3f} listening on {config['bind']}:{server.server_address[1]} for cluster "
        f"{config['cluster']} ({config['cluster_id']})")
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())

    def watch() -> None:
        misses = 0
        while True:
            time.sleep(WATCH_S)
            try:
                misses = 0 if docker.controller_exists(config["cluster"], config["cluster_id"]) else misses + 1
            except Exception as exc:  # the engine did not answer: no news of the controller, not its absence
                log(f"{time.time():.3f} docker did not answer ({exc}): the cluster is assumed still there")
                continue
            if misses >= 2:  # twice in a row: not a hiccup of the engine
                log(f"{time.time():.3f} the cluster's controller is gone: leaving")
                server.shutdown()
                return

    threading.Thread(target=watch, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        log(f"{time.time():.3f} stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
