"""A print-only job whose progress lines at the given steps (default: the 5th) make a backtracking
``progress_regex`` (``(a|aa)+$``) try every split of their 64 a's before failing (2^64 ways with Python's re);
the other lines match at once. Arguments: the number of steps, then the bad steps (``5,6,7``)."""
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
bad = {int(s) for s in sys.argv[2].split(",")} if len(sys.argv) > 2 else {5}
for step in range(1, steps + 1):
    print(f"step {step} " + ("a" * 64 + "!" if step in bad else "a"), flush=True)
    time.sleep(0.1)
