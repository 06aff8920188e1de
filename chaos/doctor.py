"""What this machine can run, and the exact command that fixes each missing piece.

Every plug-in declares its own checks (``machine_checks`` on fault kinds, runtimes and rendezvous backends);
``chaos doctor`` prints their union plus any plug-in that failed to load, and :func:`unmet` gives the failing
subset a scenario needs, so a run that cannot work stops at validation with the same advice instead of failing
halfway through.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from chaos.capabilities import NODE_NETWORK
from chaos.cluster.slurm import machine_checks as cluster_checks
from chaos.machine import Check, merge
from chaos.plan import PlanError
from chaos.registry import (
    fault_plugins,
    launcher_of,
    launcher_plugins,
    load_errors,
    raised_by,
    rendezvous_plugins,
    runtime_plugins,
)
from chaos.scenario import Scenario
from chaos.storage.layer import machine_checks as storage_checks
from chaos.storage.layer import needs_fuse, passthrough_checks

__all__ = ["Check", "MachineUnfit", "advice", "machine_checks", "require", "unmet"]


class MachineUnfit(PlanError):
    """The scenario is valid but needs something this machine lacks (exit code 2, with the fix)."""


def _declared(plugin: Any, *args: Any, hook: str = "machine_checks") -> list[Check]:
    """A plug-in's checks (``machine_checks``, or the one ``capability_check``); a hook that raises is one failing
    check naming the plug-in."""
    try:
        found = getattr(plugin, hook)(*args)
    except Exception as exc:  # a third-party bug must not hide every other check
        return [Check(f"plug-in {getattr(plugin, 'kind', None) or plugin.name}", False, raised_by(plugin, hook, exc),
                      "fix or uninstall the package that registers it")]
    return [found] if isinstance(found, Check) else list(found)


def machine_checks() -> list[Check]:
    """Every check any installed plug-in declares, and one failing check per plug-in that did not load."""
    checks: list[Check] = []
    for runtime in runtime_plugins().values():
        checks += _declared(runtime)
    for kind in fault_plugins().values():
        checks += _declared(kind)
    for backend in rendezvous_plugins().values():
        checks += _declared(backend)
    for launcher in launcher_plugins().values():
        checks += _declared(launcher)
    checks += storage_checks()
    checks += passthrough_checks()  # optional: storage.passthrough, which no run needs unless it asks
    checks += cluster_checks()  # optional: `chaos cluster up slurm`, which no run needs
    checks += [Check(f"plug-in {e.name}", False, f"{e.group}: {e.target} failed to load: {e.error}",
                     "fix or uninstall the package that registers it") for e in load_errors()]
    return merge(checks)


def unmet(scenario: Scenario) -> list[Check]:
    """The required checks this scenario's runtime, fault kinds and rendezvous backend fail on this machine."""
    c = scenario.cluster
    runtime = runtime_plugins()[c.runtime]
    checks = _declared(runtime, getattr(c, c.runtime, None))
    for kind in sorted({f.kind for f in scenario.faults}):
        impl = fault_plugins()[kind]
        if NODE_NETWORK in impl.needs and not runtime.net_tools_on_engine:
            continue  # the runtime edits the nodes' networks elsewhere (its capability_check says whether it can)
        checks += _declared(impl)
    options = getattr(c, c.runtime, None)
    for need in sorted({n for f in scenario.faults for n in fault_plugins()[f.kind].needs}
                       & runtime.conditional_capabilities):
        checks += _declared(runtime, need, options, hook="capability_check")
    if launcher_of(c).rendezvous:
        checks += _declared(rendezvous_plugins()[c.rendezvous.backend])
    checks += _declared(launcher_of(c))
    if needs_fuse(scenario) and runtime.fuse_on_engine_host:  # else the runtime checks FUSE on the nodes' hosts
        checks += [replace(ch, required=True) for ch in storage_checks()]
        if scenario.storage.passthrough:  # asked for: a machine without it stops the run (never a silent fallback)
            checks += [replace(ch, required=True) for ch in passthrough_checks()]
    return [ch for ch in merge(checks) if ch.required and not ch.ok]


def advice(problems: list[Check]) -> str:
    lines = ["this machine cannot run it yet (`chaos doctor` shows every check):"]
    lines += [f"  - {p.name}: {p.detail}; fix: {p.fix}" for p in problems]
    return "\n".join(lines)


def require(scenario: Scenario) -> None:
    problems = unmet(scenario)
    if problems:
        raise MachineUnfit(advice(problems))
