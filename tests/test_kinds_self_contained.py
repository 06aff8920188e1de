"""Nothing outside a fault kind's own module names the kind (docs/design.md, "Extension points").

A kind declares what the rest of chaos/ needs to know about it (its options, needs, layouts, the explore default,
the clean resume of the golden control run, the network shapes the Slurm agent carries out, the storage layer's
effect of its rule, the axis of an interconnect sweep): a module that
names a kind is knowledge of that kind kept elsewhere, which a third-party kind could not have. Checked for
every registered kind, as a string constant in the code of chaos/ (comments and docstrings are prose).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from chaos.registry import fault_plugins, launcher_plugins
from tests.import_graph import SOURCE_SCANS_GROUP, parsed

CHAOS = Path(__file__).resolve().parent.parent / "chaos"
pytestmark = pytest.mark.xdist_group(SOURCE_SCANS_GROUP)  # one worker parses chaos/ for every such scan

# The same word meaning something else: (module, word) -> what it is there.
OTHER_MEANING = {
    ("chaos.analysis.checkpoints", "loss"): "the training loss column",
    ("chaos.analysis.series", "loss"): "the training loss column",
    ("chaos.analysis.steps", "loss"): "the training loss column",
    ("chaos.engine.progress", "loss"): "the progress regex's loss group",
    ("chaos.golden", "loss"): "the progress regex's loss group",
    ("chaos.reports.html", "loss"): "the loss figure",
    ("chaos.reports.markdown", "loss"): "the loss figure",
    ("chaos.reports.plots", "loss"): "the loss figure",
    ("chaos.cluster.netexec", "loss"): "a tc netem parameter",
    ("chaos.cluster.netexec", "delay"): "a tc netem parameter",
    ("chaos.net.capabilities", "delay"): "a tc netem parameter",
    ("chaos.commands.cluster", "partition"): "a Slurm partition",
    ("chaos.cluster.spec", "partition"): "a Slurm partition",
    ("chaos.analysis.hangs", "hang"): "a fault's hang outcome in result.json",
    ("chaos.reports.text", "hang"): "a fault's hang outcome in result.json",
    ("chaos.cgroup", "oom_kill"): "the kernel's counter in memory.events",
    ("chaos.faults.allocator", "oom_kill"): "the allocator's mode",
    ("chaos.capabilities", "freeze"): "a runtime capability",
    ("chaos.capabilities", "host_loss"): "a runtime capability",
}


def _named(kinds: set[str]) -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(CHAOS.rglob("*.py")):
        parts = list(path.relative_to(CHAOS.parent).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in kinds:
                found.append((module, node.lineno, node.value))
    return found


def test_no_module_but_its_own_names_a_fault_kind() -> None:
    plugins = fault_plugins()
    own = {kind: plugin.__module__ for kind, plugin in plugins.items()}
    # a launcher refuses kinds by name (Launcher.refused_faults: the kind and why it does not apply to its jobs)
    refused = {(launcher.__module__, kind) for launcher in launcher_plugins().values()
               for kind in launcher.refused_faults}
    named = [f"{module}:{line}: {kind!r}" for module, line, kind in _named(set(plugins))
             if module != own[kind] and (module, kind) not in OTHER_MEANING.keys() | refused]
    assert named == [], "a fault kind named outside its module: declare what is needed on the kind instead"


def test_the_exceptions_are_still_needed() -> None:
    """An exception that no longer matches anything is removed, so the list says what is true."""
    named = {(module, kind) for module, _, kind in _named(set(fault_plugins()))}
    assert set(OTHER_MEANING) - named == set()
