"""The bring-your-own example scenarios (examples/byo/*.yaml) as the tests run them.

The files name their scripts relative to themselves (``per_step_ddp.py``); loading a file anchors them there
(chaos/loading.py). Tests that edit the text before parsing it anchor the script the same way here.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BYO_DIR = REPO / "examples" / "byo"


def byo_names() -> list[str]:
    return sorted(p.stem for p in BYO_DIR.glob("*.yaml"))


def byo_text(name: str) -> str:
    """The scenario text with its script path made absolute, as loading the file would make it."""
    text = (BYO_DIR / f"{name}.yaml").read_text()
    for script in ("per_step_ddp.py", "epoch_snapshot_ddp.py", "dcp_sharded_ddp.py", "tf_mwms_plain.py",
                   "ray_train_plain.py"):
        text = text.replace(f"python, {script}", f"python, {BYO_DIR / script}")
    return text
