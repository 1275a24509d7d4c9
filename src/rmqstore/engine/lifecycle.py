"""The store's lifecycle (what ``DefaultMessageStore``'s ``load``, ``start`` and ``shutdown`` do
around its services): the writer's lock and ``abort`` file, recovery's call site, the services
started in order and shut down in the reverse order (:class:`ServiceChain`), the files closed at the
end, and the mapped files retired by retention or a reader's refresh.

The facade (:class:`~rmqstore.message_store.MessageStore`) owns one :class:`StoreLifecycle` and one
:class:`ServiceChain` and calls them in the order its ``open`` and ``close`` show.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import threading
import time
import types
from typing import Iterator, Protocol, TypeVar

from ..errors import CorruptRecordError, StoreIOError, StoreLockedError
from ..io import paths
from ..io.mapped_file import fsync_dir
from . import recovery as R
from .contract import StoreParts
from .reput import ReputMessageService

log = logging.getLogger("rmqstore.message_store")

#: Seconds a mapping of a file deleted by retention stays open for readers that still hold it.
RETIRE_GRACE_S = 5.0
#: store directories this process holds the writer lock of
_LOCKED_PATHS: set[str] = set()
_LOCKED_GUARD = threading.Lock()


def _lock_file_holder(lock_path: str) -> int | None:
    """PID of the process holding a store's writer lock (None when nobody holds it). A reader
    asks for a shared lock on the byte the writer locks exclusively; the PID is the writer's
    ``abort`` file (-1 when unreadable)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0)
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EAGAIN):
            return None
        try:
            with open(paths.abort_path(os.path.dirname(lock_path)), encoding="ascii") as fh:
                return int(fh.read().strip() or -1)
        except (OSError, ValueError):
            return -1
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
        return None
    finally:
        os.close(fd)


def lock_holder(store_dir: str | os.PathLike) -> int | None:
    """PID of the process holding the writer lock of the store at ``store_dir`` (this process's own
    when it has the store open for writing; -1 when the PID is unknown), None when nobody holds it.
    The lock file of a store this process holds is never opened here: closing any descriptor of it
    would drop the process's lock (POSIX record locks belong to the process)."""
    path = os.path.abspath(os.fspath(store_dir))
    with _LOCKED_GUARD:
        if path in _LOCKED_PATHS:
            return os.getpid()
    return _lock_file_holder(paths.lock_path(path))


@contextlib.contextmanager
def writer_lock(store_dir: str | os.PathLike) -> Iterator[None]:
    """The store's writer lock, held without opening the store: for an offline edit of its config
    files (``rmqstore reset-offset``) that no broker may start in the middle of.
    :class:`StoreLockedError` when another writer holds it."""
    life = StoreLifecycle(types.SimpleNamespace(path=os.path.abspath(os.fspath(store_dir))))  # type: ignore[arg-type]
    life.take_lock()
    try:
        yield
    finally:
        life.unlock()


def as_store_io_error(e: OSError, store_path: str) -> StoreIOError:
    """An operating-system error while opening (a read-only directory, missing permissions) as a
    :class:`StoreIOError` naming the file."""
    return StoreIOError(f"cannot open the store: {e.strerror or e}", path=e.filename or store_path)


class Service(Protocol):
    """What the facade starts and stops: the reput, the flush service, the derived-files keeper,
    and any service added later (the HA service)."""

    def start(self) -> None:
        """Start working (a thread, a listener, a check at open)."""

    def shutdown(self) -> None:
        """Stop; called once, in the reverse order of the starts, before the final flush."""


S = TypeVar("S", bound=Service)


class ServiceChain:
    """The store's running services: each started in the order given, all shut down in the
    reverse order (the last started first), as ``DefaultMessageStore`` starts and stops its own."""

    def __init__(self) -> None:
        self._running: list[Service] = []
        self._lock = threading.Lock()

    @property
    def running(self) -> tuple[Service, ...]:
        """The started services, in start order."""
        return tuple(self._running)

    def start(self, *services: Service) -> None:
        """Start ``services`` one after the other; one that raises is not registered (those
        started before it are, and :meth:`shutdown` stops them)."""
        for s in services:
            self.add(s)

    def add(self, service: S) -> S:
        """Start one service now and register it (it is shut down before those started before it);
        returns it."""
        service.start()
        with self._lock:
            self._running.append(service)
        return service

    def shutdown(self) -> bool:
        """Shut the services down, last started first; False when one raised (logged; the others
        are still shut down)."""
        ok = True
        while True:
            with self._lock:
                if not self._running:
                    return ok
                s = self._running.pop()
            try:
                s.shutdown()
            except Exception:  # noqa: BLE001 - the others must still stop, the store still close
                log.exception("shutting down %r failed", s)
                ok = False


class StoreLifecycle:
    """Lock, ``abort`` file, recovery's call site, closing the files and retiring mappings of one store."""

    def __init__(self, store: StoreParts):
        self.store = store
        self._lock_fd: int | None = None
        self._retired: list[tuple[float, object]] = []

    # --- the writer's lock and abort file -----------------------------------------------------
    @property
    def locked(self) -> bool:
        """This store holds the writer lock (a writer, until :meth:`unlock`)."""
        return self._lock_fd is not None

    def take_lock(self) -> None:
        """The writer lock: one writer per store directory, in this process and across processes
        (:class:`StoreLockedError` otherwise)."""
        store_dir = self.store.path
        lock_path = paths.lock_path(store_dir)
        with _LOCKED_GUARD:
            if store_dir in _LOCKED_PATHS:
                raise StoreLockedError("store is already open for writing in this process", path=lock_path)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EACCES, errno.EAGAIN):
                    raise StoreLockedError("another process holds the store lock (a running broker or writer?)",
                                           path=lock_path) from e
                raise StoreIOError(f"cannot lock: {e.strerror}", path=lock_path) from e
            os.pwrite(fd, b"lock", 0)
            _LOCKED_PATHS.add(store_dir)
            self._lock_fd = fd

    def unlock(self) -> None:
        """Release the writer lock (the last step of a close)."""
        if self._lock_fd is None:
            return
        with _LOCKED_GUARD:
            _LOCKED_PATHS.discard(self.store.path)
        os.close(self._lock_fd)
        self._lock_fd = None

    def last_exit_ok(self) -> bool:
        """No ``abort`` file: the last writer closed cleanly (or there was none)."""
        return not os.path.exists(paths.abort_path(self.store.path))

    def write_abort(self) -> None:
        """``abort`` holds the writer's PID while the store is open; it is fsync'd (file and
        directory) so that a crash after open is always recovered as abnormal."""
        abort_path = paths.abort_path(self.store.path)
        try:
            fd = os.open(abort_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, str(os.getpid()).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise StoreIOError(f"cannot write the abort file: {e.strerror}", path=abort_path) from e
        fsync_dir(self.store.path)

    def remove_abort(self) -> None:
        """A clean close's last word: no ``abort`` file (the next open recovers as normal)."""
        try:
            os.unlink(paths.abort_path(self.store.path))
            fsync_dir(self.store.path)
        except FileNotFoundError:
            pass

    # --- opening ------------------------------------------------------------------------------
    def load_consumer_offsets(self) -> None:
        """Load ``config/consumerOffset.json``; an unreadable file (and ``.bak``) does not make the
        store unopenable: it is logged, kept beside as ``.damaged`` by a writer (the next persist
        would replace it), and the groups start without committed offsets."""
        store = self.store
        try:
            store.consumer_offsets.load()
        except CorruptRecordError as e:
            log.error("%s: %s; consumer groups start without committed offsets", store.path, e)
            if not store.read_only and e.path and os.path.exists(e.path):
                shutil.copyfile(e.path, e.path + ".damaged")

    def recover(self, last_exit_ok: bool, dropped_index: list, live_writer_pid: int | None
                ) -> tuple[R.RecoveryPlan, R.RecoveryReport, ReputMessageService]:
        """FORMAT.md §9 with the changes described in :mod:`.recovery`: each consume queue finds
        its own end, a plan is computed from the files, then a writer applies it to the files and
        a reader to its in-memory view only. Returns the plan, the report, and the reput (not
        started) positioned where dispatch resumes."""
        store = self.store
        t0 = R.now()
        for cq in store.consume_queues.values():
            cq.recover()
        pre = R.plan_before_scan(store, last_exit_ok, dropped_index)
        if not store.read_only and R.one_pass_applies(store, pre):
            plan, report = R.recover_after_crash(store, pre)  # (after a crash: the same plan and files, one walk)
        else:
            plan = R.plan_from_scan(store, pre)
            report = R.apply_read_view(store, plan) if store.read_only else R.apply_recovery(store, plan)
        if store.read_only:
            resume = plan.end_offset
        else:
            resume = max(report.redispatch_from, plan.end_offset) if plan.mode != "empty" else plan.end_offset
        reput = ReputMessageService(store, report.redispatch_from)
        reput.reput_from = resume
        report.seconds = R.now() - t0
        if store.read_only and live_writer_pid is not None and report.mode != "empty":
            report.mode = "live"  # a reader of a store a writer has open: no crash, nothing to recover
        if live_writer_pid is not None and not report.corrupt_records:
            pid = "" if live_writer_pid < 0 else f" (pid {live_writer_pid})"
            log.warning("%s: a live writer%s has the store open: reading what it has written so far, up to "
                        "offset %d", store.path, pid, report.end_offset)
        elif report.mode != "empty" and (not report.clean or report.mode == "abnormal"):
            log.warning("%s: %s", store.path, report.summary())
        return plan, report, reput

    # --- mappings retired, files closed ---------------------------------------------------------
    def retire(self, obj) -> None:
        """Close a mapping later (readers may still hold it); its file is already deleted."""
        self._retired.append((time.monotonic(), obj))

    def close_retired(self, force: bool = False) -> None:
        """Close the retired mappings older than :data:`RETIRE_GRACE_S` (``force``: all of them)."""
        if not self._retired:
            return
        now = time.monotonic()
        keep = []
        for t, obj in self._retired:
            if force or now - t >= RETIRE_GRACE_S:
                try:
                    obj.close()
                except Exception:  # noqa: BLE001
                    log.exception("closing a retired mapping failed")
            else:
                keep.append((t, obj))
        self._retired = keep

    def close_files(self) -> None:
        """Close the index, the consume queues, the commitlog and every retired mapping (after the
        services are shut down and a writer's final flush)."""
        store = self.store
        store.index_service.close()
        for cq in store.consume_queues.values():
            cq.close()
        store.commit_log.close()
        self.close_retired(force=True)
