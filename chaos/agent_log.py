"""torchrun, with its elastic agent's steps written to the history (source ``agent``).

torchrun's agent logs when it finds its workers failed, when it rendezvouses, when the round closes and when it
starts workers, but at INFO level (hidden by default) and with a clock-of-day stamp that carries no year or time
zone. Without these moments a recovery cannot be split into detection, rendezvous and worker start. The engine
therefore starts every elastic node as ``python -c <this module's main> <torchrun arguments>``: the agent runs
unchanged in this process, and a logging handler turns the records below into history events stamped with the
record's own ``time.time()`` -- the clock the probe uses (corrected to the engine's by the history channel when the
two differ measurably, see :mod:`chaos.channel`). The agent's other records keep torchrun's default behaviour: only
WARNING and above reach the node log, so its failure explanations are not crowded out. The workers are separate
interpreters and see nothing of this; the user's script needs no probe for these events.

Standard library and torch only (besides :mod:`chaos.events`, itself stdlib-only): it runs in the node's
interpreter, possibly inside a container.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from typing import Any

from chaos.events import Ev, Source
from chaos.probe import write_record

# The loggers that speak for the agent (their names are their modules': torch's get_logger(__name__)).
AGENT_LOGGERS = ("torch.distributed.elastic.agent.server.api",)

# torch 2.x message texts (torch/distributed/elastic/agent/server/api.py), matched on the rendered message.
_PATTERNS: list[tuple[Ev, re.Pattern[str]]] = [
    (Ev.AGENT_WORKERS_FAILED, re.compile(
        r"^\[[^\]]*\] Worker group (?P<state>FAILED|UNHEALTHY)\. (?P<attempts_left>\d+)/(?P<max_restarts>\d+) "
        r"attempts left")),
    (Ev.AGENT_MEMBERSHIP_CHANGED, re.compile(r"^\[[^\]]*\] Detected (?P<waiting>\d+) new nodes")),
    (Ev.AGENT_RENDEZVOUS_STARTED, re.compile(r"^\[[^\]]*\] Rendezvous'ing worker group")),
    (Ev.AGENT_RENDEZVOUS_COMPLETED, re.compile(r"^\[[^\]]*\] Rendezvous complete for workers")),
    (Ev.AGENT_WORKERS_STARTED, re.compile(r"^\[[^\]]*\] Starting worker group")),
    (Ev.AGENT_WORKERS_SUCCEEDED, re.compile(
        r"^\[[^\]]*\] worker group successfully finished\. Waiting (?P<barrier_timeout_s>\d+(?:\.\d+)?) seconds")),
]
_DECIMAL = re.compile(r"\d+\.\d+")
_COMPLETED_FIELDS = ("restart_count", "group_rank", "group_world_size")


def agent_event(message: str, args: Any = None) -> tuple[Ev, dict[str, Any]] | None:
    """The history event one agent log message stands for (name and fields), or None for any other message."""
    for event, pattern in _PATTERNS:
        m = pattern.search(message)
        if m is None:
            continue
        fields: dict[str, Any] = {k: int(v) if v.isdigit() else float(v) if _DECIMAL.fullmatch(v) else v
                                  for k, v in m.groupdict().items()}
        if event == Ev.AGENT_RENDEZVOUS_COMPLETED and isinstance(args, dict):
            fields.update({k: args[k] for k in _COMPLETED_FIELDS if isinstance(args.get(k), int)})
        return event, fields
    return None


class AgentEvents(logging.Handler):
    """Writes the agent's recognised records to the history; passes the others on as torchrun would have."""

    def __init__(self, history: str, node: str, passthrough: logging.Logger | None, level: int):
        super().__init__(logging.DEBUG)
        self._history, self._node = history, node
        self._passthrough, self._passthrough_level = passthrough, level
        self._write_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            found = agent_event(record.getMessage(), record.args)
        except Exception:  # a history line is never worth breaking torchrun
            found = None
        if found is not None:
            event, fields = found
            self._write({"t": record.created, "source": Source.AGENT, "event": event, "node": self._node,
                         "pid": os.getpid(), **fields})
        if self._passthrough is not None and record.levelno >= self._passthrough_level:
            self._passthrough.handle(record)  # the parent's handlers: what torchrun printed without us

    def _write(self, line: dict[str, Any]) -> None:
        """Through the probe's writer: over the run's history channel when it has one (the agent is one more
        sender), else one write on the history file's ``O_APPEND`` descriptor, whole lines among the others'."""

        try:
            with self._write_lock:
                write_record(line, self._history)
        except OSError:
            pass


def install(history: str, node: str) -> None:
    """Route the agent loggers' records through :class:`AgentEvents` (INFO and up reach it)."""
    import torch.distributed.elastic.agent.server.api  # noqa: F401  (creates the logger with torchrun's level)

    for name in AGENT_LOGGERS:
        logger = logging.getLogger(name)
        level = logger.getEffectiveLevel()  # torchrun's: WARNING, or LOGLEVEL when the user set it
        logger.addHandler(AgentEvents(history, node, logger.parent, level))
        logger.propagate = False  # the handler forwards what torchrun would have shown
        logger.setLevel(min(level, logging.INFO))


def main(argv: list[str]) -> None:
    """torchrun's ``main`` with the handler installed (when the run names a history)."""
    history = os.environ.get("CHAOS_EVENTS")
    if history:
        install(history, os.environ.get("CHAOS_NODE", "local"))
    from torch.distributed.run import main as torchrun

    sys.argv = ["torchrun", *argv]
    torchrun(argv)


def launcher(python: str, repo_root: str) -> list[str]:
    """The command that starts torchrun through :func:`main` (arguments follow it, as torchrun's own).

    The repository root goes on ``sys.path`` inside the command rather than into ``PYTHONPATH``, so the node's
    environment -- and the workers' -- stays as the user set it.
    """
    code = (f"import sys; sys.path.insert(0, {repo_root!r}); from chaos.agent_log import main; "
            "main(sys.argv[1:])")
    return [python, "-c", code]


if __name__ == "__main__":  # python -m chaos.agent_log <torchrun arguments>
    main(sys.argv[1:])
