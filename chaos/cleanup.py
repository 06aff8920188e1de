"""Remove what torch-chaos created and nothing else, by asking every plug-in what it leaves behind.

Runtimes remove their own objects (docker: labelled containers and networks; local: marked processes, helpers
included; netns: ``tchaos-`` namespaces, their iptables rules and qdiscs going with them), in their
``cleanup_order``; fault kinds add whatever an interrupted injection could leave outside those.
Then the container clusters (``chaos cluster``): one whose ``up`` died half-way or whose state file is gone; with
``--all``, every one. Idempotent: a second call finds nothing. By default only the leftovers of runs whose engine is
gone.
"""

from __future__ import annotations

from chaos.cluster.slurm import cleanup as cluster_cleanup
from chaos.registry import fault_plugins, launcher_plugins, runtime_plugins
from chaos.storage.layer import cleanup as storage_cleanup


def cleanup(run_id: str | None = None, only_orphans: bool = True) -> list[str]:
    removed: list[str] = []
    for runtime in sorted(runtime_plugins().values(), key=lambda r: r.cleanup_order):
        removed += runtime.cleanup(run_id, only_orphans)
    for kind in fault_plugins().values():
        removed += kind.cleanup(run_id, only_orphans)
    for launcher in launcher_plugins().values():  # what a launcher leaves outside the trees (Ray's session dirs)
        removed += launcher.cleanup(run_id, only_orphans)
    removed += cluster_cleanup(run_id, only_orphans)  # not runs: --run-id leaves them alone
    # Last: a storage layer's mount, once nothing (a node, a container) uses it any more.
    removed += storage_cleanup(run_id, only_orphans)
    return removed
