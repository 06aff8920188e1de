"""A job that finishes, reports its final state, then aborts while exiting (a crash in shutdown code).

The first run leaves a marker; the restarted one finds it, reports the final state again and exits cleanly, as
a real job does when it resumes from its final checkpoint. Uses the probe, so no torch.
"""
import os
import sys
import time
from pathlib import Path

from chaos import probe

marker, steps = Path(sys.argv[1]), int(sys.argv[2])
probe.process_started(distributed=False)
if marker.exists():
    probe.run_finished(steps, state_sha256="final")
    sys.exit(0)
for step in range(1, steps + 1):
    time.sleep(0.02)
    probe.step_completed(step, loss=1.0 / step, samples=1, duration_s=0.02)
probe.run_finished(steps, state_sha256="final")
marker.touch()
os.abort()
