"""The pytest plugin, exercised through pytester: real (small) chaos runs.

The inner pytest sessions run in this process (``runpytest_inprocess``: no new interpreter, no re-import of pytest
and its plugins, ~3 s saved per session here) except where the point is a separate process tree (xdist)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

BROKEN = Path(__file__).resolve().parent / "broken"
STEPS = 10  # print_steps.py prints one step every 50 ms
# pytest-benchmark, loaded by the inner sessions too, warns that the outer session's xdist disables it
QUIET = ("-p", "no:benchmark")
# The stuck job prints 20 steps (~1 s) then hangs: a 1 s stall is enough to call it hung (the good jobs keep 2 s)
STUCK = "{deadline_s: 60, stall_timeout_s: 1}"

pytestmark = pytest.mark.usefixtures("no_leftovers")


def scenario(name: str, script: str, limits: str = "{deadline_s: 60, stall_timeout_s: 2}") -> str:
    return f"""\
name: {name}
cluster: {{mode: centralized, nodes: 1}}
workload:
  command: [python, {BROKEN / script}, "{STEPS}"]
  progress_regex: 'step (?P<step>\\d+) \\|? ?loss (?P<loss>[0-9.]+)'
checks: {{golden: false}}
limits: {limits}
"""


def test_fixture_runs_a_scenario_and_asserts_on_the_result(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", ok=scenario("ok", "print_steps.py"))
    pytester.makepyfile(test_job=f"""
        def test_job(chaos):
            result = chaos.run("ok.yaml")
            assert result.verdict == "pass"
            assert result.steps_completed == {STEPS}
            assert result.run_dir.is_dir()
            assert set(result.checkpoint) == {{"digests_ok", "resumed_from_newest_valid", "matches_golden",
                                               "exactly_once", "one_writer_per_file", "next_resume_intact",
                                               "replay_consistent"}}
    """)
    out = pytester.runpytest_inprocess(*QUIET, "-q")
    out.assert_outcomes(passed=1)


def test_scenario_files_are_collected_and_fail_with_the_verdict_table(pytester: pytest.Pytester) -> None:
    pytester.makefile(".chaos.yaml", good=scenario("good-job", "print_steps.py"),
                      stuck=scenario("stuck-job", "hang.py", STUCK))
    junit = pytester.path / "junit.xml"
    out = pytester.runpytest_inprocess(*QUIET, "--chaos-scenarios", f"--junitxml={junit}", "-q")
    out.assert_outcomes(passed=1, failed=1)
    out.stdout.fnmatch_lines(["*verdict hung: no step for 1s*", "*run directory:*", "expect completes*NOT MET*"])
    assert not [line for line in out.stdout.lines if set(line) & set("┃━│─┏┗")], "box drawing in a CI message"
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert set(cases) == {"good-job", "stuck-job"}
    props = {p.get("name"): p.get("value") for p in cases["stuck-job"].iter("property")}
    assert Path(props["chaos_run_dir"]).is_dir()
    assert cases["stuck-job"].find("failure") is not None
    # every measured figure and verdict is a JUnit property a CI can trend
    good = {p.get("name"): p.get("value") for p in cases["good-job"].iter("property")}
    assert good["chaos_verdict"] == "pass" and props["chaos_verdict"] == "hung"
    assert float(good["chaos_duration_s"]) > 0 and int(good["chaos_steps_completed"]) == STEPS
    assert {k for k in good if k.startswith("chaos_checkpoint_")}, good


def test_without_the_option_nothing_is_collected(pytester: pytest.Pytester) -> None:
    pytester.makefile(".chaos.yaml", good=scenario("good-job", "print_steps.py"))
    out = pytester.runpytest_inprocess(*QUIET, "-q")
    assert out.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_k_and_x_select_and_stop(pytester: pytest.Pytester) -> None:
    pytester.makefile(".chaos.yaml", a_stuck=scenario("a-stuck", "hang.py", STUCK),
                      b_good=scenario("b-good", "print_steps.py"))
    out = pytester.runpytest_inprocess(*QUIET, "--chaos-scenarios", "-k", "good", "-q")
    out.assert_outcomes(passed=1, deselected=1)
    out = pytester.runpytest_inprocess(*QUIET, "--chaos-scenarios", "-x", "-q")
    out.assert_outcomes(failed=1)


def test_invalid_scenario_file_is_a_collection_error_with_the_line(pytester: pytest.Pytester) -> None:
    pytester.makefile(".chaos.yaml", bad="name: bad\nworkload: {name: ddp-mlp}\nfautls: []\n")
    out = pytester.runpytest_inprocess(*QUIET, "--chaos-scenarios", "-q")
    assert out.ret == pytest.ExitCode.INTERRUPTED
    out.stdout.fnmatch_lines(["*bad.chaos.yaml:3: fautls: unknown field*"])
    assert "Traceback" not in out.stdout.str() and "pytest_plugin.py" not in out.stdout.str()  # the errors alone


@pytest.mark.integration  # three new interpreters that each start pytest (~9 s): the gate, not the fast tier
def test_xdist_workers_do_not_clash(pytester: pytest.Pytester) -> None:
    """Three processes start pytest here (the session and its two workers): plug-ins the inner session does not
    use are not loaded (each costs its import in each of them)."""
    pytest.importorskip("xdist")
    pytester.makefile(".chaos.yaml", **{f"job{i}": scenario(f"job-{i}", "print_steps.py") for i in range(3)})
    unused = ("-p", "no:hypothesispytest", "-p", "no:cacheprovider")
    out = pytester.runpytest_subprocess(*QUIET, *unused, "--chaos-scenarios", "-n", "2", "-q")
    out.assert_outcomes(passed=3)
