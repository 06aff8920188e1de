"""What this kernel offers for network faults, probed once in a throwaway namespace.

Kernels differ (this project's CI kernel has no ``sch_netem``), so the mechanism is chosen from what a probe
shows, never assumed; ``chaos doctor`` prints the same probe with the command that fixes each gap.
"""

from __future__ import annotations

import ctypes.util
import functools
import os
import shutil
import subprocess


def _ok(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def kernel_features() -> dict[str, bool]:
    """netem, tbf, the iptables statistic match, the NFQUEUE target and libnetfilter_queue (root only)."""
    features = {"root": os.geteuid() == 0, "iproute2": shutil.which("ip") is not None and
                shutil.which("tc") is not None, "iptables": shutil.which("iptables") is not None,
                "nsenter": shutil.which("nsenter") is not None,
                "libnetfilter_queue": ctypes.util.find_library("netfilter_queue") is not None}
    for name in ("netem", "tbf", "statistic", "nfqueue"):
        features[name] = False
    if not (features["root"] and features["iproute2"]):
        return features
    ns = f"tchaosprobe-{os.getpid()}"  # not a run's prefix (tchaos-): cleanup leaves a live probe alone
    if not _ok(["ip", "netns", "add", ns]):
        return features
    try:
        run = ["ip", "netns", "exec", ns]
        features["netem"] = _ok([*run, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
        _ok([*run, "tc", "qdisc", "del", "dev", "lo", "root"])
        features["tbf"] = _ok([*run, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit", "burst",
                               "32kbit", "latency", "400ms"])
        if features["iptables"]:
            features["statistic"] = _ok([*run, "iptables", "-w", "-A", "OUTPUT", "-m", "statistic", "--mode",
                                         "random", "--probability", "0.5", "-j", "DROP"])
            features["nfqueue"] = _ok([*run, "iptables", "-w", "-A", "OUTPUT", "-j", "NFQUEUE", "--queue-num", "1",
                                       "--queue-bypass"])
    finally:
        _ok(["ip", "netns", "del", ns])
    return features


def delay_mechanism() -> str | None:
    f = kernel_features()
    if f["netem"]:
        return "netem"
    if f["nfqueue"] and f["libnetfilter_queue"]:
        return "nfqueue"
    return None


def loss_mechanism() -> str | None:
    f = kernel_features()
    return "netem" if f["netem"] else "statistic" if f["statistic"] else None
