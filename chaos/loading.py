"""Reading scenario files, and turning every mistake in them into ``file:line: field: what was expected``.

Users write scenarios by hand; a pydantic traceback tells them nothing. Each error here names the file, the line
of the offending key (found through the YAML node tree), the dotted field path and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from chaos.scenario import Scenario


class _Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false. YAML 1.1 would read the trigger key ``on:`` as the boolean True."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


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

    def __init__(self, errors: list[ScenarioError]):
        self.errors = errors
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
    """Pydantic locations include union-member tags (e.g. 'ShippedWorkload'); drop them for the user."""
    clean = tuple(p for p in loc if not (isinstance(p, str) and p[:1].isupper()))
    text = ""
    for part in clean:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text, clean


def _explain(err: dict[str, Any]) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        return "unknown field (check the spelling; `chaos schema` lists every field)"
    if kind == "missing":
        return "required field is missing"
    if kind == "fault_kind":  # an unknown or missing fault kind (the union in chaos/scenario.py)
        from chaos.registry import load_errors

        got = err.get("input", {}).get("kind") if isinstance(err.get("input"), dict) else None
        broken = [e for e in load_errors() if e.group == "torch_chaos.faults" and e.name == got]
        if broken:
            return f"the plug-in for {got!r} is installed but failed to load ({broken[0].target}: {broken[0].error})"
        return msg.removeprefix("kind: ") + (f", got {got!r}" if got is not None else ", got none")
    if kind == "literal_error":
        return msg.replace("Input should be", "expected") + f", got {err.get('input')!r}"
    msg = msg.removeprefix("Value error, ")
    if "input" in err and kind not in ("value_error", "model_type"):
        return f"{msg}, got {err['input']!r}"
    return msg


_MESSAGE_FIELD = re.compile(r"^([a-z_]+(?:\[\d+\])?(?:\.[a-z_]+(?:\[\d+\])?)*): (.*)$", re.S)


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


def parse_scenario(text: str, file: str = "<scenario>", runtime: str | None = None) -> Scenario:
    """The validated scenario of a YAML text; ``runtime`` overrides ``cluster.runtime`` (see _override_runtime)."""
    try:
        root = yaml.compose(text, Loader=_Loader)
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ScenarioInvalid([ScenarioError(file, mark.line + 1 if mark else None, "",
                                             f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    if not isinstance(data, dict):
        raise ScenarioInvalid([ScenarioError(file, 1, "", "expected a mapping with name, cluster, workload, faults")])
    if runtime is not None:
        _override_runtime(data, runtime)
    lines = _line_index(root) if root is not None else {}
    try:
        return Scenario.model_validate(data)
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
        raise ScenarioInvalid(errors) from None


def load_scenario(path: str | Path, runtime: str | None = None) -> Scenario:
    """Read and validate a scenario file; ``runtime`` runs it on another runtime than the file names."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ScenarioInvalid([ScenarioError(str(p), None, "", f"cannot read file: {exc.strerror}")]) from None
    return parse_scenario(text, str(p), runtime=runtime)


def shipped_scenarios_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "scenarios"


def resolve_scenario_path(name_or_path: str) -> Path:
    """A path, or the name of a shipped scenario (``quickstart`` → scenarios/quickstart.yaml)."""
    p = Path(name_or_path)
    if p.exists() or p.suffix in (".yaml", ".yml"):
        return p
    for candidate in shipped_scenarios_dir().rglob(f"{name_or_path}.yaml"):
        return candidate
    return p
