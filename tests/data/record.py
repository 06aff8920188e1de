"""Re-record the real runs in tests/data/histories/ (run this when the history format or the workload changes).

    PYTHONPATH=. flock /tmp/torch-chaos-integration.lock python -m tests.data.record [NAME ...]

Each entry is a shipped scenario run for real (the netns one needs root), shortened as the integration tests run
it; the run directory is kept without checkpoints and acks, its history gzipped. The fast tier then tests analysis,
reports and compare on these histories; the integration tier still runs every scenario for real.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from pathlib import Path

from chaos.engine import Engine
from tests.data.recorded import RECORDED
from tests.runs import SHORT_STEPS, shipped

# name -> (shipped scenario, runtime override, steps override, why it is recorded)
RECORDINGS: dict[str, tuple[str, str | None, int | None, str]] = {
    "centralized-crash": ("centralized-crash", None, SHORT_STEPS,
                          "pass; one process restarted by the engine; the reports in every format; compare"),
    "quickstart": ("quickstart", None, SHORT_STEPS,
                   "pass; elastic, a node replaced (world size 2 then 3: within_tolerance); compare"),
    "elastic-rendezvous-host-crash": ("elastic-rendezvous-host-crash", None, SHORT_STEPS,
                                      "fail: the job dies with its store (completes: false)"),
    "corrupt-latest-checkpoint": ("corrupt-latest-checkpoint", None, SHORT_STEPS,
                                  "pass; a non-disruptive fault beside a crash; a rejected checkpoint"),
    "non-atomic-save": ("bugs/non-atomic-save", None, None,
                        "restart_loop; checkpoint digests_ok = loaded_corrupt"),
    "network-delay-netns": ("network/delay", "netns", None,
                            "pass; an impairment: slowdown without restart, healed and restored"),
    # tests/noise_scenarios.py (a stock DDP script, not shipped): "plain-ddp:<bug>"
    "plain-ddp-crash": ("plain-ddp:none", None, None,
                        "pass; print-only stock DDP, node crash: matches_golden within_noise with its control run"),
    "plain-ddp-no-optimizer-state": ("plain-ddp:no-optimizer-state", None, None,
                                     "fail; the same with a planted bug: diverged beyond the noise ceiling"),
}


def record(name: str, out_dir: Path) -> Path:
    """Run one entry for real under out_dir (shared, so entries with the same workload share a golden run)."""
    scenario_name, runtime, steps, _ = RECORDINGS[name]
    if scenario_name.startswith("plain-ddp:"):
        from tests.noise_scenarios import plain_ddp

        scenario = plain_ddp(scenario_name.split(":", 1)[1])
    else:
        scenario = shipped(scenario_name, runtime, steps)
    engine = Engine(scenario, out_dir=out_dir)
    result = engine.run()
    target = keep(name, engine.run_dir)
    print(f"{name}: {result['verdict']} ({result['why']}) -> {target}")
    return target


def keep(name: str, run_dir: Path) -> Path:
    """Copy a finished run directory into tests/data/histories/<name> (no checkpoints, history gzipped)."""
    target = RECORDED / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(run_dir, target, ignore=shutil.ignore_patterns(
        "checkpoints", "ckpt", "*.acks", "events.jsonl", "report*", "spool"))
    with (run_dir / "events.jsonl").open("rb") as src, gzip.open(target / "events.jsonl.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


def main(names: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="torch-chaos-record-") as tmp:
        for name in names or list(RECORDINGS):
            record(name, Path(tmp))


if __name__ == "__main__":
    main(sys.argv[1:])
