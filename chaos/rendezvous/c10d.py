"""c10d: torchrun's built-in TCP-store rendezvous (the store in node 0's agent, or a dedicated store process)."""

from __future__ import annotations

from typing import Any

from chaos.plan import RDZV_CONF, fmt_arg
from chaos.rendezvous.base import RendezvousBackend


class C10d(RendezvousBackend):
    name = "c10d"
    summary = "torchrun's TCP store rendezvous; is_host says which agent serves the store"

    def torchrun_args(self, *, endpoint: str, run_id: str, is_host: bool, settings: dict[str, Any]) -> list[str]:
        conf = [f"is_host={'true' if is_host else 'false'}"]
        conf += [f"{name}={fmt_arg(settings[key])}" for key, name in RDZV_CONF.items()]
        return [f"--rdzv-backend={self.name}", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}",
                f"--rdzv-conf={','.join(conf)}"]
