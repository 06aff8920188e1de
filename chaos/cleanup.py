"""Remove what torch-chaos created and nothing else: marked processes (nodes, delayers), containers and networks
labelled ``torch-chaos``, and ``tchaos-`` namespaces (their iptables rules and qdiscs go with them).

Idempotent: a second call finds nothing. By default only the leftovers of runs whose engine is gone.
"""

from __future__ import annotations


def cleanup(run_id: str | None = None, only_orphans: bool = True) -> list[str]:
    from chaos.runtimes.docker import remove_objects
    from chaos.runtimes.local import kill_marked
    from chaos.runtimes.netns import delete_namespaces, run_prefix

    # Containers first: their processes carry marks too, and a paused (frozen) one dies only with its container.
    removed = remove_objects(run_id, only_orphans=only_orphans)
    removed += [f"process {p.pid}" for p in kill_marked(run_id, only_orphans=only_orphans)]
    removed += delete_namespaces(run_prefix(run_id) if run_id else None, only_orphans=only_orphans)
    return removed
