"""The scenario a command is given, admitted: what ``validate``, ``run``, ``explore`` and ``compare`` share."""

from __future__ import annotations

from chaos.admission import admit
from chaos.loading import resolve_scenario_path
from chaos.scenario import Scenario


def load(path: str, runtime: str | None = None, machine: bool = True) -> Scenario:
    """The one judgement validate and run share (chaos.admission): schema, plan, program, machine."""
    return admit(resolve_scenario_path(path), runtime=runtime, machine=machine)
