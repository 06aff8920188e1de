"""The bring-your-own examples (examples/byo) stay valid scenarios for the scripts beside them.

They are what a new user copies, so a schema change that breaks one, a renamed ``--bug`` or a progress regex that
no longer matches what the script prints must fail here, in the fast tier, not in a user's first run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from chaos.admission import admit, judge_scenario
from chaos.loading import ScenarioInvalid, parse_scenario
from chaos.scenario import CommandWorkload
from tests.byo_scenarios import BYO_DIR, byo_names, byo_text

# a progress line each script prints (copied from a real run) and the step the scenario's regex must read from it
SCRIPTS = {"per_step_ddp.py": ("step=170 loss=0.1920733899", "170"),
           "epoch_snapshot_ddp.py": ("[GPU0] Epoch 17 | Batchsize: 32 | Steps: 8", "17"),
           "dcp_sharded_ddp.py": ('{"it": 100, "loss": 0.0123456789}', "100"),
           "tf_mwms_plain.py": ("step=110 loss=0.9843093752861023", "110"),
           # as the head's log shows it: Ray forwards the worker's line with the actor's prefix (and colour codes)
           "ray_train_plain.py": ("\x1b[36m(RayTrainWorker pid=25184)\x1b[0m epoch=12 loss=0.4992710948", "12")}


def declared_bugs(script: Path) -> tuple[str, ...]:
    """The script's BUGS tuple, read without importing it (that would import torch)."""
    for node in ast.parse(script.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "BUGS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"{script} declares no BUGS")


def test_there_are_examples_of_both_styles() -> None:
    names = byo_names()
    assert any(n.startswith("per-step-") for n in names) and any(n.startswith("epoch-") for n in names)


@pytest.mark.parametrize("name", byo_names())
def test_each_example_is_a_valid_scenario_for_its_script(name: str) -> None:
    text = byo_text(name)
    scenario = parse_scenario(text, f"{name}.yaml")
    assert judge_scenario(scenario, f"{name}.yaml", text, machine=False) == []
    w = scenario.workload
    assert isinstance(w, CommandWorkload) and w.checkpoint_dir == "ckpt"
    script = Path(w.command[1])
    assert script.parent == BYO_DIR and script.name in SCRIPTS, script
    if "--bug" in w.command:
        assert w.command[w.command.index("--bug") + 1] in declared_bugs(script)
    line, step = SCRIPTS[script.name]
    m = re.search(w.progress_regex, line)
    assert m is not None and m.group("step") == step


def test_every_planted_bug_has_an_example() -> None:
    used = {m.group(1) for n in byo_names() for m in [re.search(r"--bug, ([\w-]+)", byo_text(n))] if m}
    assert used == {bug for script in SCRIPTS for bug in declared_bugs(BYO_DIR / script)}


def test_the_file_as_shipped_finds_its_script_next_to_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # from anywhere: the script is found next to the scenario file, not in the cwd
    scenario = admit(BYO_DIR / "per-step-node-crash.yaml", machine=False)
    assert scenario.workload.command[1] == str(BYO_DIR / "per_step_ddp.py")
    # a script that is nowhere near the file is still refused, with the way out
    moved = tmp_path / "elsewhere.yaml"
    moved.write_text((BYO_DIR / "per-step-node-crash.yaml").read_text())
    with pytest.raises(ScenarioInvalid) as exc:
        admit(moved, machine=False)
    assert "is a relative path" in str(exc.value) and "relative to the scenario file" in str(exc.value)
