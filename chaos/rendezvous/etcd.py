"""etcd rendezvous: torchrun's two etcd backends, over etcd members the runtime runs (on the loopback the nodes share
on local; in a network namespace or container of their own, with an address on the nodes' network, on netns and
docker).

``etcd`` is torchelastic's original etcd rendezvous (``EtcdRendezvousHandler``: its own protocol in etcd keys);
``etcd-v2`` is the dynamic rendezvous (the c10d backend's state machine) over etcd's v2 API
(``EtcdRendezvousBackend``). In torch 2.13 both make their python-etcd client with ``allow_reconnect=True``: it
reads the member list from the endpoint when it is made, and moves to another member when its own dies.
Both need etcd's v2 API (``--enable-v2``; Debian's ``etcd-server`` is etcd 3.4) and the ``python-etcd`` client
(``pip install torch-chaos[etcd]``). ``rendezvous.members`` (1 or 3) members named ``etcd0``..; the endpoint is
``etcd0``. Faults target a member by name (``crash``/``freeze`` ``target: etcd1``).
See docs/design.md, "etcd rendezvous".
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.capabilities import RENDEZVOUS_SERVERS
from chaos.machine import Check
from chaos.plan import NodePlan, fmt_arg, free_port
from chaos.rendezvous.base import RendezvousBackend

if TYPE_CHECKING:
    from chaos.machine import Check

HOST = "127.0.0.1"


def etcd_version() -> str | None:
    """``etcd --version``'s first line, or None where etcd is not installed."""
    binary = shutil.which("etcd")
    if binary is None:
        return None
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else "etcd (unknown version)"


class EtcdBackend(RendezvousBackend):
    """What both etcd backends share: the members, their command lines, the machine checks."""

    name: ClassVar[str] = ""
    needs = frozenset({RENDEZVOUS_SERVERS})
    uses_c10d_store = False
    server_prefix = "etcd"
    default_members = 1
    # rdzv-conf keys this backend reads (scenario setting -> torchrun key)
    conf: ClassVar[dict[str, str]] = {}

    @classmethod
    def machine_checks(cls) -> list[Check]:
        version = etcd_version()
        client = importlib.util.find_spec("etcd") is not None
        return [Check("etcd server", version is not None, version or "etcd is not installed",
                      fix="apt-get install -y etcd-server"),
                Check("python-etcd client", client, "importable" if client else "python-etcd is not installed "
                      "(torchrun's etcd backends import it)", fix="pip install 'torch-chaos[etcd]'")]

    def servers(self, *, run_id: str, run_dir: Path, members: int,
                addresses: Mapping[str, str] | None = None) -> list[NodePlan]:
        # Free ports on the engine's host: needed where the members share its loopback, harmless where each has
        # a network stack of its own (netns, docker).
        ports = [(free_port(), free_port()) for _ in range(members)]
        names = [f"{self.server_prefix}{i}" for i in range(members)]
        hosts = [(addresses or {}).get(n, HOST) for n in names]
        cluster = ",".join(f"{n}=http://{h}:{peer}" for n, h, (_, peer) in zip(names, hosts, ports, strict=True))
        plans = []
        for i, (name, host, (client, peer)) in enumerate(zip(names, hosts, ports, strict=True)):
            argv = ["etcd", "--name", name, "--data-dir", str(run_dir / "etcd" / name), "--enable-v2=true",
                    "--listen-client-urls", f"http://{host}:{client}",
                    "--advertise-client-urls", f"http://{host}:{client}",
                    "--listen-peer-urls", f"http://{host}:{peer}",
                    "--initial-advertise-peer-urls", f"http://{host}:{peer}",
                    "--initial-cluster", cluster, "--initial-cluster-state", "new",
                    "--initial-cluster-token", run_id,
                    # a member that dies is noticed within a second or two (defaults: 100 ms / 1 s)
                    "--heartbeat-interval", "100", "--election-timeout", "1000"]
            plans.append(NodePlan(name, i, argv, {"CHAOS_RUN_ID": run_id, "CHAOS_NODE": name,
                                                  "ETCD_CLIENT_HOST": host, "ETCD_CLIENT_PORT": str(client)},
                                  role="server"))
        return plans

    def endpoint(self, servers: list[NodePlan]) -> str:
        return f"{servers[0].env['ETCD_CLIENT_HOST']}:{servers[0].env['ETCD_CLIENT_PORT']}"

    def torchrun_args(self, *, endpoint: str, run_id: str, is_host: bool, settings: dict[str, Any]) -> list[str]:
        conf = [f"{name}={fmt_arg(settings[key])}" for key, name in self.conf.items() if settings.get(key) is not None]
        return [f"--rdzv-backend={self.name}", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}",
                *([f"--rdzv-conf={','.join(conf)}"] if conf else [])]


class Etcd(EtcdBackend):
    name = "etcd"
    summary = "torchelastic's etcd rendezvous, over etcd members the runtime runs (rendezvous.members)"
    # EtcdRendezvousHandler reads `timeout` (join) and `last_call_timeout`, integers in seconds
    conf: ClassVar[dict[str, str]] = {"join_timeout_s": "timeout", "last_call_timeout_s": "last_call_timeout"}

    def torchrun_args(self, *, endpoint: str, run_id: str, is_host: bool, settings: dict[str, Any]) -> list[str]:
        ints = {k: (round(v) if isinstance(v, float) else v) for k, v in settings.items()}
        return super().torchrun_args(endpoint=endpoint, run_id=run_id, is_host=is_host, settings=ints)


class EtcdV2(EtcdBackend):
    name = "etcd-v2"
    summary = "the dynamic rendezvous (c10d's state machine) over etcd's v2 API, on members the runtime runs"
    conf: ClassVar[dict[str, str]] = {
        "join_timeout_s": "join_timeout", "last_call_timeout_s": "last_call_timeout",
        "close_timeout_s": "close_timeout", "keep_alive_interval_s": "keep_alive_interval",
        "keep_alive_max_attempt": "keep_alive_max_attempt"}

    def torchrun_args(self, *, endpoint: str, run_id: str, is_host: bool, settings: dict[str, Any]) -> list[str]:
        args = super().torchrun_args(endpoint=endpoint, run_id=run_id, is_host=is_host, settings=settings)
        timeout = settings.get("read_timeout_s")
        if timeout is not None:  # the etcd client's read timeout: a positive integer
            conf = f"read_timeout={max(1, round(timeout))}"
            args = [a + "," + conf if a.startswith("--rdzv-conf=") else a for a in args]
            if not any(a.startswith("--rdzv-conf=") for a in args):
                args.append(f"--rdzv-conf={conf}")
        return args
