"""A job that makes progress, then hangs forever without dying (a deadlocked collective, a stuck read)."""
import time

for step in range(1, 21):
    print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    time.sleep(0.05)
while True:
    time.sleep(1)
