"""Reading scenario files, and turning every mistake in them into ``file:line: field: what was expected``.

Users write scenarios by hand; a pydantic traceback tells them nothing. Each error here names the file, the line
of the offending key (found through the YAML node tree), the dotted field path and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from chaos import scenario as scenario_model
from chaos.paths import TooLarge, read_small
from chaos.registry import fault_plugins, load_errors

if TYPE_CHECKING:
    from chaos.scenario import Scenario
from chaos.spec import STORED_RUN
from chaos.suggest import closest, did_you_mean, fields_at


class _Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false. YAML 1.1 would read the trigger key ``on:`` as the boolean True."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


# Bounds on what a scenario file may be, so reading one takes bounded time and memory whatever it holds. A real
# scenario is a few KB with a handful of faults; these limits are orders of magnitude above that.
MAX_FILE_BYTES = 1_000_000
MAX_LIST_ITEMS = 256  # any YAML sequence (faults, command, groups, explore.targets ...)
MAX_NODES = 20_000  # YAML nodes in the whole document
MAX_DEPTH = 32  # nesting of mappings and sequences


AFTER_FIELDS = ("what spans sections (that each fault's node exists, that the runtime can inject it, each fault "
                "kind's own checks) is checked once these are fixed")


@dataclass(frozen=True)
class ScenarioError:
    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ScenarioInvalid(Exception):
    """Raised with every error of a file at once, so a user fixes them in one pass."""

    def __init__(self, errors: list[ScenarioError], later: str | None = None):
        self.errors = errors
        self.later = later  # what could not be checked yet because of these errors (shown after them)
        super().__init__("\n".join(str(e) for e in errors))


def _line_index(node: yaml.Node, path: tuple[Any, ...] = (), index: dict | None = None) -> dict:
    """Map each field path to the 1-based line where its key (or list item) is written."""
    index = {} if index is None else index
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key_path = (*path, key_node.value)
            index[key_path] = key_node.start_mark.line + 1
            _line_index(value_node, key_path, index)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            index[(*path, i)] = item.start_mark.line + 1
            _line_index(item, (*path, i), index)
    return index


def _field_path(loc: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """Pydantic locations include union-member tags (e.g. 'ShippedWorkload', 'Fault[crash]'); drop them for the
    user. A key of the user's own in capitals (an environment variable: ``workload.env.MY_FLAG``) stays."""
    clean = tuple(p for p in loc if not (isinstance(p, str) and p[:1].isupper() and not p.isupper()))
    text = ""
    for part in clean:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text, clean


# Fields whose values are plug-in names: a value naming a plug-in that failed to load is told so.
_PLUGIN_FIELDS = {"runtime": "torch_chaos.runtimes", "backend": "torch_chaos.rendezvous"}


def _explain(err: dict[str, Any]) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        loc = tuple(err.get("loc", ()))
        known = fields_at(loc[:-1]) if loc and isinstance(loc[-1], str) else []
        if loc and loc[-1] in known:  # a field of another form of this section (a shipped workload's args, say)
            return (f"{loc[-1]!r} belongs to another form of this section and does not go with the fields given "
                    "here (`chaos schema` shows which fields go together)")
        near = closest(loc[-1], known) if known else []
        if near:
            return f"unknown field: did you mean {near[0]!r}? (`chaos schema` lists every field)"
        return "unknown field (check the spelling; `chaos schema` lists every field)"
    if kind == "missing":
        return "required field is missing"
    if kind == "fault_kind":  # an unknown or missing fault kind (the union in chaos/scenario.py)

        got = err.get("input", {}).get("kind") if isinstance(err.get("input"), dict) else None
        broken = [e for e in load_errors() if e.group == "torch_chaos.faults" and e.name == got]
        if broken:
            return f"the plug-in for {got!r} is installed but failed to load ({broken[0].target}: {broken[0].error})"

        return msg.removeprefix("kind: ") + (f", got {_shown(got)}{did_you_mean(got, fault_plugins())}"
                                             if got is not None else ", got none")
    if kind == "literal_error":
        group = _PLUGIN_FIELDS.get(str(err.get("loc", ("",))[-1]))
        if group is not None:  # cluster.runtime / rendezvous.backend naming a plug-in that is there but broken

            broken = [e for e in load_errors() if e.group == group and e.name == err.get("input")]
            if broken:
                return (f"the plug-in for {err.get('input')!r} is installed but failed to load ({broken[0].target}: "
                        f"{broken[0].error})")
        choices = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
        return (msg.replace("Input should be", "expected") + f", got {_shown(err.get('input'))}"
                + did_you_mean(err.get("input"), choices))
    msg = msg.removeprefix("Value error, ")
    if "input" in err and kind not in ("value_error", "model_type"):
        return f"{msg}, got {_shown(err['input'])}"
    return msg


def _shown(value: Any, limit: int = 120) -> str:
    """The offending value as the message quotes it, cut short: a list of 250 faults is named, not echoed."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


_MESSAGE_FIELD = re.compile(r"^([a-z_]+(?:\[\d+\])?(?:\.[A-Za-z_][\w-]*(?:\[\d+\])?)*): (.*)$", re.S)


def _field_from_message(message: str) -> tuple[str, tuple[Any, ...], str]:
    m = _MESSAGE_FIELD.match(message)
    if not m:
        return "", (), message
    path: list[Any] = []
    for part in m.group(1).split("."):
        name, _, rest = part.partition("[")
        path.append(name)
        if rest:
            path.append(int(rest.rstrip("]")))
    return m.group(1), tuple(path), m.group(2)


def _override_runtime(data: dict[str, Any], runtime: str) -> None:
    """Run the same scenario on another runtime (``chaos run quickstart --runtime docker``).

    Applied to the raw mapping before validation, so the scenario is judged as it will run (a network fault on the
    local runtime is refused as if the file said so) and the resolved ``scenario.yaml`` of the run shows the
    runtime it ran on. A ``cluster`` that is not a mapping is left for validation to report."""
    cluster = data.setdefault("cluster", {})
    if isinstance(cluster, dict):
        cluster["runtime"] = runtime


def _bounded(node: yaml.Node, file: str, max_list: int = MAX_LIST_ITEMS) -> None:
    """Refuse a list longer than MAX_LIST_ITEMS (faults, command, groups ...), and a key given twice in one
    mapping (YAML would keep the last silently: a second ``name:`` or ``faults:`` overriding the first), naming
    the line."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, yaml.SequenceNode):
            if len(current.value) > max_list:
                raise ScenarioInvalid([ScenarioError(
                    file, current.start_mark.line + 1, "",
                    f"a list of {len(current.value)} items; at most {max_list} are accepted")])
            stack += current.value
        elif isinstance(current, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, _ in current.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        raise ScenarioInvalid([ScenarioError(
                            file, key.start_mark.line + 1, str(key.value)[:80],
                            f"given twice (first on line {seen[key.value]}); YAML would keep only the last")])
                    seen[key.value] = key.start_mark.line + 1
            stack += [n for pair in current.value for n in pair]


class _AliasRefused(yaml.MarkedYAMLError):
    pass


class _NoAliasLoader(_Loader):
    """Refuses aliases, and documents too deep or of too many values, while composing: one parse, nothing
    expanded, and the refusal comes as soon as a bound is crossed (see :func:`_compose`)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._count = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _AliasRefused(problem=f"YAML alias *{event.anchor} is not accepted (aliases can expand without "
                                "bound); write the value out instead", problem_mark=event.start_mark)
        self._count += 1
        if self._count > MAX_NODES:
            raise _AliasRefused(problem=f"too many values (more than {MAX_NODES})", problem_mark=event.start_mark)
        if self._depth >= MAX_DEPTH:
            raise _AliasRefused(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _compose(text: str, file: str, max_list: int = MAX_LIST_ITEMS) -> yaml.Node | None:
    """The YAML node tree, with aliases refused and its size bounded.

    Aliases (``*name``) are refused outright rather than bounded: a few hundred bytes of nested aliases expand
    to gigabytes (a "billion laughs"), a scenario never needs one (every value can be written out), and a plain
    rule is easier to explain than an expansion budget. Anchors without aliases are harmless and accepted.
    """
    loader = _NoAliasLoader(text)
    try:
        root = loader.get_single_node()
    except _AliasRefused as exc:
        mark = exc.problem_mark
        raise ScenarioInvalid([ScenarioError(file, mark.line + 1 if mark else None, "", str(exc.problem))]) from None
    finally:
        loader.dispose()
    if root is not None:
        _bounded(root, file, max_list)
    return root


def _construct(root: yaml.Node) -> Any:
    loader = _Loader("")
    try:
        return loader.construct_document(root)
    finally:
        loader.dispose()


def load_bounded_yaml(text: str, file: str, max_list: int = MAX_LIST_ITEMS) -> Any:
    """A YAML document other than a scenario that torch-chaos reads back (a run's plan.yaml), under the scenario's
    bounds (no aliases, depth, node count) but lists of up to ``max_list`` items (a plan lists every host CPU);
    ScenarioInvalid when it is not one."""
    try:
        root = _compose(text, file, max_list)
        return _construct(root) if root is not None else None
    except (yaml.YAMLError, RecursionError, ValueError, OverflowError) as exc:
        raise ScenarioInvalid([ScenarioError(file, None, "", f"not readable YAML: {exc}")]) from None


def parse_scenario(text: str, file: str = "<scenario>", runtime: str | None = None, stored: bool = False) -> Scenario:
    """The validated scenario of a YAML text; ``runtime`` overrides ``cluster.runtime`` (see _override_runtime).

    ``stored``: the ``scenario.yaml`` a run directory keeps, read back for its analysis. Older engines wrote every
    kind's fields on every fault (``one_way: false`` on a crash); those are accepted there and only there."""
    if len(text) > MAX_FILE_BYTES:
        raise ScenarioInvalid([ScenarioError(file, None, "", f"larger than {MAX_FILE_BYTES} bytes; a scenario is "
                                                              "a few KB")])
    try:
        root = _compose(text, file)
        data = _construct(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ScenarioInvalid([ScenarioError(file, mark.line + 1 if mark else None, "",
                                             f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    except RecursionError:
        raise ScenarioInvalid([ScenarioError(file, None, "", f"nested deeper than {MAX_DEPTH} levels")]) from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer of more digits than Python reads
        raise ScenarioInvalid([ScenarioError(file, None, "", f"not a readable value: {exc}")]) from None
    if not isinstance(data, dict):
        raise ScenarioInvalid([ScenarioError(file, 1, "", "expected a mapping with name, cluster, workload, faults")])
    if runtime is not None:
        _override_runtime(data, runtime)
    if Path(file).is_file():
        _anchor_scripts(data, Path(file).resolve().parent)
    lines = _line_index(root) if root is not None else {}
    try:
        return scenario_model.model().model_validate(data, context={STORED_RUN: True} if stored else None)
    except ValidationError as exc:
        errors = []
        seen = set()
        for err in exc.errors():
            loc = tuple(err["loc"]) + (("kind",) if err["type"] == "fault_kind" else ())
            field, clean = _field_path(loc)
            found = [(field, clean, _explain(err))]
            if not clean:  # whole-scenario checks name their fields in the message, one per line
                found = [_field_from_message(part) for part in _explain(err).split("\n")]
            for field, clean, explained in found:
                # A union (shipped vs command workload) reports each member; keep the first error per field.
                key = (field, explained)
                if key in seen:
                    continue
                seen.add(key)
                line = None
                for n in range(len(clean), -1, -1):
                    if clean[:n] in lines:
                        line = lines[clean[:n]]
                        break
                if runtime is not None and field == "cluster.runtime":
                    explained += f" (from --runtime {runtime})"
                errors.append(ScenarioError(file, line, field, explained))
        errors.sort(key=lambda e: e.line or 0)
        # Pydantic runs Scenario._check only once every field is valid: say so, or a fixed file's second round of
        # errors (a target that does not exist, a kind's own check) looks like validate missed them the first time.
        later = None if stored or any(not e.field for e in errors) or any(
            err["loc"] == () for err in exc.errors()) else AFTER_FIELDS
        raise ScenarioInvalid(errors, later) from None


def read_scenario_text(path: str | Path) -> str:
    """A scenario file's text: at most MAX_FILE_BYTES, UTF-8, each problem named with the file (and byte offset)."""
    p = Path(path)
    try:
        raw = read_small(p, MAX_FILE_BYTES)  # a FIFO or a device is refused, not waited on
    except TooLarge:
        raise ScenarioInvalid([ScenarioError(str(p), None, "", f"larger than {MAX_FILE_BYTES} bytes; a scenario "
                                                                "is a few KB")]) from None
    except OSError as exc:
        why = exc.strerror or str(exc).replace(f"{p} ", "", 1)
        raise ScenarioInvalid([ScenarioError(str(p), None, "", f"cannot read file: {why}")]) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioInvalid([ScenarioError(f"{p}: byte {exc.start}", None, "", "not UTF-8")]) from None


def _anchor_scripts(data: dict[str, Any], base: Path) -> None:
    """A ``command:`` workload's Python scripts named relative to the scenario file are anchored there.

    Nodes start in their fresh run directory, so a relative path would name nothing; the file next to the
    scenario is what its author meant (``command: [python, train.py]`` beside ``train.chaos.yaml``). Only
    arguments ending in ``.py`` that exist there are rewritten (to absolute paths, which the run directory's
    ``scenario.yaml`` then keeps); anything else is left for admission to judge."""
    workload = data.get("workload")
    command = workload.get("command") if isinstance(workload, dict) else None
    if not isinstance(command, list):
        return
    for i, arg in enumerate(command):
        if isinstance(arg, str) and arg.endswith(".py") and not Path(arg).is_absolute() and "\0" not in arg:
            candidate = base / arg
            try:
                if candidate.is_file():
                    command[i] = str(candidate.resolve())
            except (OSError, ValueError):  # a name too long for the filesystem: admission says what is wrong
                continue


def load_scenario(path: str | Path, runtime: str | None = None, stored: bool = False) -> Scenario:
    """Read and validate a scenario file; ``runtime`` runs it on another runtime than the file names; ``stored``
    for a run directory's own copy (see parse_scenario)."""
    return parse_scenario(read_scenario_text(path), str(path), runtime=runtime, stored=stored)


def locate(file: str, text: str, message: str) -> ScenarioError:
    """An error found after validation (plan, program, machine) whose message starts with a field path
    (``workload.command: ...``), placed at that field's line like the schema's own errors."""
    field, clean, explained = _field_from_message(message)
    try:
        root = _compose(text, file)
    except (ScenarioInvalid, yaml.YAMLError):
        root = None
    lines = _line_index(root) if root is not None else {}
    line = next((lines[clean[:n]] for n in range(len(clean), 0, -1) if clean[:n] in lines), None)
    return ScenarioError(file, line, field, explained)


def shipped_scenarios_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "scenarios"


def resolve_scenario_path(name_or_path: str) -> Path:
    """A path, or the name of a shipped scenario (``quickstart`` → scenarios/quickstart.yaml)."""
    p = Path(name_or_path)
    if p.is_file() or p.suffix in (".yaml", ".yml"):
        return p
    # A shipped name: its path under scenarios/ ("network/delay") or, when unique, its file's stem ("delay"). Matched
    # against the files there, never globbed or joined: a name with "*" or "../" names nothing. A directory of the
    # same name in the working directory does not hide it.
    root = shipped_scenarios_dir()
    shipped = sorted(root.rglob("*.yaml"))
    exact = [c for c in shipped if c.relative_to(root).with_suffix("").as_posix() == name_or_path]
    by_stem = [c for c in shipped if c.stem == name_or_path]
    if exact or len(by_stem) == 1:
        return (exact or by_stem)[0]
    if by_stem:
        names = ", ".join(c.relative_to(root).with_suffix("").as_posix() for c in by_stem)
        raise ScenarioInvalid([ScenarioError(name_or_path, None, "", f"more than one shipped scenario has this name: "
                                                                     f"{names}; give one of them")])
    # Neither a file nor a shipped name, but written like one: a misspelt name is far likelier than a missing file.
    if not p.exists() and re.fullmatch(r"[\w-]+(/[\w-]+)*", name_or_path):
        names = [c.relative_to(root).with_suffix("").as_posix() for c in shipped]
        named = {**{c.stem: name for name, c in zip(names, shipped, strict=True)}, **{n: n for n in names}}
        near = dict.fromkeys(named[n] for n in closest(name_or_path, list(named), n=3))
        if near:
            shown_near = ", ".join(repr(n) for n in near)
            raise ScenarioInvalid([ScenarioError(name_or_path, None, "", f"no such file, and no shipped scenario of "
                                                 f"this name: did you mean {shown_near}? (`chaos list` lists them)")])
    return p
