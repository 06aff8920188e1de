"""Write docs/scenario-fields.md from the scenario schema, so the field reference cannot drift from the code.

The schema is the one `chaos schema` prints (the pydantic model in chaos/scenario.py, with every plug-in's
options). The page documents the built-in plug-ins only: a kind, runtime or backend installed from another package
(an example plug-in, a user's) is left out, so the page is the same on every machine.

    python docs/gen_scenario_fields.py            # rewrite the page
    python docs/gen_scenario_fields.py --check    # exit 1 if the page is out of date (tests/test_docs.py)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "scenario-fields.md"
BUILT_IN = "chaos."  # the module prefix of the plug-ins torch-chaos ships
_DURATION = "(ms|s|m|h|d)"  # the unit group of a Seconds string's pattern

HEADER = """# Scenario fields

Every field of a scenario file: its type, default and meaning. Generated from the scenario schema (`chaos schema`:
the pydantic model in `chaos/scenario.py` and each built-in plug-in's options model) by
`python docs/gen_scenario_fields.py`; do not edit it by hand: `tests/test_docs.py` fails when it is out of date.
An annotated example is in [scenarios.md](scenarios.md); what each fault kind does is in [faults.md](faults.md).

A *duration* is a number of seconds or a string such as `500ms`, `10s`, `2m`; a *size* a number of bytes or a
string such as `10MB`. Unknown keys are errors everywhere.
"""


def _foreign_names() -> set[str]:
    """Names registered by plug-ins that are not torch-chaos's own (left out of the page)."""
    from chaos.registry import fault_plugins, rendezvous_plugins, runtime_plugins

    names: set[str] = set()
    for plugins in (fault_plugins(), runtime_plugins(), rendezvous_plugins()):
        names |= {name for name, cls in plugins.items() if not cls.__module__.startswith(BUILT_IN)}
    return names


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema `chaos schema` prints."""
    from chaos.scenario import Scenario

    return Scenario.model_json_schema()


def _scrub(text: str, foreign: set[str]) -> str:
    """A description without the entries a foreign plug-in added to it (`name: summary;` or `, name`)."""
    for name in foreign:
        text = re.sub(rf"(;\s*)?\b{re.escape(name)}: [^;]*", "", text)
        text = re.sub(rf",\s*\b{re.escape(name)}\b|\b{re.escape(name)}\b,\s*", "", text)
    return text.strip("; ")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


class Page:
    """Turns the schema into Markdown tables, one row per field, nested models flattened into dotted paths."""

    def __init__(self, schema: dict[str, Any], foreign: set[str]):
        self.defs: dict[str, Any] = schema.get("$defs", {})
        self.schema = schema
        self.foreign = foreign

    def ref(self, node: dict[str, Any]) -> dict[str, Any] | None:
        if "$ref" in node:
            return self.defs[node["$ref"].rsplit("/", 1)[-1]]
        return None

    def model_of(self, node: dict[str, Any]) -> dict[str, Any] | None:
        """The object schema a field holds (directly, through a $ref, or optional), else None."""
        options = [n for n in node.get("anyOf", [node]) if n.get("type") != "null"]
        if len(options) != 1:
            return None
        target = self.ref(options[0]) or options[0]
        return target if target.get("type") == "object" and "properties" in target else None

    def type_of(self, node: dict[str, Any]) -> str:
        if "$ref" in node:
            return self.type_of(self.ref(node) or {})
        if "const" in node:
            return f"`{node['const']}`"
        if "enum" in node:
            return " | ".join(f"`{v}`" for v in node["enum"] if v not in self.foreign)
        alternatives = node.get("anyOf") or node.get("oneOf")
        if alternatives:
            kinds = [a for a in alternatives if a.get("type") != "null"]
            if any(_DURATION in a.get("pattern", "") for a in kinds):
                shown = "duration"
            elif any(a.get("type") == "string" and "pattern" in a for a in kinds) and any(
                    a.get("type") == "integer" for a in kinds) and "B" in str(kinds):
                shown = "size"
            else:
                shown = " or ".join(dict.fromkeys(self.type_of(a) for a in kinds))
            return shown + (" or null" if len(kinds) < len(alternatives) else "")
        kind = node.get("type")
        if isinstance(kind, list):
            return " or ".join(str(k) for k in kind)
        if kind == "array":
            if "prefixItems" in node:
                return "[" + ", ".join(self.type_of(i) for i in node["prefixItems"]) + "]"
            return f"list of {self.type_of(node.get('items', {}))}"
        if kind == "object":
            return node.get("title", "mapping") if "properties" in node else "mapping"
        if kind == "string" and "pattern" in node:
            return f"string (`{node['pattern']}`)"
        return {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean"}.get(
            str(kind), str(kind))

    @staticmethod
    def bounds(node: dict[str, Any]) -> str:
        """A number's or a list's bounds (a duration's are always 0 to ten years: left out)."""
        options = node.get("anyOf", [node])
        if any(_DURATION in o.get("pattern", "") for o in options):
            return ""
        for option in options:
            parts = [f"{word} {option[key]}" for key, word in (
                ("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"),
                ("minItems", "items ≥"), ("maxItems", "items ≤"), ("minLength", "length ≥")) if key in option]
            if parts and "pattern" not in option:
                return ", ".join(parts)
        return ""

    def rows(self, model: dict[str, Any], prefix: str) -> list[str]:
        out: list[str] = []
        required = set(model.get("required", []))
        for name, field in model["properties"].items():
            if name in self.foreign:
                continue
            path = f"{prefix}{name}"
            nested = self.model_of(field)
            description = _scrub(field.get("description", ""), self.foreign)
            if nested is not None and nested.get("title") not in {"Bound"}:
                if description:
                    out.append(f"| `{path}` | section | | {_cell(description)} |")
                out.extend(self.rows(nested, f"{path}."))
                continue
            shown_type = self.type_of(field)
            bound = self.bounds(field)
            default = "required" if name in required else (
                f"`{_default(field['default'])}`" if "default" in field else "")
            meaning = ", ".join(x for x in (description, bound and f"bounds: {bound}") if x)
            out.append(f"| `{path}` | {_cell(shown_type)} | {default} | {_cell(meaning)} |")
        return out

    def table(self, model: dict[str, Any], prefix: str) -> str:
        return "\n".join(["| field | type | default | meaning |", "|---|---|---|---|", *self.rows(model, prefix)])

    def render(self) -> str:
        props = self.schema["properties"]
        parts = [HEADER]
        top = {"properties": {k: v for k, v in props.items() if self.model_of(v) is None and k not in (
            "workload", "faults")}, "required": self.schema.get("required", [])}
        parts += ["## Top level\n", self.table(top, "") + "\n"]
        for name, field in props.items():
            model = self.model_of(field)
            if model is None or name == "faults":
                continue
            parts += [f"## `{name}`\n", self.table(model, f"{name}.") + "\n"]
        parts += ["## `workload`\n", "One of two forms: a shipped workload (`name`) or any command (`command`).\n"]
        for option in props["workload"].get("oneOf", props["workload"].get("anyOf", [])):
            model = self.ref(option) or option
            parts += [f"### {model.get('title', 'workload')}\n", self.table(model, "workload.") + "\n"]
        parts += self.faults(props["faults"])
        parts += ["## Shared types\n", "`Bound`: `{max: number, min: number}`, either or both.\n"]
        return "\n".join(parts).rstrip("\n") + "\n"

    def faults(self, field: dict[str, Any]) -> list[str]:
        """The fields most kinds share, once; then each kind's own (and any shared field it words its own way)."""
        kinds = [self.ref(o) or o for o in field["items"].get("oneOf", field["items"].get("anyOf", []))]
        kinds = [k for k in kinds if k["properties"]["kind"].get("const") not in self.foreign]
        versions: dict[str, list[str]] = {}
        for kind in kinds:
            for name, spec in kind["properties"].items():
                versions.setdefault(name, []).append(json.dumps(spec, sort_keys=True))
        common = {name: max(set(v), key=v.count) for name, v in versions.items()
                  if name != "kind" and max(v.count(x) for x in v) * 2 > len(kinds)}
        shared = {"properties": {n: json.loads(spec) for n, spec in common.items()}}
        out = ["## `faults`\n", f"A list of at most {field.get('maxItems', '')} faults. Every item has `kind` and "
               "exactly one trigger (`at`, `at_step` or `on`). The fields most kinds take:\n",
               self.table(shared, "faults[].") + "\n"]
        for kind in kinds:
            name = kind["properties"]["kind"]["const"]
            own = {"properties": {n: f for n, f in kind["properties"].items()
                                  if n != "kind" and json.dumps(f, sort_keys=True) != common.get(n)},
                   "required": kind.get("required", [])}
            lacks = [f"`{n}`" for n in common if n not in kind["properties"]]
            text = f"### `{name}`\n\n"
            if lacks:
                text += f"Takes no {', '.join(lacks)}. "
            text += ("Its own fields:\n\n" + self.table(own, "")) if own["properties"] else "No fields of its own."
            out.append(text + "\n")
        return out


def _default(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if value == {} or value == []:
        return "{}" if value == {} else "[]"
    if value == "":
        return '""'
    return str(value)


def render() -> str:
    return Page(scenario_schema(), _foreign_names()).render()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date, write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python docs/gen_scenario_fields.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
