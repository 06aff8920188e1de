"""Telemetry probe for training scripts: the workload's side of the event history.

This module is imported inside training processes and containers, so it depends on the standard library only
and on nothing in ``chaos`` but :mod:`chaos.events` (where every event is declared) and :mod:`chaos.channel`, both
stdlib-only too. Under the engine (``CHAOS_CHANNEL`` set) every call sends one event over the history channel:
spooled locally first, replayed if the connection drops, written to the one ``events.jsonl`` by the engine,
so nodes need no shared filesystem. With ``CHAOS_EVENTS`` but no ``CHAOS_CHANNEL`` (a script pointed at a file by
hand, or an older engine) every call appends one JSON line to that file with a single ``write`` on an
``O_APPEND`` descriptor, as before. Without ``CHAOS_EVENTS`` every call is a no-op, so an instrumented script runs
unchanged outside chaos.

``CHAOS_PAUSE_ON`` names events (and ``CHAOS_PAUSE_AT_STEPS`` global steps) after which the probe waits for the
engine's acknowledgement (over the channel; without one, the file ``<history>.acks/<event id>``). That is how a
fault lands deterministically *between* two workload events (a crash halfway through a checkpoint write, or right
after step N and before anything else) instead of racing a fast job.

A ``hang`` fault (chaos/faults/hang.py) orders one rank to block: the engine sends the order ``hang-<node>-<local
rank>`` over the channel (without a channel: the file ``<history>.acks/hang-<node>-<local rank>``), and that rank's
main thread, at its next completed step, stays in :func:`_hang_if_ordered` (its process and every other thread
alive) until the order is withdrawn, or the engine is gone. A process started after the
order never obeys it: the hang hits the rank running when the fault landed, not its restarted successor.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from chaos.channel import ENV_CHANNEL, ENV_SPOOL_DIR, ENV_TOKEN, ChannelClient  # stdlib-only, like this module
from chaos.events import Ev, Source  # stdlib-only like this module: names every event once for probe and engine

_ENV_EVENTS = "CHAOS_EVENTS"
_ENV_NODE = "CHAOS_NODE"
_ENV_PAUSE_ON = "CHAOS_PAUSE_ON"
_ENV_PAUSE_AT_STEPS = "CHAOS_PAUSE_AT_STEPS"
_ENV_PAUSE_TIMEOUT = "CHAOS_PAUSE_TIMEOUT_S"
# The engine refreshes this file (chaos/engine/heartbeat.py) twice a second while it runs; stale = engine gone.
_HEARTBEAT_FILE = "engine.alive"
_ENGINE_GONE_S = 3.0
_HANG_PREFIX = "hang-"  # <history>.acks/hang-<node>-<local rank>: the hang fault's order (chaos/faults/hang.py)
_IMPORTED_AT = time.time()  # orders older than this process's probe are not for it
_GIL_SWITCH_S = 30.0  # a hang holding the GIL: how long another thread waits before forcing a switch
_GIL_CHECK_S = 1.0  # ... and how often it looks at its order (the only moments it lets the GIL go)

_lock = threading.Lock()
_fd: int | None = None
_fd_path: str | None = None
_context: dict[str, Any] = {}
_hung_for: set[Any] = set()  # hang faults this process obeyed (and was released from)
_client: ChannelClient | None = None  # this process's sender (a forked child makes its own: a new pid)


# CPython's dict behind os.environ (bytes names and values on POSIX), read directly: os.environ.get encodes the name
# and decodes the value at every read (~2.8 us here), and a step_completed read ~13 variables, ~36 of the probe's
# ~150 us per step (issue 36). What os.environ holds is what is read, changes made through it included.
_ENV_BYTES: dict[bytes, bytes] | None = getattr(os.environ, "_data", None) if os.name == "posix" else None
if _ENV_BYTES is not None and not isinstance(_ENV_BYTES, dict):  # pragma: no cover - another implementation
    _ENV_BYTES = None


def _getenv(name: str, default: str | None = None) -> str | None:
    """``os.environ.get(name, default)``, at a dict lookup's cost where the interpreter allows."""
    if _ENV_BYTES is None:
        return os.environ.get(name, default)
    raw = _ENV_BYTES.get(name.encode())
    return default if raw is None else os.fsdecode(raw)


def enabled() -> bool:
    """True when the script runs under chaos and its events are recorded."""
    return bool(_getenv(_ENV_EVENTS))


def _identity() -> dict[str, Any]:
    ident: dict[str, Any] = {"node": _getenv(_ENV_NODE, "local"), "pid": os.getpid()}
    for key, env_name in (
        ("rank", "RANK"),
        ("local_rank", "LOCAL_RANK"),
        ("world_size", "WORLD_SIZE"),
        ("restart", "TORCHELASTIC_RESTART_COUNT"),
    ):
        value = _getenv(env_name)
        if value is not None and value.lstrip("-").isdigit():
            ident[key] = int(value)
    return ident


def _descriptor(path: str) -> int:
    global _fd, _fd_path
    if _fd is None or _fd_path != path:
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fd_path = path
    return _fd


def _channel() -> ChannelClient | None:
    """This process's channel client, made at its first event (None without ``CHAOS_CHANNEL``)."""
    global _client
    address = _getenv(ENV_CHANNEL)
    if not address:
        return None
    pid = os.getpid()
    if _client is None or _client.sender.split(":")[1] != str(pid):
        if _client is not None:  # a forked child: let go of the parent's copies (close, never shut down)
            _client.close()
        node = os.environ.get(_ENV_NODE, "local").replace(":", "_")
        local_rank = os.environ.get("LOCAL_RANK")
        who = f"{os.environ.get(_ENV_NODE, 'local')}-{local_rank}" if local_rank is not None else None
        try:
            _client = ChannelClient(address, f"{node}:{pid}:{uuid.uuid4().hex[:8]}", os.environ.get(ENV_SPOOL_DIR),
                                    who=who, token=os.environ.get(ENV_TOKEN))
        except ValueError:  # not host:port: the history file, as without a channel
            _client = None
    return _client


@atexit.register
def _flush_at_exit() -> None:
    """A process ending while the engine was unreachable tries once more, so its spooled events reach the
    history (a killed process cannot; its events are in its spool)."""
    if _client is not None and _client.sender.split(":")[1] == str(os.getpid()):
        with _lock:
            if _client.unsent:
                _client.flush()
            _client.poll()  # nothing left unread: the connection closes cleanly at exit


def write_record(record: dict[str, Any], path: str, hold: bool = False) -> None:
    """Deliver one finished event record (the probe's, or torchrun's agent's through :mod:`chaos.agent_log`):
    over the channel when the engine gave one, else appended to ``path``. With ``hold`` (the record has an
    ``id``) wait for the engine's acknowledgement."""
    line = {k: _json_safe(v) for k, v in record.items()}
    with _lock:
        client = _channel()
        if client is not None:
            client.send(line)
            if hold:
                client.wait_ack(str(record["id"]), float(os.environ.get(_ENV_PAUSE_TIMEOUT, "10")))
            return
        os.write(_descriptor(path), (json.dumps(line, default=str) + "\n").encode())
    if hold:
        wait_for_ack(path, record["id"])


def emit(event: str, **fields: Any) -> None:
    """Record one event (an :class:`chaos.events.Ev`, or a name of the script's own); fields must be
    JSON-serialisable (non-finite floats become null)."""
    path = _getenv(_ENV_EVENTS)
    if not path:
        return
    record: dict[str, Any] = {"t": time.time(), "source": Source.WORKLOAD, "event": event}
    record.update(_identity())
    record.update(_context)
    record.update(fields)
    pause = event in (_getenv(_ENV_PAUSE_ON) or "").split(",") or (
        event == Ev.STEP_COMPLETED and str(fields.get("step")) in (_getenv(_ENV_PAUSE_AT_STEPS) or "").split(","))
    if pause:
        record["id"] = uuid.uuid4().hex
    write_record(record, path, hold=pause)
    if event == Ev.STEP_COMPLETED:
        _hang_if_ordered(path, fields.get("step"))


def _json_safe(value: Any) -> Any:
    """NaN and infinities are not JSON: a diverged loss is recorded as null rather than breaking the line."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value


def wait_for_ack(path: str, event_id: str, timeout_s: float | None = None,
                 gone: Callable[[], bool] | None = None, check_every_s: float = 0.2) -> None:
    """Hold until the engine acknowledges, it is gone (its heartbeat stale), ``gone()`` says the held caller is
    dying, or the safety timeout (``CHAOS_PAUSE_TIMEOUT_S``, 10 s, unless ``timeout_s``).

    Without an engine the job goes on: a dead engine must not freeze training (documented in docs/design.md,
    "The probe"). The storage layer holds its events with this same wait (chaos/storage/record.py)."""
    acks = path + ".acks"
    ack, heartbeat = os.path.join(acks, event_id), os.path.join(acks, _HEARTBEAT_FILE)
    if timeout_s is None:
        timeout_s = float(os.environ.get(_ENV_PAUSE_TIMEOUT, "10"))
    deadline = time.monotonic() + timeout_s
    next_check = 0.0
    while time.monotonic() < deadline:
        if os.path.exists(ack):
            return
        now = time.monotonic()
        if now >= next_check:
            next_check = now + check_every_s
            if gone is not None and gone():
                return
            try:
                if time.time() - os.stat(heartbeat).st_mtime > _ENGINE_GONE_S:
                    return  # the engine stopped refreshing it: killed
            except OSError:
                pass  # no heartbeat (an older engine): only the safety timeout applies
        time.sleep(0.005)


def _engine_gone(acks: str) -> bool:
    try:
        return time.time() - os.stat(os.path.join(acks, _HEARTBEAT_FILE)).st_mtime > _ENGINE_GONE_S
    except OSError:
        return False  # no heartbeat (an older engine): only the order's removal releases


def _read_order(order: str) -> dict[str, Any] | None:
    try:
        with open(order) as fh:
            value = json.load(fh)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _order_reader(path: str, name: str) -> tuple[Callable[[], dict[str, Any] | None], Callable[[], bool]]:
    """How this process reads its hang order and tells the engine is gone: over the channel (the orders the
    engine pushed, taken in without waiting; gone = connection down and refused) when it has one, else the order
    file beside the history and the engine's heartbeat file."""
    client = _channel()
    if client is None:
        acks = path + ".acks"
        order = os.path.join(acks, name)
        return (lambda: _read_order(order)), (lambda: _engine_gone(acks))

    def current() -> dict[str, Any] | None:
        with _lock:
            client.poll()
            return client.orders.get(name)

    def gone() -> bool:
        with _lock:
            return client.engine_gone()

    return current, gone


def _hang_if_ordered(path: str, step: Any) -> None:
    """Block this rank's main thread while the engine's hang order for it stands (a hang fault in main_thread
    mode): one failed ``open`` (one ``recv`` over the channel) per step when there is none. Other threads (the
    process group's) keep running."""
    if threading.current_thread() is not threading.main_thread():
        return
    name = f"{_HANG_PREFIX}{_getenv(_ENV_NODE, 'local')}-{_getenv('LOCAL_RANK', '0')}"
    current, gone = _order_reader(path, name)
    spec = current()
    if spec is None or not isinstance(spec.get("t"), (int, float)) or spec["t"] < _IMPORTED_AT:
        return
    fault_id = spec.get("fault_id")
    if fault_id in _hung_for:  # released once already: never twice for one fault
        return
    _hung_for.add(fault_id)
    hold_gil = spec.get("hold_gil") is True
    started = time.time()
    emit(Ev.HANG_STARTED, fault_id=fault_id, mode="main_thread", step=step, **({"hold_gil": True} if hold_gil else {}))
    why = "healed"
    switch = sys.getswitchinterval()
    if hold_gil:  # other Python threads get the GIL only when this one does I/O (once a second), or after 30 s
        sys.setswitchinterval(_GIL_SWITCH_S)
    try:
        while True:
            now_spec = current()
            if now_spec is None or now_spec.get("fault_id") != fault_id:
                why = "healed" if now_spec is None else "cancelled"
                break
            if gone():
                why = "engine gone"
                break
            if hold_gil:
                until = time.monotonic() + _GIL_CHECK_S
                while time.monotonic() < until:  # spins without releasing the GIL
                    pass
            else:
                time.sleep(0.05)
    finally:
        sys.setswitchinterval(switch)
    emit(Ev.HANG_RELEASED, fault_id=fault_id, mode="main_thread", why=why, held_s=time.time() - started)


def set_context(**fields: Any) -> None:
    """Fields added to every later event of this process, e.g. the ``incarnation`` all ranks agreed on."""
    _context.update(fields)


def process_started(**fields: Any) -> None:
    if enabled():
        _cpu_since_last()  # the baseline of the first step's CPU times
    emit(Ev.PROCESS_STARTED, **fields)


def step_completed(step: int, *, loss: float | None = None, samples: int | None = None,
                   duration_s: float | None = None, **fields: Any) -> None:
    """One optimizer step finished; ``step`` is the global step (1-based) shared by all ranks.

    Pass ``sample_ids`` (the dataset indices this rank consumed) and ``epoch`` to get the exactly-once check.
    The probe adds ``cpu_s`` and ``cpu_wait_s`` (see :func:`_cpu_since_last`) unless given.
    """
    if enabled() and "cpu_wait_s" not in fields:
        fields.update(_cpu_since_last())
    emit(Ev.STEP_COMPLETED, step=step, loss=loss, samples=samples, duration_s=duration_s, **fields)


def checkpoint_save_started(step: int, path: str, **fields: Any) -> None:
    emit(Ev.CHECKPOINT_SAVE_STARTED, step=step, path=path, **fields)


def checkpoint_write_progress(step: int, path: str, written: int, total: int, **fields: Any) -> None:
    """Part of a checkpoint is on disk: a fault triggered here lands in the middle of the write."""
    emit(Ev.CHECKPOINT_WRITE_PROGRESS, step=step, path=path, written=written, total=total, **fields)


def checkpoint_save_finished(step: int, path: str, sha256: str, **fields: Any) -> None:
    emit(Ev.CHECKPOINT_SAVE_FINISHED, step=step, path=path, sha256=sha256, **fields)


def checkpoint_load_started(step: int, path: str, **fields: Any) -> None:
    emit(Ev.CHECKPOINT_LOAD_STARTED, step=step, path=path, **fields)


def checkpoint_deleted(step: int, path: str, **fields: Any) -> None:
    emit(Ev.CHECKPOINT_DELETED, step=step, path=path, **fields)


def checkpoint_loaded(step: int, path: str, sha256: str, **fields: Any) -> None:
    emit(Ev.CHECKPOINT_LOADED, step=step, path=path, sha256=sha256, **fields)


def checkpoint_rejected(step: int, path: str, why: str, **fields: Any) -> None:
    """The script refused a checkpoint at load (e.g. its digest did not match) and looks for an older one."""
    emit(Ev.CHECKPOINT_REJECTED, step=step, path=path, why=why, **fields)


def run_finished(step: int, **fields: Any) -> None:
    emit(Ev.RUN_FINISHED, step=step, **fields)


_cpu_seen: dict[str, tuple[int, int]] = {}  # thread id → (ns on a CPU, ns waiting for one) at the last reading
# thread id → its ``schedstat``, kept open and read again at offset 0: opening and closing each thread's file every
# step was most of the probe's cost per step (~120 of ~170 us with a DDP worker's ~20 threads)
_schedstat_fds: dict[str, int] = {}
_schedstat_pid = 0  # the process those descriptors belong to (a forked child opens its own)
TIDS_EVERY_S = 1.0  # how often the list of the process's threads is read again (listdir: ~18 us a step)
_tids: list[str] = []
_tids_at = 0.0


def _forget_schedstat() -> None:
    for fd in _schedstat_fds.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _schedstat_fds.clear()
    _cpu_seen.clear()


def _cpu_since_last() -> dict[str, float]:
    """Since the last call, summed over the process's threads (``/proc/self/task/*/schedstat``, Linux): ``cpu_s``,
    time on a CPU, and ``cpu_wait_s``, time runnable but waiting for a CPU (the run queue's delay, which includes
    time throttled by a cgroup CPU quota). Waiting for a peer in a collective is sleeping and counts in neither, so
    a rank starved of CPU shows here while the ranks it holds up do not. Empty on the first call and where the
    kernel does not keep these counts. One ``pread`` per thread of files kept open (~2 us a thread); the list of
    threads is read again every TIDS_EVERY_S (a thread started meanwhile counts from then, its time so far
    included, so no CPU time is lost, only reported a step or so later)."""
    global _schedstat_pid, _tids, _tids_at
    pid = os.getpid()
    if _schedstat_pid != pid:  # the first call, or a forked child: the parent's threads are not this process's
        _forget_schedstat()
        _schedstat_pid = pid
        _tids_at = -TIDS_EVERY_S
    now = time.monotonic()
    if now - _tids_at >= TIDS_EVERY_S:
        try:
            _tids = os.listdir("/proc/self/task")
        except OSError:
            return {}
        _tids_at = now
    run_total = wait_total = 0
    seen: dict[str, tuple[int, int]] = {}
    fds, last_seen, pread = _schedstat_fds, _cpu_seen, os.pread
    for tid in _tids:
        fd = fds.get(tid)
        try:
            if fd is None:
                fd = fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
            run_s, wait_s, _ = pread(fd, 128, 0).split(maxsplit=2)
            run, wait = int(run_s), int(wait_s)
        except (OSError, ValueError):
            continue
        seen[tid] = (run, wait)
        last = last_seen.get(tid)
        if last is None:
            run_total += run
            wait_total += wait
        else:
            if run > last[0]:
                run_total += run - last[0]
            if wait > last[1]:
                wait_total += wait - last[1]
    for tid in [t for t in fds if t not in seen]:  # threads that ended (or unreadable): their descriptors go
        try:
            os.close(fds.pop(tid))
        except OSError:
            pass
    first = not last_seen
    last_seen.clear()
    last_seen.update(seen)
    if first or not seen:
        return {}
    return {"cpu_s": round(run_total / 1e9, 6), "cpu_wait_s": round(wait_total / 1e9, 6)}
