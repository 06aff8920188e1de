"""A job that only prints its progress (no probe): the framework follows it through progress_regex."""
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
for step in range(1, steps + 1):
    print(f"epoch 0 | step {step} | loss {1.0 / step:.4f}", flush=True)
    time.sleep(0.05)
