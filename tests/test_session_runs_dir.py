"""A test session's shared real runs (tests/runs.py) are removed when it passes and kept, their path printed, when
a test failed: a long-lived CI machine does not fill its disk (a full session leaves ~1.3 GB), and a failure still
leaves its runs to read (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

INNER_CONFTEST = """
from tests.conftest import pytest_configure, pytest_terminal_summary, pytest_unconfigure  # the hooks under test
"""

# Plug-ins the inner session does not use: each is imported at its start otherwise (issue 30: the fast tier's CPU).
UNUSED = ("-p", "no:benchmark", "-p", "no:hypothesispytest", "-p", "no:torch_chaos", "-p", "no:rerunfailures",
          "-p", "no:timeout")

INNER_TESTS = """
from pathlib import Path

from tests.runs import runs_root


def test_a_shared_run():
    (runs_root() / "run").mkdir()
    (Path(__file__).parent / "root.txt").write_text(str(runs_root()))


def test_{name}():
    assert {ok}
"""


@pytest.mark.parametrize("passes", [True, False])
def test_the_shared_runs_go_with_a_passing_session_and_stay_after_a_failure(pytester: pytest.Pytester,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            passes: bool) -> None:
    monkeypatch.delenv("TORCH_CHAOS_TEST_RUNS", raising=False)  # the inner session makes its own
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS.format(name="passes" if passes else "fails", ok=passes))
    out = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", *UNUSED, "-q")
    root = Path((pytester.path / "root.txt").read_text())
    text = str(out.stdout)
    assert root.name.startswith("torch-chaos-tests-"), root
    if passes:
        assert out.ret == 0 and not root.exists(), text
    else:
        assert out.ret == 1 and (root / "run").is_dir(), text
        assert f"shared kept (a test failed): {root}" in text, text
        (root / "run").rmdir()
        root.rmdir()


def test_the_fast_tier_alone_gets_three_workers_unless_n_is_given() -> None:
    from types import SimpleNamespace

    from tests.conftest import FAST_TIER_WORKERS, pytest_cmdline_main

    def workers(markexpr: str, *args: str) -> int:
        config = SimpleNamespace(option=SimpleNamespace(numprocesses=2), invocation_params=SimpleNamespace(args=args),
                                 getoption=lambda name, default=None: markexpr)
        pytest_cmdline_main(config)  # type: ignore[arg-type]
        return config.option.numprocesses  # type: ignore[no-any-return]

    assert workers("not integration", "-m", "not integration") == FAST_TIER_WORKERS == 3
    assert workers("not  integration") == 3
    assert workers("", "tests") == 2 and workers("integration") == 2  # the whole suite, the real clusters: two
    assert workers("not integration", "-n", "2") == workers("not integration", "-n2") == 2
    assert workers("not integration", "--numprocesses=2") == 2
