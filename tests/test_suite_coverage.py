"""Every shipped scenario is run for real by some integration test, or is listed here as validated only.

A new scenario file that no test runs fails here, in the fast tier, instead of silently shipping untested."""

from __future__ import annotations

import ast
from pathlib import Path

from chaos.loading import shipped_scenarios_dir
from tests.integration import (
    test_etcd_rendezvous,
    test_explore,
    test_hang,
    test_memory_faults,
    test_planted_bugs,
    test_runtime_matrix,
    test_shipped_scenarios,
    test_slurm_runtime,
    test_storage_faults,
    test_store_faults,
    test_straggler,
)

# Run by `chaos compare` in the README's example only; their verdicts are not documented, their files validate.
VALIDATED_ONLY = {"compare/centralized", "compare/elastic-tuned", "compare/elastic-torchrun-defaults"}


def shipped_names() -> set[str]:
    root = shipped_scenarios_dir()
    return {str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml")}


def test_every_shipped_scenario_is_run_by_an_integration_test() -> None:
    run_for_real = (set(test_shipped_scenarios.EXPECTED_VERDICT) | set(test_runtime_matrix.EXPECTED_VERDICT)
                    | set(test_storage_faults.EXPECTED_VERDICT) | set(test_memory_faults.EXPECTED_VERDICT)
                    | set(test_straggler.EXPECTED_VERDICT) | set(test_hang.EXPECTED_VERDICT)
                    | set(test_store_faults.EXPECTED_VERDICT) | set(test_slurm_runtime.EXPECTED_VERDICT)
                    | {name for name, _ in test_etcd_rendezvous.EXPECTED_VERDICT}
                    | {f"bugs/{bug}" for bug in test_planted_bugs.EXPECTED}
                    | {str(test_explore.SCENARIO.relative_to(shipped_scenarios_dir()).with_suffix(""))})
    assert run_for_real <= shipped_names(), run_for_real - shipped_names()
    assert shipped_names() - run_for_real == VALIDATED_ONLY


def test_the_matrix_runs_every_runtime_the_network_scenarios_need() -> None:
    assert set(test_runtime_matrix.RUNTIMES) == {"netns", "docker"}
    assert {n for n in shipped_names() if n.startswith("network/")} <= set(test_runtime_matrix.EXPECTED_VERDICT)


def test_every_integration_module_is_marked_integration_as_a_whole() -> None:
    """tests/conftest.py skips tests/integration under ``-m "not integration"`` without importing it: that is only
    right while every test module there carries the mark in its ``pytestmark`` (a fast test there would be lost)."""
    modules = sorted((Path(__file__).parent / "integration").glob("test_*.py"))
    assert len(modules) > 10
    for module in modules:
        marked = False
        for node in ast.parse(module.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                marked = "pytest.mark.integration" in ast.unparse(node.value)
        assert marked, f"{module.name}: pytestmark must include pytest.mark.integration"
