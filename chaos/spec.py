"""The building blocks of the scenario schema that plug-ins extend: durations, triggers and the fault base model.

Kept apart from :mod:`chaos.scenario` on purpose: the scenario model is generated from the plug-in registry (its
``faults`` list is a discriminated union of every registered fault kind's options model), so the pieces a plug-in
subclasses must be importable before the registry is read. Nothing here imports the registry at import time.
See docs/design.md, "Extension points".
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

from chaos.events import WRITE_PROGRESS_EVERY_BYTES, WRITE_PROGRESS_FIRST_BYTES, TriggerEvent
from chaos.registry import fault_plugins

# Validation context key: the scenario being read is a run directory's stored copy (chaos.loading.parse_scenario).
# That copy is read for the run's analysis, not judged again: rules added since it was written (a bound, a
# cross-field check) must not make an old run unreadable, so they skip it (``stored``).
STORED_RUN = "stored_run"


def stored(info: ValidationInfo | None) -> bool:
    """Whether this validation reads a run directory's stored scenario (see STORED_RUN)."""
    return bool(info is not None and info.context and info.context.get(STORED_RUN))

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> Any:
    """Accept ``10``, ``2.5``, ``"10s"``, ``"500ms"``, ``"2m"``, ``"10000h"``, ``"2d"``; anything else is left for
    pydantic to reject (or, from the CLI, is a ValueError whose message shows the accepted forms)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNIT_S[m.group(2)]
        raise ValueError(f"expected a duration such as 10s, 500ms or 2m, got {value!r}")
    return value


# The longest time any field may hold: ten years. Beyond it a number is a typo or a probe, not a plan (1e300 s
# validated, and a storage rule then held every operation past the run's heal); inf and nan are refused by
# allow_inf_nan. A fault's own times are bounded by the run's deadline besides (Scenario._check, time_fields).
MAX_SECONDS = 10 * 366 * 86400.0


class _Time:
    """The mark of a length of time in a field's type (``Seconds``, ``PositiveSeconds``): :func:`time_fields`
    finds a fault kind's times by it, whatever the plug-in calls them."""


TIME = _Time()


def _at_most_max(value: float, info: ValidationInfo) -> float:
    # skipped for a run directory's stored copy, as every bound added later (STORED_RUN)
    if value > MAX_SECONDS and not stored(info):
        raise ValueError(f"at most {MAX_SECONDS:.0f}s (ten years), got {value:g}s")
    return value


# The bound goes before the validator so the JSON Schema states it as `minimum` (after it, pydantic copies `ge` into
# the schema verbatim, which no editor reads), and the schema admits what the validator does: 10, "10s", "500ms".
_DURATION_SCHEMA = {"type": "string", "pattern": _DURATION.pattern}
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False), BeforeValidator(parse_duration),
                    AfterValidator(_at_most_max), TIME,
                    WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0, "maximum": MAX_SECONDS},
                                              _DURATION_SCHEMA]})]
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False), BeforeValidator(parse_duration),
                            AfterValidator(_at_most_max), TIME,
                            WithJsonSchema({"anyOf": [{"type": "number", "exclusiveMinimum": 0,
                                                       "maximum": MAX_SECONDS}, _DURATION_SCHEMA]})]


def _marked(tp: Any) -> bool:
    return any(m is TIME for m in getattr(tp, "__metadata__", ())) or any(_marked(a) for a in get_args(tp))


def time_fields(model: type[BaseModel]) -> list[str]:
    """The fields of ``model`` that hold a length of time (typed ``Seconds`` or ``PositiveSeconds``, alone, optional
    or in a tuple): the ones a scenario bounds by its deadline."""
    return [name for name, f in model.model_fields.items()
            if any(m is TIME for m in f.metadata) or _marked(f.annotation)]


class Strict(BaseModel):
    """Every scenario section: unknown fields are errors (a misspelt key must never be silently ignored).

    ``defer_build``: a section's validator is made when it is first used, not when its class is defined. The
    scenario model holds every plug-in's sections (each fault kind's options, each runtime's and launcher's), and
    builds their schemas into its own; built once more each at import they cost every command ~0.1 s of its
    start-up (issue 36), though a run validates one scenario and most sections are never used alone."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


# When each trigger event fires: in the schema and `chaos validate`'s field reference (docs/scenario-fields.md), so a
# trigger that cannot fire for a job (small checkpoints, no storage layer) is seen before a run, not after it.
TRIGGER_DESCRIPTION = (
    "the job's event to fire on. checkpoint_save_started: a save's first write to a file in the checkpoint "
    "directory (the storage layer; the inotify watcher: the file's creation; a probe job: its "
    "chaos.probe.checkpoint_save_started call), held until the fault lands. checkpoint_write_progress: a save's "
    f"written bytes first pass {WRITE_PROGRESS_FIRST_BYTES >> 20} MiB, then every {WRITE_PROGRESS_EVERY_BYTES >> 20} "
    "MiB (the storage layer only; a smaller checkpoint never emits it; a probe job: its own call). "
    "checkpoint_save_finished: a save's file closed after writing, or renamed into place (not held). "
    "checkpoint_loaded: a checkpoint file's first read by a process (the storage layer; a probe job: its call), "
    "held. process_started: a worker process started (the probe; a print-only job: a new round of workers seen "
    "in its output)")


class EventTrigger(Strict):
    event: TriggerEvent = Field(description=TRIGGER_DESCRIPTION)
    occurrence: int = Field(1, ge=1, description="fire on the N-th such event, counted over the whole run (a "
                            "restart's saves and loads count too)")


NodeIndex = Annotated[int, Field(ge=0)]
# ``store``: the dedicated rendezvous store process (``rendezvous.store: dedicated``), for the kinds that say they
# can act on it (FaultKind.acts_on_store); ``rendezvous_host`` is the store wherever it lives (node 0 or dedicated).
# ``etcd0``, ``etcd1``, ...: a server a rendezvous backend runs (chaos/rendezvous/etcd.py), for the same kinds.
SERVER_PREFIXES = ("etcd",)
ServerName = Annotated[str, Field(pattern=r"^etcd[0-9]$")]
_TARGET_WORDS = ("rendezvous_host", "random", "event_node", "store")


def _target_value(value: Any) -> Any:
    """One message for a target that is none of the union's members, instead of one per member with pydantic's
    internal member names (``target.constrained-int: ...``, ``target.literal[...]: ...``)."""
    if isinstance(value, bool) or not (
            (isinstance(value, int) and value >= 0) or (isinstance(value, str) and (
                value in _TARGET_WORDS or re.fullmatch(r"etcd[0-9]", value)))):
        raise ValueError(f"expected a node index (0, 1, ...), {', '.join(_TARGET_WORDS)} or a rendezvous server "
                         f"(etcd0 ... etcd9), got {value!r}")
    return value


NodeTarget = Annotated[NodeIndex | Literal["rendezvous_host", "random", "event_node", "store"] | ServerName,
                       BeforeValidator(_target_value)]


def _drop_properties(*names: str) -> Any:
    def edit(schema: dict[str, Any]) -> None:
        for name in names:
            schema.get("properties", {}).pop(name, None)
    return edit


class FaultSpec(Strict):
    """The fields every fault kind shares: when it fires, whom it hits, how long it lasts.

    A fault kind's plug-in subclasses this with ``kind: Literal["its-name"]`` and its own fields, and says with two
    class variables which of the shared fields apply to it. ``target``, ``seed`` and ``duration`` stay on every
    spec (``None`` where they do not apply) so the engine reads them without knowing the kind; the kind's JSON
    Schema leaves out the ones it does not take, and validation refuses them with a message that says so.
    """

    # "node": the fault hits one node (target required); "none": it acts elsewhere (storage, groups of nodes).
    TARGET: ClassVar[Literal["node", "none"]] = "node"
    # Whether ``duration`` is required, optional (lasts until healed at teardown when absent) or not taken.
    DURATION: ClassVar[Literal["required", "optional", "none"]] = "none"
    # Examples shown when a required field is missing: {"rate": "rate: 10mbit"}.
    EXAMPLES: ClassVar[dict[str, str]] = {}

    kind: str
    target: NodeTarget | None = Field(
        None, description="a node index, rendezvous_host (node 0 or the dedicated store), store (the dedicated "
        "store process; crash, freeze, isolate), etcd0.. (a member of an etcd rendezvous), random (with seed), or "
        "event_node (the node that emitted the "
        "triggering event)")
    seed: int | None = Field(None, description="seed for target: random")
    at: Seconds | None = Field(None, description="seconds after the first training step")
    at_step: int | None = Field(None, ge=1, description="right after the job first completes this global step "
                                "(instrumented jobs are held there until the fault has landed)")
    on: EventTrigger | None = Field(None, description="on a workload event")
    duration: Seconds | None = Field(None, description="how long the fault lasts")
    optional: bool = Field(False, description="the run may pass without this fault happening (a planned fault is "
                           "otherwise a promise: one that was never injected makes the verdict `error`)")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """EXAMPLES is the example for a *required* field: on an optional one it would make the field required
        behind the schema's back. Said when the plug-in is imported, which the registry reports as its load error."""
        super().__pydantic_init_subclass__(**kwargs)
        optional = [n for n in cls.EXAMPLES if n not in cls.model_fields or not cls.model_fields[n].is_required()]
        if optional:
            raise TypeError(f"{cls.__name__}.EXAMPLES names {', '.join(optional)}, which is not a required field: "
                            "EXAMPLES shows what a missing required field looks like; give the field no default, "
                            "or leave it out of EXAMPLES")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hidden = [n for n, off in (("target", cls.TARGET == "none"), ("seed", cls.TARGET == "none"),
                                   ("duration", cls.DURATION == "none")) if off]
        if hidden:
            cls.model_config = {**cls.model_config, "json_schema_extra": _drop_properties(*hidden)}

    @model_validator(mode="before")
    @classmethod
    def _fields_of_this_kind(cls, data: Any, info: ValidationInfo) -> Any:
        """Say *why* a field is refused (it belongs to another kind, or this kind does not take it) and what a
        missing one looks like, every such problem of the fault at once."""
        if not isinstance(data, dict) or cls is FaultSpec:
            return data
        kind = data.get("kind", "this fault")
        if stored(info):
            # Another kind's field at that kind's default says nothing in a run directory written before fault
            # kinds had models of their own (`one_way: false` on every fault): dropped there, so old runs still
            # report. In a scenario a user wrote it is refused like any field the kind does not take.
            data = {k: v for k, v in data.items() if k in cls.model_fields or not _is_foreign_default(k, v)}
        problems, unknown = [], []
        for name in data:
            if name in cls.model_fields and not (
                    (name in ("target", "seed") and cls.TARGET == "none") or (name == "duration"
                                                                             and cls.DURATION == "none")):
                continue
            owners = _owners_of(name)
            if name == "duration":
                problems.append(f"{kind} takes no duration")
            elif name == "target":
                problems.append(f"{kind} takes no target ({cls.target_hint()})")
            elif owners:
                problems.append(f"{name} applies to kind: {' or '.join(owners)} only")
            else:
                unknown.append(str(name))
        missing = [f"{kind} needs {name}, e.g. {example}" for name, example in cls.EXAMPLES.items()
                   if data.get(name) is None]
        if cls.DURATION == "required" and data.get("duration") is None:
            missing.append(f"{kind} needs a duration, e.g. duration: 5s")
        if cls.TARGET == "node" and data.get("target") is None:
            missing.append(f"{kind} needs a target: a node index, rendezvous_host, store, etcdN, random or "
                           "event_node")
        problems += missing
        if problems:
            if unknown:  # else a misspelt field hides behind "needs": say both
                problems.append(f"{kind} has no field {', '.join(map(repr, unknown))}")
            problems += cls._value_problems(data)  # else a wrong value waits for the next round to be told
            raise ValueError("; ".join(problems))
        return data

    @classmethod
    def _value_problems(cls, data: dict[str, Any]) -> list[str]:
        """The kind's present fields whose values are wrong on their own (``at_step: x``), for the message that
        refuses the fault for kind-level reasons: raising that message stops pydantic before it checks them."""
        from typing import Annotated

        from pydantic import TypeAdapter, ValidationError

        said = []
        for name, value in data.items():
            info = cls.model_fields.get(name)
            if info is None or name == "kind" or value is None:  # None: absent, said as "needs" if required
                continue
            hint = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
            try:
                TypeAdapter(hint).validate_python(value)
            except ValidationError as exc:
                said.append(f"{name}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}")
            except Exception:  # a plug-in's type this check cannot build: pydantic says it in the next round
                continue
        return said

    @classmethod
    def target_hint(cls) -> str:
        """Why this kind takes no target (shown in the error); plug-ins override it."""
        return "it does not act on one node"

    @model_validator(mode="after")
    def _triggers(self) -> FaultSpec:
        triggers = [n for n in ("at", "at_step", "on") if getattr(self, n) is not None]
        if len(triggers) != 1:
            raise ValueError(f"give exactly one trigger (at, at_step or on), got {triggers or 'none'}")
        if self.target == "event_node" and self.on is None:
            raise ValueError("target: event_node needs an 'on' trigger")
        if self.seed is not None and self.target != "random":
            raise ValueError("seed applies to target: random only")
        return self

    def options(self) -> dict[str, Any]:
        """The kind's own settings (everything but the shared fields), for plans, reports and plan texts."""
        shared = set(FaultSpec.model_fields)
        return {k: v for k, v in self.model_dump(mode="json", exclude_none=True).items() if k not in shared}


def _is_foreign_default(field: str, value: Any) -> bool:
    """Whether ``value`` is the default of ``field`` in every fault kind that has it (and some kind has it)."""
    owners = [p.options.model_fields[field] for p in fault_plugins().values() if field in p.options.model_fields]
    return bool(owners) and all(not f.is_required() and f.get_default(call_default_factory=True) == value
                                for f in owners)


def _owners_of(field: str) -> list[str]:
    """The fault kinds whose options include ``field`` (for "rate applies to kind: bandwidth only")."""
    shared = set(FaultSpec.model_fields)
    if field in shared:
        return []
    return sorted(k for k, p in fault_plugins().items() if field in p.options.model_fields)
