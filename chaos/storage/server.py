"""The FUSE passthrough that serves a checkpoint directory and records what every process does with it.

``python -m chaos.storage serve`` runs :func:`serve`: the directory's real bytes (``--backing``, by default the
mount directory itself, reached through a descriptor opened before the mount covers it) are served at ``--mount``.
Each operation is attributed to the caller's node (:mod:`chaos.storage.identity`), first put to the storage
faults' :class:`~chaos.storage.rules.Rules` (fail it, delay it, stall it), then done, then recorded
(:mod:`chaos.storage.record`). The events and their fields are the contract in docs/design.md, "The storage
layer".

Why the close decides a save: the kernel closes a killed process's files for it, so a save cut short by a crash
also ends in ``flush``/``release``. ``flush`` runs in the closing thread's context: a thread that is exiting
(PF_EXITING) did not close its file, it died with it open, and no ``checkpoint_save_finished`` is written.

Whose rights: the mount has ``default_permissions`` (the kernel checks modes and owners against the caller) and
every operation on the backing directory runs with the caller's filesystem uid, gid and groups
(:mod:`chaos.storage.creds`); a non-root caller never gets a setuid or setgid file. Every path is resolved beneath
the backing directory without following a link (:mod:`chaos.storage.beneath`): the kernel resolves the links a
caller's path has before it asks the server, so a link the server meets was swapped in meanwhile.

Operations from the engine's own process (``--engine-pid``: a ``corrupt_checkpoint`` fault damaging a file) pass
through unrecorded and unruled: they are faults, recorded by the engine, not saves.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mfusepy as fuse

from chaos.events import WRITE_PROGRESS_EVERY_BYTES, WRITE_PROGRESS_FIRST_BYTES, Ev
from chaos.storage.beneath import open_beneath, parent_of
from chaos.storage.control import APPLIED_FILE, MATCHED_FILE, RULES_FILE
from chaos.storage.creds import CallerRights
from chaos.storage.digests import Digests, Running
from chaos.storage.identity import Caller, Callers, exiting
from chaos.storage.mounts import unmount
from chaos.storage.passthrough import fuse_class as passthrough_class
from chaos.storage.passthrough import log, summary
from chaos.storage.record import Recorder, save_step, step_in_name
from chaos.storage.rules import Outcome, RuleError, Rules

if TYPE_CHECKING:
    from chaos.storage.hostlayer import Link

# checkpoint_write_progress when a handle's written bytes first pass 1 MiB, then every 16 MiB
PROGRESS_FIRST, PROGRESS_EVERY = WRITE_PROGRESS_FIRST_BYTES, WRITE_PROGRESS_EVERY_BYTES
RULES_POLL_S = 0.02
MAX_WRITE = 1 << 20
# Threads serving requests: held and stalled operations each keep one (libfuse's default is 10).
MAX_THREADS = 64
HOLD_GRACE_S = 0.05
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR
_SET_ID = stat.S_ISUID | stat.S_ISGID
_NO_ID = 0xFFFFFFFF  # chown's "leave it" (-1) as libfuse passes it


def _step_from(how: str | None) -> dict[str, str]:
    """``step_from`` for a save event, when the step is known."""
    return {"step_from": how} if how else {}


@dataclass
class Handle:
    """One open file: who opened it, and what the layer knows of the bytes written through it."""

    fd: int
    relpath: str
    caller: Caller
    writable: bool
    saving: bool  # it starts a checkpoint save (created, or opened with truncation)
    announced: bool = False  # its checkpoint_save_started was written
    step: int | None = None
    step_from: str | None = None  # "name" (a number of its path) or "progress" (the job's step as it began)
    written: int = 0
    next_progress: int = PROGRESS_FIRST
    clean: bool = False  # closed by a live process after its last write
    closed_path: str | None = None  # where it was when closed (a rename may move it before its release)
    read_seen: bool = False
    running: Running | None = None  # its bytes' sha256 as they arrive (a save written in order from its start)
    lock: threading.Lock = field(default_factory=threading.Lock)
    passed: bool = False  # its bytes pass through the kernel (storage.passthrough): the server sees no write
    seen: tuple[int, int] = (0, 0)  # passed through: the file's (size, mtime_ns) when the server last looked


class StorageServer(fuse.Operations):
    """The passthrough; one instance per mount, called from libfuse's threads."""

    use_ns = True

    def __init__(self, backing_fd: int, mount: str, recorder: Recorder, rules: Rules, control: str | None,
                 engine_pid: int | None = None, link: Link | None = None, passthrough: bool = False,
                 offer_fd: int | None = None):
        self.root = backing_fd
        self.mount = mount.rstrip("/")
        self.recorder = recorder
        self.rules = rules
        self.control = control
        self.link = link  # a layer on a node's host: rules arrive over the channel (an order), not rules.json
        self._told_matched: set[int] = set()  # faults whose first match this layer has told the engine
        self.engine_pid = engine_pid
        self.callers = Callers()
        self.rights = CallerRights()
        self.handles: dict[int, Handle] = {}
        self.digests = Digests()
        self._handles_lock = threading.Lock()
        self._rules_lock = threading.Lock()
        self._rules_stamp: tuple[int, int] | None = None
        self._refused_version: int | None = None  # a channel order whose rules could not be installed
        self._stop = threading.Event()
        # storage.passthrough (chaos.storage.passthrough): the kernel moves the bytes; what the server still does
        self.passthrough_table: Any = None  # the InodeTable, set by the passthrough FUSE class
        self.offered: bool | None = None  # whether the kernel offered passthrough at INIT
        self.offer_fd = offer_fd  # a pipe to the node's wrapper (a host layer): INIT's word, before it runs anything
        self.counts = {"write": 0, "read": 0}  # write/read calls served (0 when every file passed through)
        # release's and rename's digests and events, off the caller's path (one thread: events keep their op's t)
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="torch-chaos-pt-digest") if passthrough else None

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def rel(path: str) -> str:
        return path.lstrip("/") or "."

    def full(self, relpath: str) -> str:
        return f"{self.mount}/{relpath}"

    def caller(self) -> Caller:
        return self.callers.of(fuse.fuse_get_context()[2])

    def as_caller(self) -> Any:
        """The calling process's filesystem rights for the body (a context manager)."""
        return self.rights.of(*fuse.fuse_get_context())

    def unprivileged(self) -> bool:
        """A caller that is not root: it gets no setuid/setgid bit (only a root server serves other users)."""
        return os.geteuid() == 0 and fuse.fuse_get_context()[0] != 0

    def ours(self, caller: Caller) -> bool:
        """An operation of the engine itself (a fault acting on the bytes): not recorded, not ruled."""
        return self.engine_pid is not None and caller.pid == self.engine_pid

    def emit(self, event: str, relpath: str, caller: Caller, hold: bool = True, at: float | None = None,
             **fields: Any) -> bool:
        """Record one event (``at``: the operation's time, for one written later); returns whether it held the
        calling operation."""
        tid = fuse.fuse_get_context()[2] if hold else 0
        return self.recorder.emit(event, hold=hold, gone=lambda: exiting(tid), at=at, node=caller.node,
                                  pid=caller.pid, path=self.full(relpath), **fields)

    @staticmethod
    def survived(grace_s: float = 0.0) -> None:
        """After a hold, a delay or a stall: a caller killed meanwhile (the fault the hold was for) gets nothing
        done. The kernel handed its data over before it died; writing it now would finish the save the crash
        was meant to cut short. ``grace_s`` after a hold: the engine acknowledges right after its kill returned,
        and a container's processes die a few milliseconds after its init."""
        tid = fuse.fuse_get_context()[2]
        if not exiting(tid) and grace_s > 0:
            time.sleep(grace_s)
        if exiting(tid):
            raise fuse.FuseOSError(errno.EINTR)

    def obey(self, op: str, relpath: str, caller: Caller, nbytes: int = 0) -> None:
        """Ask the rules about ``op`` and do what they say: sleep, stall while the rule lasts, or fail it."""
        if self.ours(caller):
            return
        self.reload_rules()
        with self._rules_lock:
            out: Outcome = self.rules.check(op, relpath, caller.node, nbytes)
            first = self.link is not None and any(v and k not in self._told_matched
                                                   for k, v in self.rules.matched.items())
            if first:
                self._told_matched |= {k for k, v in self.rules.matched.items() if v}
                counts = dict(self.rules.matched)
        if first and self.link is not None:  # a rule acted here for the first time: said now, not only at the heal
            self.link.matched(counts)
        tid = fuse.fuse_get_context()[2]
        if out.delay_s > 0:
            end = time.monotonic() + out.delay_s
            while (left := end - time.monotonic()) > 0 and not exiting(tid) and not self._stop.is_set():
                time.sleep(min(left, RULES_POLL_S))
                if out.delay_ids and left > RULES_POLL_S:  # healed meanwhile: the latency is over with its fault
                    self.reload_rules()
                    with self._rules_lock:
                        if not self.rules.any_installed(out.delay_ids):
                            break
        if out.stall:  # named in the history: a run that hangs here says which node and file the fault holds
            self.emit(Ev.STORAGE_OP_STALLED, relpath, caller, hold=False, op=op, fault_id=out.fault_id)
        while out.stall and not self._stop.is_set() and not exiting(tid):
            self.reload_rules()
            with self._rules_lock:
                if not self.rules.stalled(out.fault_id):
                    break
            time.sleep(RULES_POLL_S)
        if out.delay_s > 0 or out.stall:
            self.survived()
        if out.errno:
            code = getattr(errno, out.errno, errno.EIO)
            self.emit(Ev.STORAGE_OP_FAILED, relpath, caller, hold=False, op=op, errno=out.errno,
                      fault_id=out.fault_id)
            raise fuse.FuseOSError(code)

    def reload_rules(self) -> None:
        """Install a changed ``rules.json`` and say so in ``applied`` (the engine waits for that); on a node's
        host, the rules the engine's order carries, said back over the channel."""
        if self.link is not None:
            self._rules_from_channel(self.link)
            return
        if self.control is None:
            return
        path = os.path.join(self.control, RULES_FILE)
        try:
            st = os.stat(path)
        except OSError:
            return
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp == self._rules_stamp:
            return
        try:
            with open(path) as f:
                document = json.load(f)
        except (OSError, ValueError):
            return  # being replaced: the next look reads the new one
        with self._rules_lock:
            if stamp == self._rules_stamp:
                return
            self.rules.install(document)
            self._rules_stamp = stamp
            tmp = os.path.join(self.control, f".{MATCHED_FILE}.tmp")  # before applied: the heal reads it then
            with open(tmp, "w") as f:
                json.dump({str(k): v for k, v in self.rules.matched.items()}, f)
            os.replace(tmp, os.path.join(self.control, MATCHED_FILE))
            tmp = os.path.join(self.control, f".{APPLIED_FILE}.tmp")
            with open(tmp, "w") as f:
                f.write(str(self.rules.version))
            os.replace(tmp, os.path.join(self.control, APPLIED_FILE))

    def _rules_from_channel(self, link: Link) -> None:
        document = link.rules()
        if document is None:
            return
        with self._rules_lock:
            version = int(document.get("version", 0))
            if version in (self.rules.version, self._refused_version):
                return
            try:
                self.rules.install(document)
            except RuleError:  # not confirmed: the engine records the fault as failed and withdraws it
                self._refused_version = version
                return
            counts = dict(self.rules.matched)
            self._told_matched = {k for k, v in counts.items() if v}
        link.matched(counts)  # before the version: the heal reads the counts once every layer has applied it
        link.applied(version)

    def watch_rules(self) -> None:
        """Background: apply a new rules file within ``RULES_POLL_S`` even when no operation comes."""
        while not self._stop.wait(RULES_POLL_S):
            try:
                self.reload_rules()
            except Exception:  # a bad rules file must not kill the server; the engine times out and says so
                continue

    def digest(self, relpath: str) -> tuple[str, int]:
        """A file's digest read beneath the backing directory (never through a link)."""
        fd = open_beneath(self.root, relpath, os.O_RDONLY | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise IsADirectoryError(errno.EISDIR, "not a regular file", relpath)
            return self.digests.of_open(fd)
        finally:
            os.close(fd)

    def step_for(self, relpath: str, caller: Caller) -> tuple[int | None, str | None]:
        """A save's step and where it came from (chaos.storage.record.save_step)."""
        return save_step(relpath, *self.recorder.progress(caller.node))

    def _new_handle(self, fd: int, relpath: str, caller: Caller, flags: int, created: bool) -> int:
        writable = bool(flags & _WRITE_FLAGS)
        saving = writable and (created or bool(flags & os.O_TRUNC)) and not self.ours(caller)
        h = Handle(fd, relpath, caller, writable, saving)
        if writable:
            h.running = self.digests.writing(fd, from_start=saving)
        if saving:
            h.step, h.step_from = self.step_for(relpath, caller)
        with self._handles_lock:
            self.handles[fd] = h
        return fd

    def announce(self, h: Handle, hold: bool = True, at: float | None = None) -> None:
        """Write a save's ``checkpoint_save_started`` (once), held if paused on (``at``: see :meth:`emit`).

        Not in ``create``/``open``: the kernel holds the directory's lock through a create, so a save held there
        would hold every other process's lookups and creates in the checkpoint directory. At its first write (or
        its close, for an empty file) only the file is held, and nothing has been written yet."""
        with h.lock:
            first = h.saving and not h.announced
            h.announced = True
        if first and self.emit(Ev.CHECKPOINT_SAVE_STARTED, h.relpath, h.caller, hold=hold, at=at, step=h.step,
                               **_step_from(h.step_from)):
            self.survived(HOLD_GRACE_S)

    # ------------------------------------------------------------------ metadata
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        try:
            if fh is not None:
                st = os.fstat(fh)
            else:
                with parent_of(self.root, self.rel(path)) as (parent, name):
                    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError as exc:
            raise fuse.FuseOSError(exc.errno or errno.EIO) from None
        return {"st_mode": st.st_mode, "st_ino": st.st_ino, "st_nlink": st.st_nlink, "st_uid": st.st_uid,
                "st_gid": st.st_gid, "st_size": st.st_size, "st_atime": st.st_atime_ns,
                "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns, "st_blocks": st.st_blocks,
                "st_blksize": st.st_blksize}

    def readdir(self, path: str, fh: int) -> list[str]:
        with self.as_caller():
            fd = open_beneath(self.root, self.rel(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            return [".", "..", *os.listdir(fd)]
        finally:
            os.close(fd)

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.fstatvfs(self.root)
        return {key: getattr(st, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                   "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def access(self, path: str, amode: int) -> int:
        with self.as_caller(), parent_of(self.root, self.rel(path)) as (parent, name):
            # effective ids: the thread's fsuid is what the backing filesystem checks
            if not os.access(name, amode, dir_fd=parent, effective_ids=True, follow_symlinks=False):
                raise fuse.FuseOSError(errno.EACCES)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        with self.as_caller(), parent_of(self.root, self.rel(path)) as (parent, name):
            if self.unprivileged() and not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                mode &= ~_SET_ID  # no setuid/setgid file from a user through the layer
            os.chmod(name, mode, dir_fd=parent)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        uid, gid = (-1 if uid == _NO_ID else uid), (-1 if gid == _NO_ID else gid)
        caller_uid = fuse.fuse_get_context()[0]
        if self.unprivileged() and uid not in (-1, caller_uid):  # only root gives a file away (as the kernel says)
            raise fuse.FuseOSError(errno.EPERM)
        with self.as_caller(), parent_of(self.root, self.rel(path)) as (parent, name):
            os.chown(name, uid, gid, dir_fd=parent, follow_symlinks=False)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        with self.as_caller(), parent_of(self.root, self.rel(path)) as (parent, name):
            if times:
                os.utime(name, ns=times, dir_fd=parent, follow_symlinks=False)
            else:
                os.utime(name, dir_fd=parent, follow_symlinks=False)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        if self.unprivileged():
            mode &= ~stat.S_ISUID
        with self.as_caller(), parent_of(self.root, self.rel(path)) as (parent, name):
            os.mkdir(name, mode, dir_fd=parent)
        return 0

    def rmdir(self, path: str) -> int:
        with self.as_caller(), parent_of(self.root, self.rel(path)) as (parent, name):
            os.rmdir(name, dir_fd=parent)
        return 0

    def readlink(self, path: str) -> str:
        with self.as_caller(), parent_of(self.root, self.rel(path)) as (parent, name):
            return os.readlink(name, dir_fd=parent)

    def symlink(self, target: str, source: str) -> int:
        with self.as_caller(), parent_of(self.root, self.rel(target)) as (parent, name):
            os.symlink(source, name, dir_fd=parent)
        return 0

    def link(self, target: str, source: str) -> int:
        with self.as_caller(), parent_of(self.root, self.rel(source)) as (sparent, sname), \
                parent_of(self.root, self.rel(target)) as (tparent, tname):
            os.link(sname, tname, src_dir_fd=sparent, dst_dir_fd=tparent, follow_symlinks=False)
        return 0

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if fh is not None:
            os.ftruncate(fh, length)
            self.digests.truncated(os.fstat(fh).st_ino)
        else:
            with self.as_caller():
                fd = open_beneath(self.root, self.rel(path), os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.ftruncate(fd, length)
                self.digests.truncated(os.fstat(fd).st_ino)
            finally:
                os.close(fd)
        with self._rules_lock:  # power loss cannot bring back the bytes cut here (lost_writes)
            self.rules.truncated(self.rel(path), length, self.caller().node)
        return 0

    # ------------------------------------------------------------------ files
    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        rel, caller = self.rel(path), self.caller()
        self.obey("open_write", rel, caller)
        if self.unprivileged():
            mode &= ~_SET_ID
        with self.as_caller():
            fd = open_beneath(self.root, rel, flags | os.O_CREAT, mode)
        return self._new_handle(fd, rel, caller, flags, created=True)

    def open(self, path: str, flags: int) -> int:
        rel, caller = self.rel(path), self.caller()
        self.obey("open_write" if flags & _WRITE_FLAGS else "open_read", rel, caller)
        with self.as_caller():
            fd = open_beneath(self.root, rel, flags)
        if flags & os.O_TRUNC and flags & _WRITE_FLAGS:
            with self._rules_lock:  # rewritten in place: until an fsync, a power loss leaves it empty (lost_writes)
                self.rules.truncated(rel, 0, caller.node)
        return self._new_handle(fd, rel, caller, flags, created=False)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self.counts["read"] += 1
        h = self.handles.get(fh)
        if h is not None and not self.ours(h.caller):
            self.obey("read", h.relpath, h.caller, size)
            if not h.writable and not h.read_seen and self.loaded(h):
                self.survived(HOLD_GRACE_S)
        return os.pread(fh, size, offset)

    def loaded(self, h: Handle, hold: bool = True, at: float | None = None) -> bool:
        """A read-only handle's ``checkpoint_loaded`` (once): at its first read that reaches the server, else at
        its close. Two processes that open a file at once share the kernel's page cache: the second one's reads
        may never reach the server, yet it loaded the file (both ranks of a job resuming, measured). Returns
        whether it held."""
        with h.lock:
            first, h.read_seen = not h.read_seen, True
        if not first:
            return False
        sha, size = self.digests.of_handle(h.fd)
        known, step = self.recorder.saved_step(sha)
        return self.emit(Ev.CHECKPOINT_LOADED, h.relpath, h.caller, hold=hold, at=at, sha256=sha, bytes=size,
                         step=step if known else None)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self.counts["write"] += 1
        h = self.handles.get(fh)
        if h is None or self.ours(h.caller):
            n = os.pwrite(fh, data, offset)
            if h is not None and h.running is not None:
                h.running.drop()
            return n
        if not h.announced:
            self.announce(h)
        self.obey("write", h.relpath, h.caller, len(data))
        n = os.pwrite(fh, data, offset)
        if h.running is not None:
            h.running.feed(data if n == len(data) else data[:n], offset)
        self._wrote(h, offset, n)
        return n

    def _wrote(self, h: Handle, offset: int, n: int) -> None:
        """After ``n`` bytes were written at ``offset``: the save's progress and the rules' record of them."""
        progress = None
        with h.lock:
            h.clean = False
            h.written += n
            if h.saving and h.written >= h.next_progress:
                while h.next_progress <= h.written:
                    h.next_progress += PROGRESS_EVERY
                progress = h.written
        with self._rules_lock:
            self.rules.wrote(h.relpath, h.caller.node, offset, n)
        if progress is not None:
            self.emit(Ev.CHECKPOINT_WRITE_PROGRESS, h.relpath, h.caller, written=progress, step=h.step)

    def flush(self, path: str, fh: int) -> int:
        h = self.handles.get(fh)
        if h is not None:
            self._fed(h)
            dying = exiting(fuse.fuse_get_context()[2])
            if not h.announced:
                self.announce(h, hold=not dying)
            with h.lock:
                h.clean = not dying
                h.closed_path = h.relpath
            if h.saving and not dying:
                self.digests.expect(fh)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        h = self.handles.get(fh)
        if h is not None:
            self.obey("fsync", h.relpath, h.caller)
            self._fed(h)  # passed through: the bytes the rules must count as durable from here
        os.fdatasync(fh) if datasync else os.fsync(fh)
        if h is not None and not self.ours(h.caller):
            with self._rules_lock:
                self.rules.synced(h.relpath)
        return 0

    def release(self, path: str, fh: int) -> int:
        with self._handles_lock:
            h = self.handles.pop(fh, None)
        if self.worker is not None:
            return self._release_later(h, fh)
        try:
            if h is not None and not self.ours(h.caller):
                if not h.announced:
                    self.announce(h, hold=False)
                if not h.writable and not h.read_seen:
                    self.loaded(h, hold=False)
                with self._rules_lock:
                    self.rules.check("release", h.relpath, h.caller.node)
                if h.saving and h.clean:
                    self._finished(h)
        finally:
            self._close(h, fh)
        return 0

    def _close(self, h: Handle | None, fh: int) -> None:
        """A released handle's descriptor closed, once the digests know whether its bytes all arrived."""
        if h is not None and h.saving:
            self.digests.arrived(fh)
        if h is not None and h.writable:
            self.digests.written(fh, h.running)
        os.close(fh)

    def _finished(self, h: Handle, at: float | None = None) -> None:
        """The save closed cleanly: its digest (read back through the handle, off the writer's path) and event."""
        sha, size = self.digests.of_handle(h.fd, h.running)
        self.emit(Ev.CHECKPOINT_SAVE_FINISHED, h.closed_path or h.relpath, h.caller, hold=False, at=at, sha256=sha,
                  bytes=size, step=h.step, **_step_from(h.step_from))

    # ------------------------------------------------------------------ passthrough (storage.passthrough)
    def passthrough_offered(self, offered: bool) -> None:
        """INIT's answer. A kernel that does not offer passthrough ends the mount (never a silent fallback to the
        server's path: the run asked to measure the fast one); :func:`serve` then says why."""
        self.offered = offered
        self._status({"offered": offered})
        if self.offer_fd is not None:  # the host wrapper waits for this line before it runs the node's command
            fd, self.offer_fd = self.offer_fd, None
            try:
                os.write(fd, json.dumps({"offered": offered}).encode() + b"\n")
            except OSError:
                pass  # the wrapper is gone: nothing runs on this mount
            finally:
                os.close(fd)
        if not offered:
            threading.Thread(target=lambda: (time.sleep(0.2), unmount(self.mount)), daemon=True).start()

    def opened(self, fh: int, passed: bool) -> None:
        """After an open or create the passthrough FUSE class answered: a passed-through save is announced now
        (its writes never reach the server), never held (the scenario policy refuses holds with passthrough)."""
        h = self.handles.get(fh)
        if h is None or not passed:
            return
        st = os.fstat(fh)
        h.passed, h.seen = True, (0 if h.saving else st.st_size, st.st_mtime_ns)
        if h.saving:
            self.announce(h, hold=False)

    def _fed(self, h: Handle) -> None:
        """A passed-through handle at flush/fsync: what was written since the server last looked, from fstat,
        for the rules (a power loss's dirty files, a quota's count). A saving handle's bytes are all new."""
        if not h.passed or not h.writable or self.ours(h.caller):
            return
        st = os.fstat(h.fd)
        before, mtime = h.seen
        if st.st_mtime_ns == mtime and not (h.saving and st.st_size > before):
            return
        h.seen = (st.st_size, st.st_mtime_ns)
        n = max(0, st.st_size - before)
        with h.lock:
            h.clean = False
            h.written += n
        with self._rules_lock:
            self.rules.wrote(h.relpath, h.caller.node, before, n)

    def _release_later(self, h: Handle | None, fh: int) -> int:
        """A passthrough server's release: the rules' look now, the digest (read back by the still-open
        descriptor: a file renamed or deleted meanwhile still gets its event) and events on the worker thread, at
        this operation's time. libfuse's high-level API holds the path's lock through a release callback and a
        rename waits for it: a synchronous read-back sha256 (~11 ms per 9 MB) sat on every save's rename."""
        at = time.time()
        if h is not None and not self.ours(h.caller):
            with self._rules_lock:
                self.rules.check("release", h.relpath, h.caller.node)
        assert self.worker is not None
        try:
            self.worker.submit(self._released, h, fh, at)
        except RuntimeError:  # drained already (a release after the unmount began): done here, not lost
            self._released(h, fh, at)
        return 0

    def _released(self, h: Handle | None, fh: int, at: float) -> None:
        try:
            if h is not None and not self.ours(h.caller):
                self.announce(h, hold=False, at=at)
                if not h.writable:
                    self.loaded(h, hold=False, at=at)
                if h.saving and h.clean:
                    self._finished(h, at)
        except OSError as exc:
            log(f"release of {h.relpath if h else fh}: {exc}")
        finally:
            self._close(h, fh)

    def _renamed_later(self, src: str, dst: str, caller: Caller, replaced: bool, at: float) -> None:
        """A passthrough server's rename events: the renamed file is opened now (by what it is now, not by a
        path the worker would resolve later), digested and announced on the worker at this operation's time."""
        try:
            fd = open_beneath(self.root, dst, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return
        assert self.worker is not None
        try:
            self.worker.submit(self._renamed_events, fd, src, dst, caller, replaced, at)
        except RuntimeError:  # drained already: done here
            self._renamed_events(fd, src, dst, caller, replaced, at)

    def _renamed_events(self, fd: int, src: str, dst: str, caller: Caller, replaced: bool, at: float) -> None:
        try:
            # of_handle, not of_open: one worker thread, so no wait for a release still queued behind this job
            # (it would wait here for itself); whichever comes first reads the file, the other finds it cached
            sha, size = self.digests.of_handle(fd)
        except OSError:
            return
        finally:
            os.close(fd)
        self._rename_events(src, dst, caller, replaced, sha, size, at)

    def _rename_events(self, src: str, dst: str, caller: Caller, replaced: bool, sha: str, size: int,
                       at: float | None = None) -> None:
        """A rename's events: what it replaced and moved, and the save it finished."""
        if replaced:
            self.emit(Ev.CHECKPOINT_DELETED, dst, caller, hold=False, at=at, step=step_in_name(dst),
                      replaced_by=self.full(src))
        self.emit(Ev.CHECKPOINT_DELETED, src, caller, hold=False, at=at, step=step_in_name(src),
                  renamed_to=self.full(dst))
        progress, gap = self.recorder.progress(caller.node)
        known, saved = self.recorder.saved_step(sha)
        # the step the bytes were saved with (under the temporary name) stands for the job's progress now
        step, step_from = save_step(dst, saved if known and saved is not None else progress, gap)
        # never held: the kernel holds both directories' locks through a rename
        self.emit(Ev.CHECKPOINT_SAVE_FINISHED, dst, caller, hold=False, at=at, sha256=sha, bytes=size, step=step,
                  renamed_from=self.full(src), **_step_from(step_from))

    def _status(self, fields: dict[str, Any]) -> None:
        """``passthrough.json`` in the control directory (what the engine's layer waits for, and a reader's proof
        that passthrough happened), and the same in the server's log."""
        log(json.dumps(fields))
        if self.control is None:
            return
        path = os.path.join(self.control, "passthrough.json")
        try:
            with open(path) as f:
                fields = {**json.load(f), **fields}
        except (OSError, ValueError):
            pass
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(fields, f)
        os.replace(tmp, path)

    def drain(self) -> None:
        """Every release's and rename's events written (before the mount goes)."""
        if self.worker is not None:
            self.worker.shutdown(wait=True)

    def unlink(self, path: str) -> int:
        rel, caller = self.rel(path), self.caller()
        self.obey("unlink", rel, caller)
        with self.as_caller(), parent_of(self.root, rel) as (parent, name):
            os.unlink(name, dir_fd=parent)
        if not self.ours(caller):
            self.emit(Ev.CHECKPOINT_DELETED, rel, caller, hold=False, step=step_in_name(rel))
        return 0

    def rename(self, old: str, new: str) -> int:
        src, dst, caller = self.rel(old), self.rel(new), self.caller()
        self.obey("rename", src, caller)
        with self.as_caller(), parent_of(self.root, src) as (sparent, sname), \
                parent_of(self.root, dst) as (dparent, dname):
            replaced = _exists(dparent, dname)
            os.rename(sname, dname, src_dir_fd=sparent, dst_dir_fd=dparent)
        with self._handles_lock:  # open files follow, also those inside a renamed directory
            for h in self.handles.values():
                if h.relpath == src or h.relpath.startswith(src + "/"):
                    h.relpath = dst + h.relpath[len(src):]
        if self.ours(caller):
            return 0
        with self._rules_lock:
            self.rules.renamed(src, dst)
        if self.worker is not None:
            self._renamed_later(src, dst, caller, replaced, time.time())
            return 0
        try:
            sha, size = self.digest(dst)
        except OSError:  # a directory, or not a regular file: no checkpoint was saved by this rename
            return 0
        self._rename_events(src, dst, caller, replaced, sha, size)
        return 0

    def init_with_config(self, conn: Any, config: Any) -> None:
        """Large writes (fewer round trips per checkpoint), then the rules watcher."""
        if conn is not None:
            conn.max_write = MAX_WRITE
            conn.max_readahead = MAX_WRITE
        threading.Thread(target=self.watch_rules, name="torch-chaos-storage-rules", daemon=True).start()
        threading.Thread(target=self.widen_readahead, name="torch-chaos-storage-readahead", daemon=True).start()

    def widen_readahead(self) -> None:
        """Loads read 128 KiB per request (the kernel's default readahead for a FUSE mount, which ``init`` can
        only lower): raise it to 1 MiB where this process may (root), best effort. Runs once the mount answers."""
        try:
            st = os.stat(self.mount)  # served once INIT is answered: never from inside init itself
            with open(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb", "w") as f:
                f.write(str(MAX_WRITE >> 10))
        except OSError:
            pass

    def destroy(self, path: str) -> None:
        self._stop.set()
        self.drain()


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def mount_options(run_id: str) -> dict[str, Any]:
    """How the mount shows in /proc/mounts (``torch-chaos-<run>`` on ``fuse.torch-chaos``: chaos cleanup finds it)
    and who may use it (every user when root: containers' processes are other users on some machines)."""
    options: dict[str, Any] = {"fsname": f"torch-chaos-{run_id}", "subtype": "torch-chaos", "max_threads": MAX_THREADS,
                               # the kernel checks each caller's rights on the files' modes and owners
                               "default_permissions": True}
    if os.geteuid() == 0:
        options["allow_other"] = True
    return options


def serve(mount: str, events: str, control: str | None, backing: str | None = None, run_id: str = "run",
          pause_on: frozenset[str] = frozenset(), engine_pid: int | None = None,
          rules_class: type[Rules] = Rules, progress_regex: str | None = None,
          logs: dict[str, str] | None = None, link: Link | None = None, passthrough: bool = False,
          offer_fd: int | None = None) -> None:
    """Mount and serve until unmounted (``fusermount3 -u``) or signalled; blocks.

    ``rules_class`` gets the backing directory as a path that reaches the bytes underneath the mount. With
    ``link`` (a layer on a node's host), events and rules go over the history channel. ``passthrough``: the
    kernel moves the files' bytes (:mod:`chaos.storage.passthrough`); a kernel or libfuse that cannot is an
    error (RuntimeError), never the server's path instead; ``offer_fd`` gets INIT's word on it (one JSON line)."""
    fuse_class: Any = fuse.FUSE
    if passthrough:
        fuse_class = passthrough_class(fuse)
    backing_fd = os.open(backing or mount, os.O_RDONLY | os.O_DIRECTORY)
    rules = rules_class(Path(f"/proc/{os.getpid()}/fd/{backing_fd}"))
    recorder = Recorder(events, pause_on, progress_regex=progress_regex, logs=logs, link=link)
    server = StorageServer(backing_fd, os.path.abspath(mount), recorder, rules, control, engine_pid, link,
                           passthrough=passthrough, offer_fd=offer_fd)
    server.reload_rules()
    try:
        fuse_class(server, mount, foreground=True, **mount_options(run_id))
    finally:
        server.drain()
    if passthrough:
        server._status(summary(server.passthrough_table, server.offered, server.counts))
        if not server.offered:
            raise RuntimeError("storage.passthrough: the kernel did not offer FUSE passthrough at INIT (it needs "
                               "Linux >= 6.9 with CONFIG_FUSE_PASSTHROUGH=y)")
