"""The content of every report: a run's analysis (computed once, by ``chaos.analysis``) plus the report's options.

Reports present figures; they compute none. Everything here comes from :class:`chaos.analysis.run.RunAnalysis`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.analysis.breakdown import RecoveryBreakdown
from chaos.analysis.projection import Projection
from chaos.analysis.result_model import ResultModel
from chaos.analysis.run import RunAnalysis, analyze_run
from chaos.scenario import Scenario


@dataclass
class Report:
    analysis: RunAnalysis
    advice: dict[str, Any] | None = None  # checkpoint-interval advice for the MTBF the report was asked for
    projection: Projection | None = None  # projection to scale, when the report was asked for one

    @property
    def run_dir(self) -> Path:
        return self.analysis.run_dir

    @property
    def scenario(self) -> Scenario:
        return self.analysis.scenario

    @property
    def result(self) -> ResultModel:
        return self.analysis.model

    @property
    def golden(self) -> dict[str, Any] | None:
        return self.analysis.golden

    @property
    def breakdowns(self) -> list[RecoveryBreakdown]:
        return self.analysis.breakdowns

    def to_json(self) -> dict[str, Any]:
        return {"result": self.analysis.result, "recovery_breakdown": [b.to_dict() for b in self.breakdowns],
                "checkpoint_interval": self.advice,
                "scenario": self.scenario.model_dump(mode="json", exclude_none=True),
                **({"projection": self.projection.to_dict()} if self.projection is not None else {})}


def build_report(run: Path | str | RunAnalysis, mtbf_s: float | None = None,
                 projection: Projection | None = None) -> Report:
    """The report of a run directory, or of an analysis already made (``chaos report`` analyses once)."""
    analysis = run if isinstance(run, RunAnalysis) else analyze_run(run)
    return Report(analysis, analysis.interval_advice(mtbf_s), projection)
