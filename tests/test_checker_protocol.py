"""The checker protocol (chaos.analysis.verdict): a checker that raises is "not checked" with its traceback, never a
crash and never ok; a composition merges like Jepsen's (a failure fails, anything unchecked leaves it unchecked)."""

from __future__ import annotations

from chaos.analysis.checkpoints import checkpoint_checkers
from chaos.analysis.verdict import Compose, RequiresFaultsFired, Verdict, merge_ok
from chaos.history import Event


class Holds:
    def check(self, history: list[Event]) -> Verdict:
        return Verdict(True, f"saw {len(history)} event(s)", {"mode": "bitwise"})


class Fails:
    def check(self, history: list[Event]) -> Verdict:
        return Verdict(False, "a sample consumed twice")


class Raises:
    def check(self, history: list[Event]) -> Verdict:
        raise KeyError("sha256")


def test_a_checker_that_raises_is_not_checked_with_its_traceback() -> None:
    each = Compose({"holds": Holds(), "raises": Raises()}).check_each([])
    assert each["holds"].ok is True
    broken = each["raises"]
    assert broken.ok is None
    assert broken.why == "not checked: the Raises checker failed (KeyError: 'sha256')"
    assert "Traceback" in broken.details["error"] and "raise KeyError" in broken.details["error"]


def test_a_composition_fails_on_any_failure_and_is_unchecked_on_any_unchecked() -> None:
    assert merge_ok([Verdict(True, ""), Verdict(None, ""), Verdict(False, "")]) is False
    assert merge_ok([Verdict(True, ""), Verdict(None, "")]) is None
    assert merge_ok([Verdict(True, ""), Verdict(True, "")]) is True
    whole = Compose({"holds": Holds(), "raises": Raises()}).check([])
    assert whole.ok is None and whole.why == "not checked: raises"
    assert Compose({"holds": Holds(), "fails": Fails()}).check([]).why == "failed: fails"
    assert Compose({"holds": Holds()}).check([]).ok is True


def test_a_pass_without_the_planned_fault_is_not_checked_and_a_failure_stays() -> None:
    unproven = RequiresFaultsFired(Holds(), "the planned fault never fired (#0 crash on node1: not_reached)")
    v = unproven.check([])
    assert v.ok is None and v.why == "not checked: the planned fault never fired (#0 crash on node1: not_reached)"
    assert v.details == {"mode": "not_checked", "seen": "saw 0 event(s)"}
    assert RequiresFaultsFired(Fails(), "never fired").check([]).ok is False
    assert RequiresFaultsFired(Holds(), None).check([]).ok is True


def test_a_verdict_round_trips_through_result_json_spelling() -> None:
    v = Verdict(False, "loaded_corrupt: ...", {"verdict": "loaded_corrupt", "loads": [{"step": 3}]})
    assert v.to_dict() == {"ok": False, "why": "loaded_corrupt: ...", "verdict": "loaded_corrupt",
                           "loads": [{"step": 3}]}
    assert Verdict.from_dict(v.to_dict()) == v


def test_the_checkpoint_checkers_say_their_own_final_words() -> None:
    """The reasons build_result used to write over a verdict afterwards are the checker's own."""
    asked = checkpoint_checkers(None, None, no_golden_why="the golden run did not finish").check_each([])
    assert asked["matches_golden"].why == "not checked: the golden run did not finish"
    off = checkpoint_checkers(None, None).check_each([])
    assert off["matches_golden"].why == "not checked: no golden run (checks.golden is off)"
    nothing = checkpoint_checkers(None, None, no_steps_why="the run recorded no step to compare (see why)")
    assert nothing.check_each([])["matches_golden"].why == "not checked: the run recorded no step to compare (see why)"
    assert list(off) == ["digests_ok", "resumed_from_newest_valid", "matches_golden", "exactly_once",
                         "one_writer_per_file", "next_resume_intact", "replay_consistent"]
    assert all(v.ok is not True for v in off.values())  # an empty history proves nothing
