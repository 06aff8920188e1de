"""What a fault-kind plug-in is: its options model, what it needs, and ``inject``/``heal`` through the Runtime.

One class declares everything about its kind, so adding a kind is one module plus an entry point (see
docs/design.md, "Extension points"): the scenario schema takes ``options``, validation checks ``needs`` against the
runtime's capabilities and calls :meth:`FaultKind.check`, ``chaos doctor`` asks :meth:`FaultKind.machine_checks`,
``chaos explore`` asks :meth:`FaultKind.generate`, reports draw it in ``colour``, ``chaos cleanup`` calls
:meth:`FaultKind.cleanup`. Nothing outside the kind's own module names it.

Import-light on purpose: the registry imports this while the scenario model is being built, so nothing here may
import :mod:`chaos.scenario` or :mod:`chaos.plan` at run time.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.registry import FAULTS, launcher_of, register_base
from chaos.spec import FaultSpec

if TYPE_CHECKING:
    from hypothesis.strategies import DrawFn

    from chaos.channel import ChannelServer
    from chaos.machine import Check
    from chaos.plan import Plan
    from chaos.runtimes.base import Runtime
    from chaos.scenario import Explore, Scenario
    from chaos.storage.control import StorageControl


# How a node's processes are laid out, by ``cluster.mode`` and ``procs_per_node`` (chaos.plan.build_plan): what a
# fault kind acts on may be absent from one of them (a worker process to OOM-kill, when the script runs alone).
# A kind says which it can act on (FaultKind.layouts); validation refuses the others with the kind's advice.
LAYOUTS: dict[str, str] = {
    "elastic": "an elastic job (torchrun's agent on every node, its workers under it)",
    "standalone": "a centralized job with procs_per_node > 1 (torchrun --standalone and its workers)",
    "single": "a centralized job with procs_per_node: 1 (the training script runs alone: no launcher, and no "
              "worker process with a LOCAL_RANK)",
}


def launch_layout(cluster: Any) -> str:
    """The layout of a scenario's ``cluster``, as its launcher says: a key of LAYOUTS for the built-in launchers,
    the launcher's own name for others (whose refusals are the launcher's ``refused_faults``)."""
    return launcher_of(cluster).layout(cluster)


def layout_problem(plugin: Any, layout: str) -> str:
    """Why ``plugin``'s kind is refused on ``layout``: which kind, which layout, and what to use instead."""
    able = sorted(name for name in LAYOUTS if name in getattr(plugin, "layouts", LAYOUTS))
    try:
        advice = plugin.layout_advice(layout)
    except Exception:  # a plug-in's bug must not hide the refusal itself
        advice = ""
    return f"{plugin.kind} cannot act on {LAYOUTS.get(layout, layout)}; " + (
        advice or "it acts on " + " and ".join(LAYOUTS[name].split(" (")[0] for name in able))


@dataclass
class FaultContext:
    runtime: Runtime
    spec: Any  # the kind's own options model (a FaultSpec subclass)
    node: str | None  # the resolved target node (None for faults on storage or on groups)
    checkpoint_dir: Path | None
    plan: Plan | None = None
    fault_id: int = 0
    # Facts a fault wants in the history beside its mechanism (e.g. which checkpoint file it damaged).
    details: dict[str, Any] = field(default_factory=dict)
    # What a fault must keep to undo itself (rules, helper processes); never written to the history.
    handles: list[Any] = field(default_factory=list)
    # The storage layer's rules (chaos.storage.control.StorageControl): how storage faults act; None without the
    # FUSE layer (docs/design.md, "The storage layer").
    storage: StorageControl | None = None
    # The engine's history channel (chaos.channel.ChannelServer): orders to a worker's probe go over it (the
    # hang fault's); None when the run has none.
    channel: ChannelServer | None = None
    # Set by the scheduler for the last ``observe``, right before ``heal``: what a fault still holds back (a kill
    # whose kernel line has not been read yet) must be written now.
    closing: bool = False


@dataclass(frozen=True)
class SweepAxis:
    """How ``chaos compare --sweep KIND=V1,V2,...`` (chaos/sweep.py) draws a kind that impairs one node's link, put
    on every node for the whole run: the kind declares it (``FaultKind.sweep_axis``), the sweep never names it."""

    option: str  # the option the swept value sets (a bandwidth's rate)
    examples: str  # values for the usage message, best link first: "1gbit,100mbit,10mbit"
    badness: Callable[[str], float]  # how bad a link a value makes (larger: worse): the order of the curve
    # at most how much longer a step takes on the worse value than on the better one, for planning a point's steps
    slowdown: Callable[[str, str], float]
    unimpaired: Callable[[str], bool]  # a value that is the link as it is: that point runs with no fault at all
    point_field: str  # the field of a sweep point (chaos.sweep.Point) that holds the value as a number
    point_value: Callable[[str], float]  # that number
    x: Callable[[str], float]  # where a value goes on the plot's x axis
    log_x: bool  # a log x axis, the worse links at the low end; else linear, the worse links at the high end
    x_label: str
    how: str  # what every node's link suffers, for the report's sentence


class FaultKind(ABC):
    kind: ClassVar[str]
    options: ClassVar[type[FaultSpec]]
    summary: ClassVar[str] = ""
    # Runtime capabilities the kind needs (chaos.capabilities.CAPABILITIES); validation refuses a runtime that
    # lacks one, naming the runtimes that have it.
    needs: ClassVar[frozenset[str]] = frozenset()
    # False for faults that do not interrupt training by themselves (a damaged checkpoint shows at the next restart):
    # recovery metrics are not computed for them. Recorded in every fault_injected event.
    disruptive: ClassVar[bool] = True
    targets_node: ClassVar[bool] = True
    # True for impairments that stay in place until healed: without a duration they last until teardown.
    lasts_until_healed: ClassVar[bool] = False
    # True when the target node stops responding while the fault is active (the engine shows it as frozen).
    stops_node: ClassVar[bool] = False
    # True when ``target: store`` is accepted: the kind acts on a process tree or a network stack, which the
    # dedicated rendezvous store has too (crash, freeze, isolate); kinds that need workers, a memory cgroup or
    # checkpoints do not. Validation refuses the target for the others (docs/design.md, "Store faults").
    acts_on_store: ClassVar[bool] = False
    # The node layouts (LAYOUTS: elastic, standalone, single) the kind can act on: validation refuses a fault, or
    # explore bounds, of this kind on any other, with :meth:`layout_advice` (a kind that validated and then could
    # only fail at run time, the run spent).
    layouts: ClassVar[frozenset[str]] = frozenset(LAYOUTS)
    # How reports draw it (a matplotlib colour).
    colour: ClassVar[str] = "#7f7f7f"
    # The kind's own bounds for ``chaos explore`` (a Strict model whose every field has a default): the scenario
    # takes them as ``explore.<kind>`` and :meth:`generate` reads them through :meth:`explore_bounds`. None: the
    # kind draws nothing of its own beyond the shared bounds (targets, triggers, durations).
    explore_options: ClassVar[type[Any] | None] = None
    # Whether ``explore.kinds`` holds this kind when a scenario names none (the built-ins: crash).
    explore_default: ClassVar[bool] = False
    # The layouts in which one fault of this kind right after a step is a clean resume from that step's
    # checkpoint: the golden runner's control run draws it to measure the noise of a resume (chaos.golden).
    clean_resume_layouts: ClassVar[frozenset[str]] = frozenset()
    # A network kind that acts by iptables DROP rules alone (no qdisc, no queue process): the only network
    # impairments the Slurm runtime's cluster agent carries out (chaos.cluster.netexec).
    drop_rules_only: ClassVar[bool] = False
    # A kind that impairs one node's link and can be swept over link quality (chaos compare --sweep): its axis.
    sweep_axis: ClassVar[SweepAxis | None] = None

    @abstractmethod
    def inject(self, ctx: FaultContext) -> str:
        """Do the damage; return the mechanism used, as it will appear in the history and the report."""

    def heal(self, ctx: FaultContext) -> dict[str, Any] | None:
        """Undo the damage (at the end of ``duration`` or at teardown); a no-op for faults that cannot be undone.

        May return facts for the ``fault_healed`` event (e.g. whether the previous state came back exactly)."""
        return None

    def observe(self, ctx: FaultContext) -> list[dict[str, Any]]:
        """What the fault saw happen since the last call while it acts (e.g. the kernel's OOM kills): each dict is
        one history event, ``{"event": Ev..., **fields}``. Asked right after ``inject``, every engine tick while
        the fault is active, and once more just before ``heal``; cheap, and never blocking."""
        return []

    @classmethod
    def heal_after(cls, spec: Any) -> float | None:
        """Seconds after the injection when the engine heals the fault; None: not before teardown (or never, unless
        :attr:`lasts_until_healed`). ``duration`` for most kinds; a kind whose end is not a duration (host_loss's
        ``return_after``) says so here."""
        return spec.duration

    @classmethod
    def check(cls, spec: Any, scenario: Scenario) -> list[str]:
        """Problems of this fault in this scenario beyond its own fields (e.g. a group naming a missing node).

        Each message starts with the field it is about, relative to the fault (``groups: node 7 ...``)."""
        return []

    @classmethod
    def layout_advice(cls, layout: str) -> str:
        """What to use instead on a layout (a key of LAYOUTS) this kind cannot act on, for the refusal's text."""
        return ""

    @classmethod
    def machine_checks(cls) -> list[Check]:
        """What this machine must have for the kind to work (``chaos doctor``; a failing one stops a run)."""
        return []

    @classmethod
    def generate(cls, draw: DrawFn, bounds: Explore) -> dict[str, Any] | None:
        """The kind's own options for a plan ``chaos explore`` generates, or None if it cannot be generated."""
        return None

    @classmethod
    def explore_bounds(cls, bounds: Explore) -> Any:
        """This kind's section of the explore bounds (``explore.<kind>``), its defaults when the scenario has none."""
        if cls.explore_options is None:
            return None
        return getattr(bounds, cls.kind, None) or cls.explore_options()

    @classmethod
    def check_explore(cls, section: Any, scenario: Scenario) -> list[str]:
        """Problems of this kind's explore bounds in this scenario (e.g. a local rank the cluster does not have),
        each starting with the field it is about; ``section`` is :meth:`explore_bounds`'s answer."""
        return []

    @classmethod
    def can_generate(cls) -> bool:
        """Whether ``chaos explore`` may put this kind in a plan (it overrides :meth:`generate`)."""
        return cls.generate.__func__ is not FaultKind.generate.__func__  # type: ignore[attr-defined]

    @classmethod
    def describe(cls, spec: Any) -> str:
        """A short text of the kind's own options for plan summaries (``freeze on 1 at step 5 for 2s``)."""
        extra = ", ".join(f"{k}={v}" for k, v in spec.options().items())
        if spec.duration is not None:
            extra = f"for {spec.duration:g}s" + (f", {extra}" if extra else "")
        return extra

    @classmethod
    def cleanup(cls, run_id: str | None, only_orphans: bool) -> list[str]:
        """Remove what an interrupted injection of this kind may have left outside a runtime's own objects."""
        return []


def draw_duration(draw: DrawFn, bounds: Explore, until_end: bool = False) -> float | None:
    """A duration from ``bounds.durations`` in tenths of a second (or None, lasting until the run ends, when the
    kind's bounds allow it): what every kind that lasts a while draws."""
    from hypothesis import strategies as st

    low, high = bounds.durations
    inside = tenths(low, high)
    drawn = st.integers(*inside).map(lambda d: d / 10) if inside else st.just(float(low))
    return draw((st.none() | drawn) if until_end else drawn)


def tenths(low: float, high: float) -> tuple[int, int] | None:
    """The tenths inside [low, high] as integer bounds (``(20, 80)`` for 2..8), None when it holds none."""
    first, last = math.ceil(round(low * 10, 6)), math.floor(round(high * 10, 6))
    return (first, last) if first <= last else None


def local_rank_problems(field_name: str, ranks: list[int | None], scenario: Scenario) -> list[str]:
    """A fault's ``local_rank`` or explore bounds' ``local_ranks`` naming a worker the cluster does not have
    (``local_ranks: 3 does not exist ...``); None (every worker of the node) is always there. Said at validation:
    at run time the fault would fail with the run already spent."""
    procs = scenario.cluster.procs_per_node
    return [f"{field_name}: {r} does not exist (cluster.procs_per_node is {procs})" for r in ranks
            if r is not None and r >= procs]


def _check_kind(name: str, cls: type[FaultKind]) -> str | None:
    """A kind's entry point and options model agree on its name (the scenario's ``kind`` selects the model)."""
    if getattr(cls, "kind", None) != name:
        return f"its kind is {getattr(cls, 'kind', None)!r}, the entry point names it {name!r}"
    options = getattr(cls, "options", None)
    if not (isinstance(options, type) and issubclass(options, FaultSpec)):
        return "its `options` is not a chaos.plugin.FaultSpec subclass"
    if options.model_fields["kind"].annotation is str:
        return f"its options model must declare kind: Literal[{name!r}]"
    return None


register_base(FAULTS, FaultKind, _check_kind)
