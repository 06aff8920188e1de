"""The example CI workflow (docs/github-actions-chaos.yml) works when copied: its steps, run in a fresh virtual
environment against a small project of a user's, install torch-chaos the way a user can (a built wheel standing in
for TORCH_CHAOS_SPEC), run the project's scenarios through pytest, write every report, and leave the files its
upload step names.

Before (issue 35): the workflow ran ``pip install torch-chaos``, which no index has, and its upload glob missed
the reports pytest-xdist puts under ``chaos-runs/gw0/``. A fresh environment costs minutes (torch and the
package's dependencies are installed into it), so this runs with ``--full``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.tiers import FULL

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "docs" / "github-actions-chaos.yml"
TORCH_FROM_THE_CPU_INDEX = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
# What stands in for the CPU index line here: the same CPU build, from this machine's local disk (docs: README).
TORCH_HERE = "pip install torch==2.13.0"

SCENARIO = """\
name: {name}
cluster: {{mode: centralized, nodes: 1}}
workload:
  command: [python, ../../train.py, "{steps}"]  # relative to this file
  progress_regex: 'step (?P<step>\\d+) \\| loss (?P<loss>[0-9.]+)'
checks: {{golden: false}}
limits: {{deadline_s: 60, stall_timeout_s: {stall}}}
"""
TRAIN = """\
import sys, time
steps = int(sys.argv[1])
for step in range(1, abs(steps) + 1):
    print(f"step {step} | loss {1.0 / step:.4f}", flush=True)
    time.sleep(0.05)
if steps < 0:  # a job that stops making progress: a failing test, not one that did not happen
    time.sleep(3600)
"""


def steps() -> list[dict[str, str]]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    return [s for s in workflow["jobs"]["chaos"]["steps"] if "run" in s]


def test_the_workflow_installs_torch_chaos_from_where_the_user_says_not_from_an_index_that_has_none() -> None:
    install = next(s["run"] for s in steps() if s["name"].startswith("Install"))
    assert '"$TORCH_CHAOS_SPEC"' in install and "pip install torch-chaos" not in install
    assert "TORCH_CHAOS_SPEC" in yaml.safe_load(WORKFLOW.read_text())["env"]


@FULL
def test_the_workflows_steps_run_in_a_fresh_environment(tmp_path: Path) -> None:
    wheels, source = tmp_path / "wheels", tmp_path / "torch-chaos"
    # built from a copy: setuptools writes build/ and *.egg-info beside the sources, never in this checkout
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "build", "runs", "generated", "*.egg-info",
                                                               "__pycache__", ".*_cache", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(source)], check=True, timeout=300)
    [wheel] = wheels.glob("torch_chaos-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    project = tmp_path / "my-training"
    (project / "tests" / "chaos").mkdir(parents=True)
    (project / "train.py").write_text(TRAIN)
    (project / "pyproject.toml").write_text('[project]\nname = "my-training"\nversion = "0"\n'
                                           '[tool.setuptools]\npy-modules = ["train"]\n')
    (project / "tests" / "chaos" / "good.chaos.yaml").write_text(SCENARIO.format(name="good", steps=10, stall=5))
    (project / "tests" / "chaos" / "stuck.chaos.yaml").write_text(SCENARIO.format(name="stuck", steps=-5, stall=1))
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv),
           "TORCH_CHAOS_SPEC": str(wheel), "CI": "true", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for name in ("PYTHONPATH", "TORCH_CHAOS_GOLDEN_CACHE", "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    outcomes = {}
    for step in steps():
        script = step["run"].replace(TORCH_FROM_THE_CPU_INDEX, TORCH_HERE)
        if step["name"].startswith("Chaos scenarios"):
            script = script.replace("pytest ", "pytest -n 2 -p no:cacheprovider ", 1)  # as a team with xdist
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=project, env=env, capture_output=True,
                              text=True, timeout=900)
        outcomes[step["name"]] = done
        if not step["name"].startswith("Chaos scenarios"):  # that one fails: the stuck job is a failing test
            assert done.returncode == 0, (step["name"], done.stdout[-3000:], done.stderr[-3000:])
    ran = outcomes[next(n for n in outcomes if n.startswith("Chaos scenarios"))]
    assert ran.returncode == 1, (ran.stdout[-3000:], ran.stderr[-3000:])
    installed = subprocess.run([str(venv / "bin" / "python"), "-c", "import chaos; print(chaos.__file__)"],
                               capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout
    assert str(venv) in installed, installed  # the wheel in the fresh environment ran, not this checkout
    # what the upload step names exists, wherever pytest-xdist put the runs
    upload = next(s for s in yaml.safe_load(WORKFLOW.read_text())["jobs"]["chaos"]["steps"]
                  if "upload-artifact" in str(s.get("uses")))["with"]["path"].split()
    found = {pattern: sorted(project.glob(pattern)) for pattern in upload}
    assert all(found.values()), found
    assert len(found["chaos-runs/**/report.html"]) == 2, found
    cases = {c.get("name"): c for c in ET.parse(project / "chaos-junit.xml").getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["good"].iter("property")}
    assert props["chaos_verdict"] == "pass" and float(props["chaos_duration_s"]) > 0, (props, ran.stdout[-3000:])
    assert cases["stuck"].find("failure") is not None


pytestmark = pytest.mark.usefixtures("no_leftovers")
