"""The project's import graph, counting imports inside function bodies too.

Python hides a cycle behind an import placed inside a function: the program starts, but the two modules still
depend on each other. This walks every module of chaos/ with `ast` (no import runs), so the fast tier can check
that chaos/ has no cycle and few lazy imports (tests/test_import_structure.py). Run it as a script to see them:
`python tests/import_graph.py`.
"""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "chaos"
# The xdist group of the fast tests that walk every chaos/ module's syntax tree (import structure, kinds, event
# names, the engine's import graph): one worker parses chaos/ once for all of them (``parsed``).
SOURCE_SCANS_GROUP = "source-scans"


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of one source file, parsed once per process: parsing all of chaos/ is ~0.8 CPU-s, and
    several tests walk all of it. Shared: a caller walks it and never changes it."""
    return ast.parse(path.read_text())


@dataclass(frozen=True)
class Import:
    """One `import`/`from ... import` of a project module, found at `module:line`."""

    module: str
    target: str
    line: int
    in_function: bool
    comment: str


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module that `name` (a module, or a module.attribute) denotes, or None outside the project."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


class _Finder(ast.NodeVisitor):
    def __init__(self, module: str, path: Path, modules: dict[str, Path], lines: list[str]) -> None:
        self.module, self.modules, self.lines = module, modules, lines
        self.is_package = path.name == "__init__.py"
        self.depth = 0
        self.type_checking = 0
        self.found: list[Import] = []

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        if test in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            # annotations only: never executed, so no dependency at run time
            self.type_checking += 1
            for child in node.body:
                self.visit(child)
            self.type_checking -= 1
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _add(self, node: ast.stmt, name: str) -> None:
        if self.type_checking:
            return
        target = _resolve(name, self.modules)
        if target is None or target == self.module:
            return
        # the reason of a lazy import: a comment on its line, or on the line above it
        above = self.lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        comment = self.lines[node.lineno - 1].partition("#")[2].strip() or (above[1:].strip() if above.startswith("#")
                                                                            else "")
        imp = Import(self.module, target, node.lineno, self.depth > 0, comment)
        if imp not in self.found:  # `from m import a, b` is one import of m
            self.found.append(imp)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _absolute(self.module, self.is_package, node.level, node.module)
        for alias in node.names:
            full = f"{base}.{alias.name}"
            self._add(node, full if full in self.modules else base)


def imports() -> list[Import]:
    """Every project import of every chaos/ module, top-level and inside functions."""
    return list(_imports())


@functools.cache
def _imports() -> tuple[Import, ...]:  # once per process: three tests of tests/test_import_structure.py read it
    modules = project_modules()
    found: list[Import] = []
    for module, path in modules.items():
        finder = _Finder(module, path, modules, path.read_text().splitlines())
        finder.visit(parsed(path))
        found.extend(finder.found)
    return tuple(found)


def _parents(module: str) -> list[str]:
    """Importing a.b.c runs a/__init__ and a/b/__init__ first: the module depends on its packages."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def cycles(found: list[Import]) -> list[list[str]]:
    """The strongly connected components (more than one module) of the graph of `found` (Tarjan), where a module
    also depends on the packages above it (importing chaos.faults.base runs chaos/faults/__init__.py first), but
    the root package: chaos/__init__.py imports only the version at import time, and its ``chaos.run`` is the
    public entry that imports the engine when called. A package's import of its own submodules (an __init__ that
    re-exports them, the usual layout) is left out: it is what the submodule's dependency on its package means."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        graph.setdefault(imp.module, set())
        if not imp.target.startswith(imp.module + "."):
            graph[imp.module].add(imp.target)
        graph.setdefault(imp.target, set())
    for module in list(graph):
        graph[module].update(p for p in _parents(module) if p != PACKAGE)
        for parent in graph[module] - set(graph):
            graph[parent] = set()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def module_cycles(found: list[Import]) -> list[list[str]]:
    """Cycles between modules (a package's __init__ counts as a module like any other)."""
    return cycles(found)


def lazy(found: list[Import]) -> list[Import]:
    return [imp for imp in found if imp.in_function]


def main() -> int:
    found = imports()
    lazies = lazy(found)
    for imp in lazies:
        print(f"lazy  {imp.module}:{imp.line} -> {imp.target}  # {imp.comment}")
    loops = module_cycles(found)
    for loop in loops:
        print(f"cycle ({len(loop)}): {' '.join(loop)}")
    print(f"{len(lazies)} function-level project imports, {len(loops)} cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
