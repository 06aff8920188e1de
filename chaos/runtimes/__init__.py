"""Runtimes: where nodes live. One module per backend, each a plug-in (entry point group ``torch_chaos.runtimes``)
implementing :class:`chaos.runtimes.base.Runtime`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chaos.registry import runtime_class

if TYPE_CHECKING:
    from chaos.runtimes.base import Runtime
    from chaos.scenario import Scenario


def create_runtime(scenario: Scenario, run_id: str, run_dir: str) -> Runtime:
    return runtime_class(scenario.cluster.runtime).create(scenario, run_id, run_dir)
