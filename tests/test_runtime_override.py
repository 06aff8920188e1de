"""One scenario, any runtime: ``--runtime`` overrides ``cluster.runtime`` before validation, everywhere a scenario is
read (run, --dry-run, validate, explore, compare), and the run's resolved scenario shows where it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.loading import ScenarioInvalid, load_scenario, parse_scenario, resolve_scenario_path

QUICKSTART = resolve_scenario_path("quickstart")


def test_override_replaces_the_files_runtime() -> None:
    assert load_scenario(QUICKSTART).cluster.runtime == "local"
    scenario = load_scenario(QUICKSTART, runtime="docker")
    assert scenario.cluster.runtime == "docker"
    # nothing else changes: the same faults, workload and expectations
    local = load_scenario(QUICKSTART).model_dump()
    local["cluster"]["runtime"] = "docker"
    assert scenario.model_dump() == local


def test_override_of_a_file_without_a_cluster_runtime() -> None:
    text = "name: x\ncluster: {nodes: 2, min_nodes: 2}\nworkload: {name: ddp-mlp}\n"
    assert parse_scenario(text).cluster.runtime == "local"
    assert parse_scenario(text, runtime="netns").cluster.runtime == "netns"


def test_override_is_validated_like_the_file() -> None:
    """A network fault needs a network per node: the override is judged as if the file said it."""
    network = resolve_scenario_path("network/delay")
    assert load_scenario(network, runtime="docker").cluster.runtime == "docker"
    with pytest.raises(ScenarioInvalid) as exc:
        load_scenario(network, runtime="local")
    assert "faults[0].kind" in str(exc.value) and "docker or netns" in str(exc.value)
    with pytest.raises(ScenarioInvalid) as exc:
        load_scenario(QUICKSTART, runtime="nowhere")
    [error] = exc.value.errors
    assert error.field == "cluster.runtime" and "--runtime nowhere" in error.message


def test_cli_dry_run_and_validate_take_the_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "quickstart", "--runtime", "netns", "--dry-run", "--json", "--out", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["runtime"] == "netns"
    assert main(["validate", "--no-machine", "quickstart", "--runtime", "docker"]) == 0
    assert main(["validate", "--no-machine", "network/isolate", "--runtime", "local"]) == 2
    assert "faults[0].kind" in capsys.readouterr().err

