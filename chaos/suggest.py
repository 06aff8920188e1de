""""Did you mean ...?" for a misspelt name: a fault kind, a runtime, a field, a shipped scenario.

Why: the error for ``kind: crsh`` listed all 21 kinds and left the reader to find ``crash`` among them, and a
misspelt scenario name (``chaos run quikstart``) was "cannot read file": the closest names are what the user meant
nine times in ten. :mod:`difflib`'s ratio, the standard library's, is enough for names of a few words.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from chaos import scenario as scenario_model

if TYPE_CHECKING:
    pass


def closest(word: str, choices: Iterable[str], n: int = 1) -> list[str]:
    """The ``n`` choices nearest ``word`` (a ratio of 0.6 or more; case and ``-``/``_`` ignored), best first."""
    def norm(s: str) -> str:
        return s.lower().replace("-", "_")

    by_norm: dict[str, str] = {}
    for choice in choices:
        by_norm.setdefault(norm(choice), choice)
    return [by_norm[c] for c in difflib.get_close_matches(norm(word), list(by_norm), n=n, cutoff=0.6)]


def did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """`` (did you mean 'crash'?)``, or "" when nothing is near (or ``word`` is not a string)."""
    if not isinstance(word, str) or not word:
        return ""
    near = closest(word, choices)
    return f" (did you mean {near[0]!r}?)" if near else ""


@functools.cache
def _schema() -> dict[str, Any]:
    return scenario_model.model().model_json_schema()


def fields_at(loc: tuple[Any, ...]) -> set[str]:
    """The field names the scenario's JSON Schema allows in the mapping at ``loc`` (a pydantic error location,
    union tags included), across every branch of a union: the candidates for a misspelt key there."""
    schema = _schema()
    defs = schema.get("$defs", {})

    def resolve(node: dict[str, Any]) -> list[dict[str, Any]]:
        """The object schemas a node can be (through $ref, anyOf/oneOf/allOf)."""
        seen, todo, found = 0, [node], []
        while todo and seen < 200:
            seen += 1
            n = todo.pop()
            if "$ref" in n:
                todo.append(defs.get(n["$ref"].rsplit("/", 1)[-1], {}))
            for key in ("anyOf", "oneOf", "allOf"):
                todo += n.get(key, [])
            if "properties" in n or "additionalProperties" in n or "items" in n:
                found.append(n)
        return found

    here = resolve(schema)
    for part in loc:
        nxt: list[dict[str, Any]] = []
        for n in here:
            if isinstance(part, int):
                if isinstance(n.get("items"), dict):
                    nxt += resolve(n["items"])
            elif part in n.get("properties", {}):
                nxt += resolve(n["properties"][part])
            elif isinstance(n.get("additionalProperties"), dict):
                nxt += resolve(n["additionalProperties"])
        here = nxt or here if isinstance(part, str) and part[:1].isupper() and not part.isupper() else nxt
    return {name for n in here for name in n.get("properties", {})}
