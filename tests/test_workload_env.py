"""``workload.env``: variables for every worker of a ``command:`` workload, under what torch-chaos sets; and
``[env, NAME=value, python, ...]`` judged the same by validate and run, pointing to ``workload.env``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chaos.admission import admit
from chaos.cli import main
from chaos.loading import ScenarioInvalid
from chaos.plan import build_plan

SCRIPT = Path(__file__).resolve().parent / "byo" / "plain_ddp.py"


def write(tmp_path: Path, workload: str, mode: str = "elastic", nodes: int = 2) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\ncluster: {{mode: {mode}, nodes: {nodes}}}\nworkload:\n{workload}"
                    "  progress_regex: 'step=(?P<step>\\d+)'\n")
    return path


def test_env_reaches_every_node_under_what_torch_chaos_sets(tmp_path: Path) -> None:
    scenario = admit(write(tmp_path, f"  command: [python, {SCRIPT}]\n  env: {{SEED: 3, MY_FLAG: 'on'}}\n"),
                     machine=False)
    plan = build_plan(scenario, "r", tmp_path / "run")
    for node in plan.nodes:
        assert node.env["SEED"] == "3" and node.env["MY_FLAG"] == "on"
        assert node.env["CHAOS_NODE"] == node.name  # torch-chaos's own variables are still there


@pytest.mark.parametrize(("env", "said"), [
    ("{OMP_NUM_THREADS: 4}", "cluster.threads_per_proc"),
    ("{CHAOS_NODE: x}", "set by torch-chaos"),
    ("{'BAD NAME': x}", "not an environment variable name"),
])
def test_env_refuses_what_torch_chaos_owns(tmp_path: Path, env: str, said: str) -> None:
    with pytest.raises(ScenarioInvalid) as exc:
        admit(write(tmp_path, f"  command: [python, {SCRIPT}]\n  env: {env}\n"), machine=False)
    assert said in str(exc.value)


def test_env_as_a_command_is_judged_alike_by_validate_and_run(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    elastic = write(tmp_path, f"  command: [env, X=1, python, {SCRIPT}]\n")
    assert main(["validate", "--no-machine", str(elastic)]) == 2
    said = capsys.readouterr()
    assert "workload.env" in said.err + said.out and "X: '1'" in said.err + said.out
    assert main(["run", "--dry-run", str(elastic)]) == 2
    # centralized: env starts the script itself, which both accept (and judge: a missing script is refused)
    centralized = write(tmp_path, f"  command: [env, X=1, {sys.executable}, {SCRIPT}]\n", "centralized", 1)
    assert main(["validate", "--no-machine", str(centralized)]) == 0
    assert main(["run", "--dry-run", str(centralized)]) == 0
    missing = write(tmp_path, f"  command: [env, X=1, {sys.executable}, /nonexistent/train.py]\n", "centralized", 1)
    assert main(["validate", "--no-machine", str(missing)]) == 2
    assert main(["run", "--dry-run", str(missing)]) == 2


def test_a_centralized_multi_process_job_gives_torchrun_the_script(tmp_path: Path) -> None:
    """`[python, train.py]` under `torchrun --standalone`: torchrun must get train.py, not a file named python."""
    path = tmp_path / "c.yaml"
    path.write_text(f"name: c\ncluster: {{mode: centralized, nodes: 1, procs_per_node: 3}}\nworkload:\n"
                    f"  command: [python, {SCRIPT}, --steps, 5]\n  progress_regex: 'step=(?P<step>\\d+)'\n")
    [node] = build_plan(admit(path, machine=False), "r", tmp_path / "run").nodes
    assert node.argv[node.argv.index("--nproc-per-node=3") + 1:] == [str(SCRIPT), "--steps", "5"]
