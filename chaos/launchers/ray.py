"""Ray Train as a launcher: placeholder, replaced by the Ray launcher's own module (issue 33)."""

from __future__ import annotations

from chaos.launchers.base import Launch, LaunchContext, Launcher
from chaos.plan import PlanError


class Ray(Launcher):
    name = "ray"
    summary = "Ray Train on a Ray cluster started by the engine (not built yet)"
    mode = "ray"
    orchestrator = "Ray Train (FailureConfig.max_failures)"

    @classmethod
    def scenario_problems(cls, scenario: object) -> list[str]:
        return ["cluster.launcher: ray is not built yet in this version"]

    def node_plans(self, ctx: LaunchContext) -> Launch:
        raise PlanError("cluster.launcher: ray is not built yet in this version")
