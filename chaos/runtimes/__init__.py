"""Runtimes: where nodes live. One module per backend; each implements :class:`chaos.runtimes.base.Runtime`."""

from __future__ import annotations

from chaos.runtimes.base import Runtime
from chaos.scenario import Scenario

RUNTIMES = ("local", "netns", "docker")


def create_runtime(scenario: Scenario, run_id: str, run_dir: str) -> Runtime:
    name = scenario.cluster.runtime
    if name == "local":
        from chaos.runtimes.local import LocalRuntime

        return LocalRuntime(run_id, run_dir)
    if name == "netns":
        from chaos.runtimes.netns import NetnsRuntime

        return NetnsRuntime(run_id, run_dir)
    if name == "docker":
        from chaos.runtimes.docker import DockerRuntime

        return DockerRuntime(run_id, run_dir, image=scenario.cluster.docker.image)
    raise ValueError(f"unknown runtime {name!r} (available: {', '.join(RUNTIMES)})")
