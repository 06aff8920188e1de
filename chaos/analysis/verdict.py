"""The checker protocol: a :class:`Checker` looks at a run's history and returns one :class:`Verdict`.

Modelled on Jepsen's ``checker``/``compose``: each question about a run (were the loaded checkpoints intact? did
each restart resume from the newest valid one?) is one checker, configured when it is made (the golden run's
summary, a pinned tolerance) and asked with the history alone. :class:`Compose` runs a named list of them. A
verdict has three states, and the third is what keeps a CI gate honest: ``ok`` is ``None`` when the check could
not be made, with the reason, so that no check passes on evidence it never saw. A checker that raises is such a
case too: its verdict says "not checked" with the traceback in ``details`` (never a crash of the whole analysis,
never ok).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos.history import Event

# result.json spells a verdict ``{"ok": ..., "why": ..., <details>}``: these two keys are the verdict's own.
_OWN_KEYS = ("ok", "why")


@dataclass(frozen=True)
class Verdict:
    """One check's answer: ``ok`` True (held), False (failed) or None (not checked, ``why`` says why not), a
    sentence that is the final word on it, and the measured details (the loads compared, the first divergent
    step ...), as result.json shows them next to ``ok`` and ``why``."""

    ok: bool | None
    why: str
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def not_checked(cls, why: str, **details: Any) -> Verdict:
        """A check that could not be made; ``why`` is the reason, said without the "not checked: " prefix."""
        return cls(None, f"not checked: {why}", details)

    def get(self, key: str, default: Any = None) -> Any:
        """One detail (``mode``, ``verdict``, ``first_divergent_step`` ...), or ``default`` when absent."""
        return self.details.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        """result.json's spelling (the only place a verdict becomes a dict)."""
        return {"ok": self.ok, "why": self.why, **self.details}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        """A verdict as result.json stored it."""
        ok = data.get("ok")
        return cls(ok if isinstance(ok, bool) else None, str(data.get("why", "")),
                   {k: v for k, v in data.items() if k not in _OWN_KEYS})


class Checker(Protocol):
    """One question about a run, answered from its history."""

    def check(self, history: list[Event]) -> Verdict: ...


def safe_check(checker: Checker, history: list[Event]) -> Verdict:
    """``checker.check(history)``, with an exception turned into "not checked" (its traceback in ``details``):
    a bug in one check must neither stop the others nor read as a pass."""
    try:
        return checker.check(history)
    except Exception as e:
        return Verdict.not_checked(f"the {type(checker).__name__} checker failed ({type(e).__name__}: {e})",
                                   error=traceback.format_exc())


def merge_ok(verdicts: Sequence[Verdict]) -> bool | None:
    """Jepsen's merge of validity: any failure fails; else anything not checked leaves the whole not checked."""
    oks = [v.ok for v in verdicts]
    if False in oks:
        return False
    if None in oks:
        return None
    return True


@dataclass(frozen=True)
class Compose:
    """Runs named checkers on one history; each answers on its own (:func:`safe_check`)."""

    checkers: Mapping[str, Checker]

    def check_each(self, history: list[Event]) -> dict[str, Verdict]:
        return {name: safe_check(checker, history) for name, checker in self.checkers.items()}

    def check(self, history: list[Event]) -> Verdict:
        """All of them as one verdict (its details hold each one's), so that a composition is a checker too."""
        each = self.check_each(history)
        ok = merge_ok(list(each.values()))
        failed = [name for name, v in each.items() if v.ok is not True]
        why = "every check held" if ok else f"{'failed' if ok is False else 'not checked'}: {', '.join(failed)}"
        return Verdict(ok, why, {"checks": each})


@dataclass(frozen=True)
class RequiresFaultsFired:
    """A checker that proves something only about a run in which the planned faults happened: when they did not
    (``not_fired`` says which), what would be ok is not checked (what it saw kept in ``seen``); a failure stays a
    failure (what it saw is wrong whatever fired)."""

    inner: Checker
    not_fired: str | None

    def check(self, history: list[Event]) -> Verdict:
        verdict = safe_check(self.inner, history)
        if self.not_fired is None or verdict.ok is not True:
            return verdict
        details = {**verdict.details, "seen": verdict.why}
        if "mode" in details:
            details["mode"] = "not_checked"
        return Verdict.not_checked(self.not_fired, **details)
