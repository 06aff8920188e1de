"""A misspelt name gets the name meant ("did you mean"), `--version` says what is installed, and `chaos list` is a
line per scenario (issue 35: a mistyped kind or scenario name got no suggestion; the list was 556 lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cli import main
from chaos.loading import shipped_scenarios_dir
from chaos.suggest import closest, fields_at

MISSPELT = """\
name: misspelt
cluster: {mode: elastic, nodes: 2, nodez: 3, runtime: locl}
workload: {name: ddp-mlp, args: {steps: 20}}
faults:
  - {kind: crsh, target: 1, at_step: 10}
"""


def test_a_misspelt_kind_field_and_runtime_are_each_told_the_name_meant(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "misspelt.yaml"
    scenario.write_text(MISSPELT)
    assert main(["validate", "--no-machine", str(scenario)]) == 2
    errors = capsys.readouterr().err
    assert "cluster.nodez: unknown field: did you mean 'nodes'?" in errors, errors
    assert "got 'crsh' (did you mean 'crash'?)" in errors, errors
    assert "got 'locl' (did you mean 'local'?)" in errors, errors


def test_a_field_of_another_form_is_not_suggested_as_itself(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`args` is a shipped workload's field: under a `command:` workload it is refused as such, not met with "did you
    mean 'args'?" (the very name given)."""
    scenario = tmp_path / "command-args.yaml"
    scenario.write_text("name: s\nworkload:\n  command: [python, train.py]\n  progress_regex: 'step (?P<step>\\d+)'\n"
                        "  args: {steps: 10}\n")
    assert main(["validate", "--no-machine", str(scenario)]) == 2
    errors = capsys.readouterr().err
    assert "workload.args: 'args' belongs to another form of this section" in errors, errors
    assert "did you mean 'args'" not in errors


@pytest.mark.parametrize(("typed", "meant"), [("quikstart", "'quickstart'"), ("network/dely", "'network/delay'"),
                                              ("stale-checkpiont", "'bugs/stale-checkpoint'")])
def test_a_misspelt_scenario_name_is_told_the_shipped_names_near_it(typed: str, meant: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", typed, "--dry-run"]) == 2
    errors = capsys.readouterr().err
    assert f"no shipped scenario of this name: did you mean {meant}" in errors, errors


def test_a_missing_file_far_from_every_name_is_still_a_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "no/such/zzzz", "--dry-run"]) == 2
    assert "cannot read file" in capsys.readouterr().err


def test_suggestions_only_when_near() -> None:
    assert closest("crsh", ["crash", "freeze"]) == ["crash"]
    assert closest("xyzzy", ["crash", "freeze"]) == []
    assert {"nodes", "min_nodes", "runtime"} <= fields_at(("cluster",))


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("torch-chaos ")


def test_list_is_a_line_per_scenario_with_its_expected_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shipped = list(shipped_scenarios_dir().rglob("*.yaml"))
    rows = [line for line in lines if line.startswith("  ")]
    assert len(rows) == len(shipped) and len(lines) <= len(shipped) + 15, lines
    by_name = {row.split()[0]: row.split()[2] for row in rows}
    assert by_name["quickstart"] == "pass" and by_name["bugs/stale-checkpoint"] == "fail", by_name
    assert by_name["bugs/reshuffle-on-resume"] == "fail"  # "Expected\n  verdict: fail" across a line break
    assert main(["list", "--long"]) == 0
    assert "shipped scenarios" in capsys.readouterr().out
