"""The plug-in registry: fault kinds, runtimes, rendezvous backends and launchers, discovered through entry points.

The built-ins register exactly like a third-party package does, in pyproject.toml::

    [project.entry-points."torch_chaos.faults"]
    crash = "chaos.faults.crash:Crash"

so the scenario schema, ``chaos schema``, ``validate``, ``doctor``, ``cleanup``, ``explore`` and the reports cover a
plug-in the moment its package is installed, without an edit in ``chaos/``. A plug-in that fails to load is not
silently dropped: :func:`load_errors` lists it (``chaos doctor`` shows it) and a scenario naming it gets the error.
See docs/design.md, "Extension points".
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.faults.base import FaultKind
    from chaos.launchers.base import Launcher
    from chaos.rendezvous.base import RendezvousBackend
    from chaos.runtimes.base import Runtime

FAULTS = "torch_chaos.faults"
RUNTIMES = "torch_chaos.runtimes"
RENDEZVOUS = "torch_chaos.rendezvous"
LAUNCHERS = "torch_chaos.launchers"
GROUPS = (FAULTS, RUNTIMES, RENDEZVOUS, LAUNCHERS)


class PluginError(RuntimeError):
    """A plug-in is missing or broken; the message says which package and what to do."""


@dataclass(frozen=True)
class LoadError:
    group: str
    name: str
    target: str
    error: str

    def __str__(self) -> str:
        return f"{self.group}: {self.name} = {self.target}: {self.error}"


# Classmethod hooks the engine only calls on an instance (FaultScheduler: the kind's instance): a plain method works.
ON_INSTANCE = frozenset({"heal_after"})


def _not_classmethods(cls: type, base: type) -> str | None:
    """The hooks the base class declares as classmethods that ``cls`` overrides as plain functions: they are called
    on the class (validation, doctor, explore, cleanup run before any instance exists), where a plain function
    fails with a confusing ``missing 1 required positional argument``."""
    wrong = [name for name, attr in vars(base).items() if isinstance(attr, classmethod) and name not in ON_INSTANCE
             and not isinstance(inspect.getattr_static(cls, name), (classmethod, staticmethod))]
    return f"{', '.join(wrong)} must be @classmethod, as in {base.__name__}" if wrong else None


# What a plug-in of each group must be: its base class and the group's own checks, registered by the module that
# defines the base (chaos.faults.base, chaos.runtimes.base, chaos.rendezvous.base). The registry imports none of
# them: they import it, and a plug-in's class has imported its base before the registry looks at it.
_BASES: dict[str, tuple[type, Callable[[str, Any], str | None]]] = {}


def register_base(group: str, base: type, check: Callable[[str, Any], str | None] | None = None) -> None:
    """Declare ``base`` as the class every plug-in of ``group`` subclasses; ``check(name, cls)`` says what else is
    wrong with one (or None)."""
    _BASES[group] = (base, check or (lambda name, obj: None))


def _check(group: str, name: str, obj: Any) -> str | None:
    """What is wrong with a loaded plug-in object, or None (a wrong entry point must not break every scenario)."""
    if group not in _BASES:
        return f"not a chaos.plugin subclass for {group} (it imports none of the plug-in base classes)"
    base, check = _BASES[group]
    if not (isinstance(obj, type) and issubclass(obj, base)):
        return f"not a chaos.plugin.{base.__name__} subclass" + ("" if group == FAULTS else f" named {name!r}")
    return check(name, obj) or _not_classmethods(obj, base)


def raised_by(plugin: Any, hook: str, exc: BaseException) -> str:
    """The words for a plug-in hook that raised: which plug-in, which package registered it, what it raised.

    A plug-in's bug is reported as its own, never as a traceback of the command that called it."""
    module = getattr(plugin, "__module__", "?")
    name = getattr(plugin, "kind", None) or getattr(plugin, "name", None) or getattr(plugin, "__name__", "?")
    return f"the plug-in {name!r} ({module}) raised in {hook}(): {type(exc).__name__}: {exc}"


@functools.cache
def _entry_points() -> importlib.metadata.EntryPoints:
    """Every installed entry point, read once: each ``entry_points(group=...)`` call reads every installed
    distribution's metadata again (~15 ms here with Ray and TensorFlow installed), and a run loads four groups."""
    return importlib.metadata.entry_points()


@functools.cache
def _load(group: str) -> tuple[dict[str, Any], tuple[LoadError, ...]]:
    found: dict[str, Any] = {}
    errors: list[LoadError] = []
    for ep in sorted(_entry_points().select(group=group), key=lambda e: e.name):
        try:
            obj = ep.load()
        except Exception as exc:  # a broken third-party package must not take the built-ins down with it
            errors.append(LoadError(group, ep.name, ep.value, f"{type(exc).__name__}: {exc}"))
            continue
        problem = _check(group, ep.name, obj)
        if problem:
            errors.append(LoadError(group, ep.name, ep.value, problem))
        elif ep.name in found and found[ep.name] is not obj:
            errors.append(LoadError(group, ep.name, ep.value, f"{ep.name!r} is registered twice"))
        else:
            found[ep.name] = obj
    if group != RENDEZVOUS and not found:
        raise PluginError(f"no {group} plug-ins are registered: torch-chaos is not installed as a package "
                          "(its entry points are part of the installed metadata); run `pip install -e .` in the "
                          "repository, or `pip install torch-chaos`")
    return found, tuple(errors)


def fault_plugins() -> dict[str, type[FaultKind]]:
    """Every fault kind, by name (sorted)."""
    return _load(FAULTS)[0]


def runtime_plugins() -> dict[str, type[Runtime]]:
    """Every runtime, by name (sorted)."""
    return _load(RUNTIMES)[0]


def rendezvous_plugins() -> dict[str, type[RendezvousBackend]]:
    """Every rendezvous backend, by name (sorted)."""
    return _load(RENDEZVOUS)[0]


def launcher_plugins() -> dict[str, type[Launcher]]:
    """Every launcher, by name (sorted)."""
    return _load(LAUNCHERS)[0]


def load_errors() -> list[LoadError]:
    return [e for group in GROUPS for e in _load(group)[1]]


def _missing(group: str, name: str, known: dict[str, Any]) -> PluginError:
    broken = [e for e in _load(group)[1] if e.name == name]
    if broken:
        return PluginError(f"the {group} plug-in {name!r} failed to load: {broken[0].error}")
    return PluginError(f"unknown {group.removeprefix('torch_chaos.').rstrip('s')} {name!r}; installed: "
                       f"{', '.join(known) or 'none'}")


def fault_kind(kind: str) -> FaultKind:
    """An instance of the plug-in for ``kind`` (the engine injects and heals through it)."""
    plugins = fault_plugins()
    if kind not in plugins:
        raise _missing(FAULTS, kind, plugins)
    return plugins[kind]()


def runtime_class(name: str) -> type[Runtime]:
    plugins = runtime_plugins()
    if name not in plugins:
        raise _missing(RUNTIMES, name, plugins)
    return plugins[name]


def rendezvous_backend(name: str) -> RendezvousBackend:
    plugins = rendezvous_plugins()
    if name not in plugins:
        raise _missing(RENDEZVOUS, name, plugins)
    return plugins[name]()


def launcher_class(name: str) -> type[Launcher]:
    plugins = launcher_plugins()
    if name not in plugins:
        raise _missing(LAUNCHERS, name, plugins)
    return plugins[name]


# ``cluster.mode`` as written before launchers were plug-ins: each names the built-in launcher of its family.
LAUNCHER_OF_MODE = {"elastic": "torchrun", "centralized": "process"}


def launcher_of(cluster: Any) -> type[Launcher]:
    """The launcher class of a scenario's ``cluster`` (``cluster.launcher``, else the one its ``mode`` names)."""
    name = getattr(cluster, "launcher", None) or LAUNCHER_OF_MODE.get(cluster.mode, cluster.mode)
    return launcher_class(name)


def fault_colour(kind: str) -> str:
    """How reports draw a fault kind; grey for a kind whose plug-in is not installed where the report is made."""
    plugin = fault_plugins().get(kind)
    return plugin.colour if plugin is not None else "#7f7f7f"
