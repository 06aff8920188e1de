"""A job that dies right after its first step, every time it is started (a bad checkpoint, a config error)."""
import sys

print("step 1 loss 1.0", flush=True)
sys.exit(3)
