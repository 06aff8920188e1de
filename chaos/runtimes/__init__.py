"""Runtimes: where nodes live. One module per backend; each implements :class:`chaos.runtimes.base.Runtime`."""

from __future__ import annotations

from chaos.runtimes.base import Runtime


def create_runtime(name: str, run_id: str, run_dir: str) -> Runtime:
    if name == "local":
        from chaos.runtimes.local import LocalRuntime

        return LocalRuntime(run_id, run_dir)
    raise ValueError(f"unknown runtime {name!r} (available: local)")
