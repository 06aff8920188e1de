"""result.json as typed objects: the one loader every reader of a run's result goes through.

result.json is the public contract CI users parse, so it stays a plain JSON object (written by
``chaos.analysis.result_json``, the one serializer). Inside torch-chaos, the reports, ``chaos compare``, the
console, the pytest plug-in and the projection read it as these objects: ``fault.recovery_s``, not
``fault["recovery_s"]``, so that a renamed or retyped figure is one change here, not a string in sixteen files.

The loader is versioned: it reads every schema up to :data:`RESULT_SCHEMA_VERSION` (a field an older schema did
not have is None, or empty), and refuses a newer one with a clear error instead of misreading it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from chaos.analysis.verdict import Verdict

# Changes whenever a field's meaning does (4: each fault says whether it is ``disruptive``, as its kind declared
# it; 7: each disruptive fault's ``recovery_breakdown``; 8: ``resources``, the cores each node was pinned to, a
# hang's ``hang`` outcome; 9: a lasting fault's ``node_replaced``, whether it was put on its node's replacement;
# 12: not checked where the evidence is empty, ``equal_as_printed``, ``goodput_why``; 13: ``one_writer_per_file``;
# 14: ``next_resume_intact`` and ``replay_consistent``, a fault's ``oom_kills[].after_injection_note``). A
# federated run's ``federated`` section is additive (absent for every other job), so it did not change it.
RESULT_SCHEMA_VERSION = 14

# The per-fault figures (chaos.analysis.metrics.FaultMetrics computes them; ``expect`` bounds gate four of them).
FAULT_FIGURES = ("recovery_s", "catch_up_s", "lost_steps", "lost_work_s", "slowdown", "effect_latency_s")


class ResultUnreadable(ValueError):
    """A result.json this version of torch-chaos cannot read (another shape, or a newer schema)."""


@dataclass(frozen=True)
class FaultResult:
    """One fault of result.json: what happened to it and what it cost (None: not measured, or it did not happen)."""

    id: int
    kind: str
    target: str | None
    injected: bool = True
    disruptive: bool = True
    mechanism: str | None = None
    t_injected: float | None = None
    t_healed: float | None = None
    t_injected_rel_s: float | None = None  # seconds after the run started
    highest_step_before: int | None = None
    restarted: bool = False
    resumed_from: int | None = None
    resume_evidence: str | None = None
    recovery_s: float | None = None
    catch_up_s: float | None = None
    lost_steps: int | None = None
    lost_work_s: float | None = None
    slowdown: float | None = None
    effect_latency_s: float | None = None
    note: str | None = None
    # a fault that did not happen: what became of it (skipped, failed, not_reached, no_effect) and why
    outcome: str | None = None
    why_not_injected: str | None = None
    optional: bool = False
    # result.json's other per-fault records, as written: recovery_breakdown, step_timing, oom_kills, node_replaced,
    # hang, trigger (each present only where it applies)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def counts_for_recovery(self) -> bool:
        """A fault that happened and interrupts training: the only kind with recovery figures."""
        return self.disruptive and self.injected

    def figure(self, name: str) -> float | int | None:
        """One of :data:`FAULT_FIGURES` by name (an ``expect`` bound names the figure it gates)."""
        if name not in FAULT_FIGURES:
            raise KeyError(f"{name!r} is not a per-fault figure ({', '.join(FAULT_FIGURES)})")
        value: float | int | None = getattr(self, name)
        return value

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultResult:
        own = {f.name for f in fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in data.items() if k in own and v is not None}
        return cls(**{"kind": "", "target": None, **kwargs},
                   extra={k: v for k, v in data.items() if k not in own})


@dataclass(frozen=True)
class Expectation:
    """One ``expect`` bound (or an implicit one: the run completes, a checkpoint verdict did not fail) and whether
    it held."""

    name: str
    limit: Any  # a {max, min} bound, a bool, or a matches_golden mode
    value: Any  # what was measured (None: not measured)
    ok: bool
    implicit: bool = False
    why: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Expectation:
        return cls(name=str(data["name"]), limit=data.get("limit"), value=data.get("value"),
                   ok=bool(data.get("ok")), implicit=bool(data.get("implicit")), why=data.get("why"))


@dataclass(frozen=True)
class ResultModel:
    """A run's result.json, typed (see the module's docstring)."""

    schema_version: int
    scenario: str
    run_id: str
    verdict: str  # pass, fail, hung, restart_loop, error
    why: str
    end_reason: str
    duration_s: float | None = None
    expectations: tuple[Expectation, ...] = ()
    faults: tuple[FaultResult, ...] = ()
    goodput: float | None = None
    goodput_why: str | None = None  # why goodput is not reported although steps were measured
    median_step_s: float | None = None
    median_step_basis: str | None = None
    training_time_s: float | None = None
    steps_completed: int | None = None
    step_executions: int | None = None
    restarts: int | None = None
    restarts_after_completion: int | None = None
    node_replacements: int | None = None
    checkpoint: Mapping[str, Verdict] = field(default_factory=dict)
    golden_run: str | None = None
    control_run: str | None = None
    environment: Mapping[str, Any] = field(default_factory=dict)
    resources: Mapping[str, Any] | None = None  # schema 8 on
    channel: Mapping[str, Any] | None = None
    history: Mapping[str, Any] | None = None  # what the figures rest on (added by the analysis, not the engine)
    federated: Mapping[str, Any] | None = None  # a federated run's rounds (chaos.analysis.federated)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def disruptive_faults(self) -> list[FaultResult]:
        """The faults that happened and interrupt training, in order (the ones with recovery figures)."""
        return [f for f in self.faults if f.counts_for_recovery]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultModel:
        """The loader: result.json's content (any schema up to RESULT_SCHEMA_VERSION) as objects."""
        if not isinstance(data, Mapping) or not isinstance(data.get("verdict"), str):
            raise ResultUnreadable("not a torch-chaos result.json (no verdict)")
        version = data.get("schema_version", 1)
        if not isinstance(version, int) or version > RESULT_SCHEMA_VERSION:
            raise ResultUnreadable(f"result.json schema {version!r} is newer than this torch-chaos reads "
                                   f"({RESULT_SCHEMA_VERSION}): upgrade torch-chaos to read it")
        try:
            return cls(
                schema_version=version, scenario=str(data.get("scenario", "")), run_id=str(data.get("run_id", "")),
                verdict=data["verdict"], why=str(data.get("why", "")), end_reason=str(data.get("end_reason", "")),
                duration_s=data.get("duration_s"),
                expectations=tuple(Expectation.from_dict(x) for x in data.get("expectations") or ()),
                faults=tuple(FaultResult.from_dict(f) for f in data.get("faults") or ()),
                goodput=data.get("goodput"), goodput_why=data.get("goodput_why"),
                median_step_s=data.get("median_step_s"), median_step_basis=data.get("median_step_basis"),
                training_time_s=data.get("training_time_s"), steps_completed=data.get("steps_completed"),
                step_executions=data.get("step_executions"), restarts=data.get("restarts"),
                restarts_after_completion=data.get("restarts_after_completion"),
                node_replacements=data.get("node_replacements"),
                checkpoint={name: Verdict.from_dict(v) for name, v in (data.get("checkpoint") or {}).items()},
                golden_run=data.get("golden_run"), control_run=data.get("control_run"),
                environment=data.get("environment") or {}, resources=data.get("resources"),
                channel=data.get("channel"), history=data.get("history"), federated=data.get("federated"))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ResultUnreadable(f"result.json of another shape than torch-chaos writes ({exc!r})") from exc
