"""Network impairments inside one node's namespace, applied from the host with the host's own tools.

Everything runs as ``<runtime.net_enter(node)> iptables|tc ...`` (``nsenter -n``), so images need no tools and a
fault costs a few milliseconds. Every rule carries the comment ``torch-chaos:<run>:<fault>`` so healing deletes
exactly what the fault added; :func:`snapshot` before and after proves the namespace came back as it was.
"""

from __future__ import annotations

import json
import re
import select
import subprocess
import sys
from dataclasses import dataclass, field

_COUNTERS = re.compile(r"\[\d+:\d+\]")
_TAG = re.compile(r"torch-chaos:[^\s\"]+")


class NetCommandFailed(RuntimeError):
    """A host tool refused a change inside a node's namespace (message says which command and why)."""


def run_in(enter: list[str], argv: list[str]) -> str:
    proc = subprocess.run([*enter, *argv], capture_output=True, text=True, timeout=20)
    if proc.returncode != 0:
        raise NetCommandFailed(f"{' '.join(argv)}: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def snapshot(enter: list[str], interface: str) -> str:
    """The namespace's filter rules and the interface's qdiscs, without packet counters (they always move)."""
    rules = run_in(enter, ["iptables-save", "-t", "filter"])
    rules = "\n".join(_COUNTERS.sub("", line) for line in rules.splitlines() if not line.startswith("#"))
    qdiscs = run_in(enter, ["tc", "qdisc", "show", "dev", interface])
    qdiscs = re.sub(r"qdisc (\w+) [0-9a-f]+:", r"qdisc \1", qdiscs)  # handles are renumbered on re-creation
    return rules + "\n--\n" + qdiscs


@dataclass
class Rule:
    chain: str
    spec: list[str]


@dataclass
class Impairment:
    """What one fault did to one namespace: enough to undo it exactly."""

    enter: list[str]
    interface: str
    comment: str
    before: str = ""
    rules: list[Rule] = field(default_factory=list)
    root_qdisc: bool = False
    delayer: subprocess.Popen[str] | None = None

    def begin(self) -> None:
        self.before = snapshot(self.enter, self.interface)

    def add_rule(self, chain: str, spec: list[str], last: bool = False) -> None:
        """DROP rules go first; a queue rule goes last, so a packet it releases (NF_ACCEPT ends the chain) has
        already passed every DROP of an overlapping fault."""
        jump = spec.index("-j")
        full = [*spec[:jump], "-m", "comment", "--comment", self.comment, *spec[jump:]]
        run_in(self.enter, ["iptables", "-w", *(["-A", chain] if last else ["-I", chain, "1"]), *full])
        self.rules.append(Rule(chain, full))

    def add_root_qdisc(self, qdisc: list[str]) -> None:
        run_in(self.enter, ["tc", "qdisc", "add", "dev", self.interface, "root", *qdisc])
        self.root_qdisc = True

    def heal(self) -> dict[str, object]:
        """Undo in reverse order; report whether the namespace is exactly as before (or why it could not be)."""
        problems = []
        for rule in reversed(self.rules):
            try:
                run_in(self.enter, ["iptables", "-w", "-D", rule.chain, *rule.spec])
            except (NetCommandFailed, subprocess.TimeoutExpired) as exc:
                problems.append(str(exc))
        self.rules.clear()
        if self.root_qdisc:
            try:
                run_in(self.enter, ["tc", "qdisc", "del", "dev", self.interface, "root"])
            except (NetCommandFailed, subprocess.TimeoutExpired) as exc:
                problems.append(str(exc))
            self.root_qdisc = False
        out: dict[str, object] = {}
        if self.delayer is not None:
            out["delayer"] = stop_delayer(self.delayer)
            self.delayer = None
        try:
            # Rules of other torch-chaos faults still active in this namespace (or added after ours) are theirs.
            out["restored"] = self._own_view(snapshot(self.enter, self.interface)) == self._own_view(self.before)
        except (NetCommandFailed, subprocess.TimeoutExpired) as exc:
            # The namespace went away with its node (a crashed container): nothing of ours is left in it.
            out["restored"] = None
            problems.append(f"namespace gone: {exc}")
        if problems:
            out["problems"] = problems
        return out

    def _own_view(self, state: str) -> str:
        return "\n".join(line for line in state.splitlines()
                         if not any(tag != self.comment for tag in _TAG.findall(line)))


def start_delayer(enter: list[str], queue: int, delay_ms: float, jitter_ms: float, env: dict[str, str],
                  timeout_s: float = 10.0) -> subprocess.Popen[str]:
    """Start the NFQUEUE delayer inside the namespace and wait until it holds the queue."""
    argv = [*enter, sys.executable, "-m", "chaos.net.delayer", "--queue", str(queue), "--delay-ms",
            f"{delay_ms:g}", "--jitter-ms", f"{jitter_ms:g}"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if line.strip() != "ready":
        proc.kill()
        _, stderr = proc.communicate(timeout=5)
        raise NetCommandFailed(f"the NFQUEUE delayer did not start: {(stderr or line).strip()}")
    return proc


def stop_delayer(proc: subprocess.Popen[str]) -> dict[str, object]:
    proc.terminate()
    try:
        stdout, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate(timeout=5)
    for line in reversed(stdout.splitlines()):
        try:
            summary = json.loads(line)
        except ValueError:
            continue
        if isinstance(summary, dict):
            return {"exit_code": proc.returncode, **summary}
    return {"exit_code": proc.returncode}
