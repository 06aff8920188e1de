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
}


def record(name: str, out_dir: Path) -> Path:
    """Run one entry for real under out_dir (shared, so entries with the same workload share a golden run)."""
    scenario_name, runtime, steps, _ = RECORDINGS[name]
    engine = Engine(shipped(scenario_name, runtime, steps), out_dir=out_dir)
    result = engine.run()
    target = RECORDED / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(engine.run_dir, target, ignore=shutil.ignore_patterns(
        "checkpoints", "*.acks", "events.jsonl", "report*"))
    with (engine.run_dir / "events.jsonl").open("rb") as src, gzip.open(target / "events.jsonl.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    print(f"{name}: {result['verdict']} ({result['why']}) -> {target}")
    return target


def main(names: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="torch-chaos-record-") as tmp:
        for name in names or list(RECORDINGS):
            record(name, Path(tmp))


if __name__ == "__main__":
    main(sys.argv[1:])
