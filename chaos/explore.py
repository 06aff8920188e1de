"""``chaos explore``: hypothesis generates fault plans within the scenario's bounds, runs each for real, and
shrinks a failing plan to a minimal one, written as a standalone reproducer scenario.

Jepsen's generator, with hypothesis doing the search and the shrinking. Each example is a real cluster run, so
identical plans are run once (memoised) and shrinking is capped (``shrink_budget`` runs): an exploration always
ends. Deterministic under a seed; hypothesis's example database lives in the exploration directory.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import NoSuchExample

from chaos.engine import Engine
from chaos.registry import fault_plugins
from chaos.scenario import EventTrigger, Explore, Scenario, explore_targets


def fault_strategy(bounds: Explore, nodes: int) -> st.SearchStrategy[list[Any]]:
    """Plans of 1..max_faults faults; each kind's own options come from its plug-in's ``generate``.

    Targets are those of ``bounds.targets`` the kind can take (``explore_targets``: the store and rendezvous
    servers only for the kinds that act on them, event_node only for event-triggered faults); scenario validation
    refuses bounds that leave a kind none."""
    plugins = fault_plugins()

    @st.composite
    def one(draw: st.DrawFn) -> Any:
        kind = draw(st.sampled_from(bounds.kinds))
        plugin = plugins[kind]
        targets = {trigger: explore_targets(plugin, bounds, nodes, trigger)
                   for trigger in ["at_step"] + (["on"] if bounds.events else [])}
        triggers = [t for t, choices in targets.items() if choices or plugin.options.TARGET != "node"]
        trigger = draw(st.sampled_from(triggers or ["at_step"]))
        spec: dict[str, Any] = {"kind": kind}
        if trigger == "at_step":
            spec["at_step"] = draw(st.integers(*bounds.step_window))
        else:
            spec["on"] = EventTrigger(event=draw(st.sampled_from(bounds.events)),
                                      occurrence=draw(st.integers(*bounds.occurrences)))
        if plugin.options.TARGET == "node":
            spec["target"] = draw(st.sampled_from(targets[trigger] or [0]))
        spec.update(plugin.generate(draw, bounds) or {})
        return plugin.options(**spec)

    return st.lists(one(), min_size=1, max_size=bounds.max_faults)


def plan_text(faults: list[Any]) -> str:
    return "; ".join(_describe(f) for f in faults)


def _describe(f: Any) -> str:
    when = f"at step {f.at_step}" if f.at_step is not None else (
        f"on {f.on.event} #{f.on.occurrence}" if f.on else f"at {f.at}s")
    options = fault_plugins()[f.kind].describe(f)
    target = f" on {f.target}" if f.target is not None else ""
    return f"{f.kind}{target} {when}" + (f" ({options})" if options else "")


@dataclass
class Exploration:
    scenario: Scenario
    out_dir: Path
    budget: int
    seed: int
    shrink_budget: int
    on_progress: Callable[[Exploration, str], None] | None = None
    tried: list[dict[str, Any]] = field(default_factory=list)
    cache: dict[str, bool] = field(default_factory=dict)
    phase: str = "generate"

    @property
    def failures(self) -> int:
        return sum(1 for t in self.tried if t["failed"])

    def _run_plan(self, faults: list[Any]) -> bool:
        """True when the plan breaks the scenario (any verdict but pass, or any failed checkpoint verdict)."""

        key = json.dumps([f.model_dump(mode="json", exclude_none=True) for f in faults], sort_keys=True)
        if key in self.cache:
            return self.cache[key]
        if len(self.tried) >= self.budget + self.shrink_budget:
            return False  # out of runs: stop shrinking here rather than run forever
        if self.failures and self.phase == "generate":
            self.phase = "shrink"
        # A generated fault may legitimately not happen (its node already dead, its step past the job's end):
        # optional, so such a plan is not mistaken for a failure. The reproducer keeps them required.
        tried = [f.model_copy(update={"optional": True}) for f in faults]
        scenario = self.scenario.model_copy(deep=True, update={
            "name": f"{self.scenario.name}-plan{len(self.tried) + 1}", "faults": tried, "explore": None})
        t0 = time.monotonic()
        result = Engine(scenario, out_dir=self.out_dir / "runs").run()
        failed = result["verdict"] != "pass"
        self.cache[key] = failed
        self.tried.append({"plan": plan_text(faults), "faults": json.loads(key), "verdict": result["verdict"],
                           "why": result["why"], "failed": failed, "run_dir": str(result.run_dir),
                           "seconds": round(time.monotonic() - t0, 1)})
        if self.on_progress:
            self.on_progress(self, f"plan {len(self.tried)}: {plan_text(faults)} -> {result['verdict']}")
        return failed

    def _drop_faults(self, plan: list[Any]) -> list[Any]:
        """Finish the shrinking deterministically: drop one fault at a time while the plan still fails.

        hypothesis stops shrinking after a few minutes of wall time, which is only a handful of real runs; this
        pass gets its own small allowance so that a redundant fault never survives into the reproducer.
        """
        self.shrink_budget += 2 * len(plan)
        self.phase = "minimise"
        changed = True
        while changed and len(plan) > 1:
            changed = False
            for i in range(len(plan)):
                candidate = plan[:i] + plan[i + 1:]
                if self._run_plan(candidate):
                    plan, changed = candidate, True
                    break
        return plan

    def run(self) -> dict[str, Any]:
        assert self.scenario.explore is not None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        strategy = fault_strategy(self.scenario.explore, self.scenario.cluster.nodes)
        config = settings(max_examples=self.budget, deadline=None, database=DirectoryBasedExampleDatabase(
            str(self.out_dir / "hypothesis-db")), phases=[Phase.reuse, Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck), derandomize=False)
        minimal: list[Any] | None = None
        try:
            minimal = find(strategy, self._run_plan, settings=config, random=random.Random(self.seed),
                           database_key=self.scenario.name.encode())
        except NoSuchExample:
            minimal = None
        if minimal is not None:
            minimal = self._drop_faults(minimal)
        summary: dict[str, Any] = {
            "scenario": self.scenario.name, "seed": self.seed, "budget": self.budget,
            "shrink_budget": self.shrink_budget, "plans_tried": len(self.tried), "failures": self.failures,
            "found": minimal is not None, "tried": self.tried,
        }
        if minimal is not None:
            path = self.out_dir / "reproducer.yaml"
            path.write_text(reproducer_yaml(self.scenario, minimal, self.seed))
            summary.update(minimal_plan=plan_text(minimal), reproducer=str(path),
                           minimal_faults=[f.model_dump(mode="json", exclude_none=True) for f in minimal])
        (self.out_dir / "explore.json").write_text(json.dumps(summary, indent=2))
        return summary


def reproducer_yaml(scenario: Scenario, faults: list[Any], seed: int) -> str:
    repro = scenario.model_copy(deep=True, update={
        "name": f"{scenario.name}-reproducer", "faults": faults, "explore": None,
        "description": f"Minimal failing fault plan found by `chaos explore` (seed {seed}): {plan_text(faults)}.\n"
                       f"Replay with `chaos run` on this file.\n\nOriginal scenario:\n{scenario.description}"})
    return yaml.safe_dump(repro.model_dump(mode="json", exclude_none=True), sort_keys=False)


def explore(scenario: Scenario, out_dir: str | Path = "runs", budget: int = 10, seed: int = 0,
            shrink_budget: int | None = None,
            on_progress: Callable[[Exploration, str], None] | None = None) -> dict[str, Any]:
    if scenario.explore is None:
        raise ValueError("the scenario has no 'explore' section: add the bounds plans are drawn from "
                         "(kinds, targets, max_faults, step_window, events ...)")
    directory = Path(out_dir) / f"explore-{time.strftime('%Y%m%d-%H%M%S')}-{scenario.name}-{uuid.uuid4().hex[:6]}"
    return Exploration(scenario, directory, budget, seed, shrink_budget if shrink_budget is not None else 2 * budget,
                       on_progress).run()
