"""The netns runtime: nodes are local process trees, each in its own Linux network namespace (needs root).

The same isolation as containers without a daemon or an image: a hub namespace holds a bridge, every node's
namespace is joined to it by a veth pair, and nothing routes off the machine (the hub has no uplink). All
namespaces share one hostname, so torchrun gets ``--local-addr`` and an explicit ``is_host`` (the plan does
both). Setup takes tens of milliseconds. Namespaces are named ``tchaos-<run>-<node>`` and an owner file in
``/run/torch-chaos/netns`` names the engine that made them, so ``chaos cleanup`` can tell orphans from live runs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from chaos.capabilities import NODE_NETWORK
from chaos.channel import listen as channel_listen
from chaos.machine import net_checks
from chaos.plan import OWN_STACK_ENV, OWN_STACK_STORE_PORT, STORE_NODE, Addressing, NodePlan, Plan, node_names
from chaos.runtimes.local import LocalRuntime

if TYPE_CHECKING:
    from chaos.machine import Check
    from chaos.scenario import Scenario

NS_PREFIX = "tchaos-"
OWNERS_DIR = Path("/run/torch-chaos/netns")
SUBNET = "10.213.0"
HUB_ADDRESS = f"{SUBNET}.254"  # the hub's bridge: where the engine's history channel listens (inside the hub)


def node_address(name: str, index: int) -> str:
    return f"{SUBNET}.250" if name == STORE_NODE else f"{SUBNET}.{10 + index}"


def _setns(fd: int) -> None:
    """setns(2) into a network namespace (``os.setns`` only exists from Python 3.12)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def list_namespaces() -> list[str]:
    if shutil.which("ip") is None:
        return []
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.startswith(NS_PREFIX)]


def run_prefix(run_id: str) -> str:
    """Short enough for every derived name; the run id ends in a random hex suffix."""
    return f"{NS_PREFIX}{run_id[-6:]}"


def owner_alive(prefix: str) -> bool:
    try:
        owner = json.loads((OWNERS_DIR / f"{prefix}.json").read_text())
    except (OSError, ValueError):
        return False
    return psutil.pid_exists(int(owner.get("engine_pid", -1)))


def delete_namespaces(prefix: str | None, only_orphans: bool = False) -> list[str]:
    """Delete torch-chaos namespaces (one run's, or all); a namespace goes with every rule and qdisc in it."""
    removed = []
    for ns in list_namespaces():
        run = "-".join(ns.split("-")[:2])
        if prefix is not None and run != prefix:
            continue
        if only_orphans and owner_alive(run):
            continue
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        removed.append(f"netns {ns}")
    left = list_namespaces()
    for owner in OWNERS_DIR.glob("*.json") if OWNERS_DIR.is_dir() else []:
        if prefix is not None and owner.stem != prefix:
            continue
        if only_orphans and owner_alive(owner.stem):
            continue  # a live run between writing its owner file and creating its namespaces
        if not any(n.startswith(owner.stem + "-") for n in left):
            owner.unlink(missing_ok=True)
    return removed


class NetnsRuntime(LocalRuntime):
    name = "netns"
    summary = "local processes, each node in its own network namespace (root)"
    # each node has a loopback of its own: servers on the engine's are out of its reach
    capabilities = LocalRuntime.capabilities | {NODE_NETWORK}
    cleanup_order = 70  # after the processes in the namespaces are gone

    @classmethod
    def machine_checks(cls, options: Any = None) -> list[Check]:
        return net_checks("root", "iproute2 (ip, tc)", "nsenter")

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        return delete_namespaces(run_prefix(run_id) if run_id else None, only_orphans=only_orphans)

    def __init__(self, run_id: str, run_dir: str | Path):
        super().__init__(run_id, run_dir)
        self.prefix = run_prefix(run_id)
        self.hub = f"{self.prefix}-hub"
        self.addresses: dict[str, str] = {}

    def ns(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def addressing(self, scenario: Scenario) -> Addressing:
        self.addresses = {n: node_address(n, i) for i, n in enumerate(node_names(scenario))}
        return Addressing(dict(self.addresses), OWN_STACK_STORE_PORT, env=dict(OWN_STACK_ENV),
                          channel_host=HUB_ADDRESS)

    def prepare(self, plan: Plan) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the netns runtime needs root (network namespaces); run as root or use "
                               "cluster.runtime: local")
        super().prepare(plan)
        OWNERS_DIR.mkdir(parents=True, exist_ok=True)
        (OWNERS_DIR / f"{self.prefix}.json").write_text(json.dumps(
            {"run_id": self.run_id, "engine_pid": os.getpid(), "run_dir": str(self.run_dir)}))
        ip("netns", "add", self.hub)
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "link", "set", "br0", "up")
        ip("-n", self.hub, "addr", "add", f"{HUB_ADDRESS}/24", "dev", "br0")  # the engine's channel, see below
        for name, address in self.addresses.items():
            ns = self.ns(name)
            ip("netns", "add", ns)
            ip("-n", self.hub, "link", "add", f"v-{name}"[:15], "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("-n", self.hub, "link", "set", f"v-{name}"[:15], "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def start_node(self, node: NodePlan) -> None:
        # nsenter execs the command, so the process the runtime tracks is the node's own (torchrun).
        entered = replace(node, argv=["nsenter", f"--net=/run/netns/{self.ns(node.name)}", "--", *node.argv])
        super().start_node(entered)

    def channel_socket(self, host: str, port: int) -> socket.socket:
        """The channel's listening socket, made inside the hub namespace on the bridge's address.

        The engine stays in the machine's namespace (its tools, its other sockets); only a short-lived thread
        enters the hub to create the socket, which belongs to the hub's network for its whole life. So the nodes
        reach the engine on their own subnet, the machine gets no route or address into it, and two netns runs
        (same subnet, different hubs) never collide."""
        made: list[socket.socket] = []
        failed: list[BaseException] = []

        def make() -> None:
            try:
                with open(f"/run/netns/{self.hub}") as target:
                    _setns(target.fileno())  # this thread only (a network namespace is per thread)
                made.append(channel_listen(host, port))
            except BaseException as exc:  # re-raised in the engine's thread
                failed.append(exc)

        thread = threading.Thread(target=make, name="torch-chaos-netns-channel")
        thread.start()  # the thread ends in the hub namespace and is discarded: nothing else runs there
        thread.join()
        if failed:
            raise failed[0]
        return made[0]

    def net_enter(self, name: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.ns(name)}", "--"]

    def teardown(self) -> list[str]:
        cleaned = super().teardown()
        return cleaned + delete_namespaces(self.prefix)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "runtime": self.name, "network": f"namespaces {self.prefix}-*, bridge in "
                f"{self.hub}, subnet {SUBNET}.0/24, no route off the machine"}
