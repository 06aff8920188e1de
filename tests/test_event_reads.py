"""Every key a reader in chaos/ reads from a history event is a field some event declares (issue 31 item 1).

Events are plain dicts parsed from JSON: ``e.get("setp")`` raises nothing and reads None forever, so a typo in a
reader is a silent wrong figure. This walks chaos/ with ``ast`` (nothing runs) and finds each string-key read on
an event: ``x.get("k")``, ``x["k"]`` and ``"k" in x`` where ``x`` is annotated ``Event``, is the loop variable over
a history (a name annotated ``list[Event]``, ``Iterable[Event]``, ``History`` ..., or a call of a function
declared to return events, such as ``of_kind``), an element taken from one (``events[0]``, ``next(...)``, ``max``),
a value of a dict of events (annotated ``dict[K, Event]`` or built by a comprehension), or the parameter of a
``key=`` lambda over one. A key that is not a field of :class:`chaos.events.Event` fails
with its file:line. What it cannot see (an event passed on untyped, a dict of events) it does not judge.
"""

from __future__ import annotations

import ast
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

import chaos
from chaos.events import Event
from tests.import_graph import SOURCE_SCANS_GROUP, parsed

CHAOS = Path(chaos.__file__).parent
DECLARED = frozenset(Event.__annotations__)
ONE, MANY, MAP = "one", "many", "map"  # an event; a collection of events (iterating it gives events); a dict of them
COLLECTIONS = {"list", "Iterable", "Iterator", "Sequence", "Collection", "Generator", "tuple", "set", "History"}
MAPPINGS = {"dict", "Mapping", "MutableMapping", "defaultdict", "OrderedDict"}
# builtins that hand back their argument's elements: iterating the result iterates the events
PASS_MANY = {"reversed", "sorted", "list", "iter", "filter", "tuple"}
PICK_ONE = {"max", "min", "next"}


def _annotation_kind(node: ast.expr | None) -> str | None:
    """ONE for ``Event`` (or ``Event | None``), MANY for a collection of them, else None."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(node, ast.Name):
        return ONE if node.id == "Event" else MANY if node.id == "History" else None
    if isinstance(node, ast.Attribute):  # chaos.events.Event
        return ONE if node.attr == "Event" else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None
        return _annotation_kind(node.left) or _annotation_kind(node.right)
    if isinstance(node, ast.Subscript):
        outer = node.value.id if isinstance(node.value, ast.Name) else \
            node.value.attr if isinstance(node.value, ast.Attribute) else ""
        inner = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) and node.slice.elts else node.slice
        if outer in COLLECTIONS and _annotation_kind(inner) == ONE:
            return MANY
        if outer in MAPPINGS and isinstance(node.slice, ast.Tuple) and _annotation_kind(node.slice.elts[-1]) == ONE:
            return MAP
    return None


def _returning() -> dict[str, str]:
    """Functions and methods in chaos/ declared to return an event or events, by name (``of_kind`` -> MANY)."""
    out: dict[str, str] = {}
    for path in sorted(CHAOS.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (kind := _annotation_kind(node.returns)):
                out[node.name] = kind
    return out


class _Reads(ast.NodeVisitor):
    """Collects (line, key) of each string-key read on an expression known to be an event, scope by scope."""

    def __init__(self, returning: dict[str, str]):
        self.returning = returning
        self.scopes: list[dict[str, str | None]] = [{}]
        self.reads: list[tuple[int, str]] = []

    # -- what an expression is
    def kind(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                if node.id in scope:
                    return scope[node.id]
            return None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return self.scopes[0].get("self." + node.attr)
        if isinstance(node, ast.Subscript):
            inner = self.kind(node.value)
            if inner == MANY:
                return MANY if isinstance(node.slice, ast.Slice) else ONE
            return ONE if inner == MAP else None
        if isinstance(node, ast.IfExp):
            return self.kind(node.body) or self.kind(node.orelse)
        if isinstance(node, ast.BoolOp):
            return next((k for v in node.values if (k := self.kind(v))), None)
        if isinstance(node, ast.ListComp | ast.GeneratorExp):
            with self.comprehension(node.generators):
                return MANY if self.kind(node.elt) == ONE else None
        if isinstance(node, ast.DictComp):
            with self.comprehension(node.generators):
                return MAP if self.kind(node.value) == ONE else None
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            first = self.kind(node.args[0]) if node.args else None
            if name in PASS_MANY and first == MANY:
                return MANY
            if name in PICK_ONE and first == MANY:
                return ONE
            if isinstance(func, ast.Attribute) and (owner := self.kind(func.value)) is not None:
                if owner == MANY and name == "of":
                    return MANY  # History.of(kind)
                if owner == MAP:  # a dict of events
                    return {"get": ONE, "pop": ONE, "setdefault": ONE, "values": MANY}.get(name)
                return None
            return self.returning.get(name)
        return None

    # -- binding names
    def bind(self, target: ast.expr, kind: str | None) -> None:
        if isinstance(target, ast.Name):
            self.scopes[-1][target.id] = kind  # None: bound to something else here (shadows an outer event)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            self.scopes[0]["self." + target.attr] = kind
        elif isinstance(target, ast.Tuple | ast.List):
            for t in target.elts:
                self.bind(t, None)

    def bind_loop(self, target: ast.expr, iterable: ast.expr) -> None:
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
                and iterable.func.attr == "items" and self.kind(iterable.func.value) == MAP \
                and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            self.bind(target.elts[0], None)
            self.bind(target.elts[1], ONE)
            return
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate" \
                and iterable.args and self.kind(iterable.args[0]) == MANY and isinstance(target, ast.Tuple) \
                and len(target.elts) == 2:
            self.bind(target.elts[0], None)
            self.bind(target.elts[1], ONE)
            return
        self.bind(target, ONE if self.kind(iterable) == MANY else None)

    class _Comprehension:
        def __init__(self, reads: _Reads, generators: list[ast.comprehension]):
            self.reads, self.generators = reads, generators

        def __enter__(self) -> None:
            self.reads.scopes.append({})
            for g in self.generators:
                self.reads.bind_loop(g.target, g.iter)

        def __exit__(self, *_: object) -> None:
            self.reads.scopes.pop()

    def comprehension(self, generators: list[ast.comprehension]) -> _Reads._Comprehension:
        return self._Comprehension(self, generators)

    # -- scopes
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        self.scopes.append({})
        args = node.args
        for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if a is not None:
                self.bind(ast.Name(a.arg), _annotation_kind(a.annotation))
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.scopes.append({})
        for a in node.args.args:
            self.bind(ast.Name(a.arg), None)
        self.visit(node.body)
        self.scopes.pop()

    def _visit_comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        self.scopes.append({})
        for g in node.generators:
            self.visit(g.iter)
            self.bind_loop(g.target, g.iter)
            for cond in g.ifs:
                self.visit(cond)
        for field in ("elt", "key", "value"):
            if (child := getattr(node, field, None)) is not None:
                self.visit(child)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _visit_comprehension

    # -- statements that bind
    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        kind = self.kind(node.value)
        for target in node.targets:
            self.visit(target)
            self.bind(target, kind)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.bind(node.target, _annotation_kind(node.annotation) or
                  (self.kind(node.value) if node.value is not None else None))

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.bind(node.target, self.kind(node.value))

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.bind_loop(node.target, node.iter)
        for stmt in (*node.body, *node.orelse):
            self.visit(stmt)

    visit_AsyncFor = visit_For

    # -- the reads
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault") and node.args \
                and self.kind(func.value) == ONE:
            self._key(node.args[0])
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in {"sorted", "max", "min", "sort"} and (
                (node.args and self.kind(node.args[0]) == MANY)
                or (name == "sort" and isinstance(func, ast.Attribute) and self.kind(func.value) == MANY)):
            for kw in node.keywords:  # key=lambda e: e["t"] over events: e is an event
                if kw.arg == "key" and isinstance(kw.value, ast.Lambda) and kw.value.args.args:
                    self.scopes.append({kw.value.args.args[0].arg: ONE})
                    self.visit(kw.value.body)
                    self.scopes.pop()
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and self.kind(node.value) == ONE:
            self._key(node.slice)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn) and self.kind(right) == ONE:
                self._key(node.left)
        self.generic_visit(node)

    def _key(self, node: ast.expr) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.reads.append((node.lineno, node.value))


def event_reads(tree: ast.Module, returning: dict[str, str]) -> list[tuple[int, str]]:
    """(line, key) of every string-key read on an event in one module."""
    reads = _Reads(returning)
    reads.visit(tree)
    return reads.reads


def _all_reads() -> Iterator[tuple[str, int, str]]:
    returning = _returning()
    for path in sorted(CHAOS.rglob("*.py")):
        for line, key in event_reads(parsed(path), returning):
            yield str(path.relative_to(CHAOS.parent)), line, key


@pytest.mark.xdist_group(SOURCE_SCANS_GROUP)  # the worker that parses chaos/ once for every such scan
def test_every_key_read_from_an_event_is_a_declared_field() -> None:
    reads = list(_all_reads())
    undeclared = [f"{path}:{line}: {key!r}" for path, line, key in reads if key not in DECLARED]
    assert undeclared == [], ("reads a key no event declares (a typo, or a field to declare in chaos.events and "
                              "chaos.events.Event):\n" + "\n".join(undeclared))
    assert len(reads) > 200  # the walk still sees the readers (they were ~270 reads when this was written)


SAMPLE = '''
from chaos.history import Event

def f(events: list[Event], one: Event | None, other: dict) -> None:
    for e in events:
        e.get("stpe")
    [x["tt"] for x in of_kind(events, "k")]
    last = events[-1]
    last["nod"]
    first = next((e for e in events if e["t"]), None)
    sorted(events, key=lambda e: e["rnak"])
    "pathh" in one
    other["not_an_event"]
    for i, e in enumerate(reversed(events)):
        e["evnt"]
    by_node: dict[str, Event] = {}
    by_node["node0"]["rnk"]
    for node, e in by_node.items():
        e.get("fualt_id")
    latest = {e["node"]: e for e in events}
    latest.get("node1")["sorce"]
    max(latest.values(), key=lambda e: e["tim"])
    e = 3
    e["rebound"]
'''


def test_the_walk_finds_reads_on_each_kind_of_event_variable() -> None:
    reads = event_reads(ast.parse(SAMPLE), {"of_kind": MANY})
    assert sorted(key for _, key in reads if key not in DECLARED) == \
        ["evnt", "fualt_id", "nod", "pathh", "rnak", "rnk", "sorce", "stpe", "tim", "tt"]
    assert ("t" in {key for _, key in reads}) and "not_an_event" not in {key for _, key in reads}


def test_the_step_tables_columns_are_fields_of_a_step() -> None:
    """The step table (chaos.analysis.steps) keeps steps by column, read by name (``table.values("loss")``): each
    column is a field ``step_completed`` declares, so a renamed field cannot leave a column that reads absent."""
    from chaos.analysis.steps import FIELDS as COLUMNS
    from chaos.events import StepCompleted

    assert sorted(set(COLUMNS) - set(typing.get_type_hints(StepCompleted))) == []
