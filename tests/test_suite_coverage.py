"""Every shipped scenario is run for real by some integration test, or is listed here as validated only.

A new scenario file that no test runs fails here, in the fast tier, instead of silently shipping untested."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from chaos.loading import shipped_scenarios_dir
from tests.integration import (
    test_etcd_rendezvous,
    test_explore,
    test_flower_compare,
    test_flower_launcher,
    test_hang,
    test_memory_faults,
    test_native_crash,
    test_nodes_per_host,
    test_planted_bugs,
    test_ray_launcher,
    test_runtime_matrix,
    test_shipped_scenarios,
    test_slurm_runtime,
    test_storage_faults,
    test_store_faults,
    test_straggler,
    test_tf_launcher,
)

# Run by `chaos compare` in the README's example only; their verdicts are not documented, their files validate.
VALIDATED_ONLY = {"compare/centralized", "compare/elastic-tuned", "compare/elastic-torchrun-defaults", "compare/ray",
                  "compare/tf"}


def shipped_names() -> set[str]:
    root = shipped_scenarios_dir()
    return {str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml")}


def test_every_shipped_scenario_is_run_by_an_integration_test() -> None:
    run_for_real = (set(test_shipped_scenarios.EXPECTED_VERDICT) | set(test_runtime_matrix.EXPECTED_VERDICT)
                    | set(test_storage_faults.EXPECTED_VERDICT) | set(test_memory_faults.EXPECTED_VERDICT)
                    | set(test_nodes_per_host.EXPECTED_VERDICT)
                    | set(test_straggler.EXPECTED_VERDICT) | set(test_hang.EXPECTED_VERDICT)
                    | set(test_ray_launcher.EXPECTED_VERDICT)
                    | set(test_native_crash.EXPECTED_VERDICT) | set(test_tf_launcher.EXPECTED_VERDICT)
                        | set(test_flower_launcher.EXPECTED_VERDICT) | set(test_flower_compare.EXPECTED_VERDICT)
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


# What the gate (plain `python -m pytest`, CI) must keep of the real runs, whatever else moves to --full: a real
# run for every runtime, every fault family and every use (docs/testing.md, "The gate"). Node ids under tests/.
GATE_MUST_HOLD = {
    "local runtime, elastic job, node crash (process faults)":
        "integration/test_shipped_scenarios.py::test_quickstart_replaces_the_node_and_resumes_from_its_checkpoint",
    "centralized job restarted by the engine":
        "integration/test_shipped_scenarios.py::test_centralized_restart_by_the_engine",
    "netns runtime, network fault":
        "integration/test_runtime_matrix.py::test_impairment_slows_without_restart_and_heals_exactly[netns-delay]",
    "docker runtime, every built-in node and network fault once (the tour)":
        "integration/test_runtime_matrix.py::test_tour_kills_workers_by_signal_and_resumes_past_the_damaged_checkpoint"
        "[docker]",
    "a hung rank noticed by the process-group timeout":
        "integration/test_hang.py::test_a_short_process_group_timeout_notices_the_stuck_rank",
    "docker runtime, rendezvous store fault":
        "integration/test_process_faults_docker.py::"
        "test_documented_verdict_and_measured_outcome_in_containers[store/store-crash]",
    "the Slurm container cluster":
        "integration/test_slurm_runtime.py::test_slurm_runtime_node_crash_ctrl_c_and_cleanup",
    "storage fault through the FUSE layer":
        "integration/test_storage_faults.py::test_documented_verdict[storage/disk-full-during-save]",
    "memory fault (the kernel's OOM killer)":
        "integration/test_memory_faults.py::test_the_kernel_kills_a_worker_and_the_report_says_oom_killed",
    "a bring-your-own script": "integration/test_bring_your_own.py::test_print_only_script_is_measured",
    "a planted bug that must fail": "integration/test_planted_bugs.py::test_planted_bug_is_caught[stale-checkpoint]",
    "the same job without the bug passes":
        "integration/test_planted_bugs.py::test_same_scenario_with_the_correct_workload_passes[stale-checkpoint]",
    "reports from a real run directory": "integration/test_reports.py::test_all_formats_from_the_run_directory_alone",
    "Ctrl-C mid fault": "integration/test_teardown.py::test_signal_mid_fault_tears_everything_down[2]",
    "engine SIGKILL + chaos cleanup":
        "integration/test_teardown.py::test_cleanup_after_the_engine_is_sigkilled_mid_fault",
    "the pytest plug-in on real (small) runs":
        "test_pytest_plugin.py::test_scenario_files_are_collected_and_fail_with_the_verdict_table",
    "an HTML report opened in headless Chromium": "test_recorded_runs.py::test_html_report_in_headless_chromium",
}


# Both sessions in one interpreter, one after the other: the second reuses the first's imports (chaos, the test
# modules, matplotlib), ~2 CPU-s less than a process each. Each is a whole pytest session: its own configure,
# collection, deselection and unconfigure, as on the command line.
_BOTH_SESSIONS = """\
import sys, pytest
separator, paths = sys.argv[1], sys.argv[2:]
common = ["--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider"]
gate = pytest.main([*common, *paths])
print(separator, flush=True)
full = pytest.main([*common, "--full", *paths])
sys.exit(int(gate) or int(full))
"""
SEPARATOR = "=== the same collection with --full ==="


def collected_gate_and_full() -> tuple[set[str], set[str]]:
    """The node ids a plain pytest session (the gate) and a ``--full`` one would run (after the gate's
    deselection), from collect-only sessions in a subprocess: the same hooks as a real session, nothing run."""
    tests = Path(__file__).resolve().parent
    out = subprocess.run([sys.executable, "-c", _BOTH_SESSIONS, SEPARATOR, str(tests / "integration"),
                          str(tests / "test_pytest_plugin.py"), str(tests / "test_recorded_runs.py")],
                         capture_output=True, text=True, cwd=tests.parent, timeout=120)
    assert out.returncode == 0 and SEPARATOR in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    gate, full = out.stdout.split(SEPARATOR)
    return tuple({line.removeprefix("tests/") for line in text.splitlines() if "::" in line}  # type: ignore[return-value]
                 for text in (gate, full))


def test_the_gate_keeps_a_real_run_of_every_runtime_fault_family_and_use_and_full_runs_everything() -> None:
    gate, full = collected_gate_and_full()
    missing = {what: node for what, node in GATE_MUST_HOLD.items() if node not in gate}
    assert not missing, f"the gate lost what it must hold (tests/tiers.py): {missing}"
    assert gate < full, "--full must run every test of the gate and more"
    assert not [n for n in gate if n not in full]
