"""The import graph of chaos/ stays one that runs downwards (docs/design.md, "Extension points").

Counted with the imports made inside functions, which Python lets a cycle hide behind: no cycle, few such lazy
imports, each with its reason; the layers hold (import-linter's contracts in pyproject.toml); and no module a
plug-in imports at import time reaches the scenario model, which is built from the plug-ins.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import tomllib

from tests.import_graph import ROOT, SOURCE_SCANS_GROUP, imports, lazy, module_cycles

# Function-level project imports left in chaos/ (each says why: the CLI's parser, the probe, pytest's start, FUSE,
# matplotlib where the engine runs without it). The CLI's subcommands are no longer among them: each handler is a
# module of chaos/commands/ with top-level imports, loaded by name when chosen (chaos/cli.py, `handler`).
# Lower it when one goes; never raise it to let a new one in without its reason being one of those.
MAX_LAZY = 12
pytestmark = pytest.mark.xdist_group(SOURCE_SCANS_GROUP)  # one worker parses chaos/ for every such scan


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    assert module_cycles(imports()) == []


def test_few_lazy_imports_each_with_its_reason() -> None:
    lazies = lazy(imports())
    unexplained = [f"{i.module}:{i.line} -> {i.target}" for i in lazies if not i.comment.startswith("lazy:")]
    assert unexplained == [], "a project import inside a function needs a `# lazy: <reason>` comment"
    assert len(lazies) <= MAX_LAZY, [f"{i.module}:{i.line} -> {i.target}" for i in lazies]


def _plugin_modules() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = ("torch_chaos.faults", "torch_chaos.runtimes", "torch_chaos.rendezvous", "torch_chaos.launchers")
    return sorted({target.split(":")[0] for group in groups for target in project["entry-points"][group].values()})


def test_no_plugin_imports_the_scenario_model_at_import_time() -> None:
    """The scenario model loads every plug-in while it is built: a plug-in that imported chaos.scenario at import
    time would find it half made (an ImportError the registry reports as a broken plug-in)."""
    graph: dict[str, set[str]] = {}
    for imp in imports():
        if not imp.in_function:
            graph.setdefault(imp.module, set()).add(imp.target)
    reach: dict[str, list[str]] = {}
    for plugin in _plugin_modules():
        seen, todo = set(), [plugin]
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += graph.get(module, ())
        bad = sorted(seen & {"chaos.scenario", "chaos.loading"})
        if bad:
            reach[plugin] = bad
    assert reach == {}


def test_the_layers_hold() -> None:
    """import-linter checks the contracts in pyproject.toml ([tool.importlinter]); it counts imports inside
    functions too."""
    lint = shutil.which("lint-imports")
    if lint is None:
        pytest.fail("import-linter is not installed: pip install -e '.[test]'")
    proc = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr


def test_every_subcommand_has_its_handler_module() -> None:
    """chaos/cli.py imports ``chaos.commands.<name>`` by name when a subcommand is chosen (no import statement a
    linter could follow): each subcommand of the parser has that module, with its ``main``; read, not imported."""
    import argparse
    import ast

    from chaos.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name in sub.choices:
        path = ROOT / "chaos" / "commands" / f"{name}.py"
        tree = ast.parse(path.read_text()) if path.exists() else None
        if tree is None or not any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            missing.append(name)
    assert sorted(sub.choices) and missing == []
