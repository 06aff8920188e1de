"""A job that cannot start: it dies before its first step, every time, as a missing data file makes it."""
import sys

print("loading dataset from data/train.csv", flush=True)
print("FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv'", file=sys.stderr, flush=True)
sys.exit(1)
