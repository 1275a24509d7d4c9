"""MessageStore: the facade (mirrors ``DefaultMessageStore``).

Opening takes the lock (writers only), loads segments, consume queues, index and checkpoint,
recovers (FORMAT.md §9: :mod:`.engine.recovery` plans from the files, then applies the plan),
starts the dispatcher and the flusher, and creates the ``abort`` file.
A clean :meth:`close` waits for dispatch, flushes everything and removes ``abort``.

Read-only opens take no lock, never create, truncate or delete a file (every mmap is read-only) and
compute the same recovery plan (:attr:`recovery_plan`) without applying it, reporting the would-be
recovery in :attr:`recovery_report`.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import shutil
import threading
import time
import weakref
from typing import Callable, Iterable

import numpy as np

from .config import EMBEDDED, MessageStoreConfig
from .layout import is_store_dir, resolve_config
from .engine import recovery as R
from .engine import retention as RT
from .engine import verify as V
from .engine.checkpoint import StoreCheckpoint
from .engine.commit_log import CommitLog
from .engine.consume_queue import ConsumeQueue
from .engine.consumer_offsets import CONSUMER_OFFSET_FILE, ConsumerOffsetManager
from .engine.dispatch import extract_dispatch_columns, iter_record_batches
from .engine.reput import ReputMessageService
from .engine.index import IndexFile, IndexService
from .format import index_file as IF
from .format import message as M
from .io.mapped_file import atomic_write_text, fsync_dir, fsync_dirty_dirs
from .errors import (CorruptRecordError, ReadOnlyStoreError, RmqStoreError, StoreIOError,
                     StoreLockedError, StoreNotFoundError)
from .io import paths
from .store_reads import StoreReads
from .types import Message, PutMessageResult, PutMessageStatus

log = logging.getLogger(__name__)

#: Seconds a mapping of a file deleted by retention stays open for readers that still hold it.
RETIRE_GRACE_S = 5.0
_LOCKED_PATHS: set[str] = set()
_LOCKED_GUARD = threading.Lock()
#: every queue's max offset at the last clean close (rmqstore's own file; see _write_queue_extents)
QUEUE_EXTENTS_FILE = paths.QUEUE_EXTENTS_FILE
#: beyond upstream: size and mtime of every index file at the last clean close; a file that differs
#: at the next open was changed by something else, and is checked against the commitlog
INDEX_STATS_FILE = paths.INDEX_STATS_FILE
#: stores open in this process, closed cleanly at normal interpreter exit (no abnormal recovery
#: next time for a program that forgot ``close()``)
_OPEN_STORES: "weakref.WeakSet[MessageStore]" = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    for store in list(_OPEN_STORES):
        try:
            store.close()
        except Exception:  # noqa: BLE001 - the next open recovers
            log.exception("closing %s at interpreter exit failed", store.path)


def _as_store_io_error(e: OSError, store_path: str) -> StoreIOError:
    """An operating-system error while opening (a read-only directory, missing permissions) as a
    :class:`StoreIOError` naming the file."""
    return StoreIOError(f"cannot open the store: {e.strerror or e}", path=e.filename or store_path)


def _lock_holder(lock_path: str) -> int | None:
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


def _total_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover
        return 8 << 30


def _disk_full_result(cfg: MessageStoreConfig) -> PutMessageResult:
    why = ("the free space would not hold the next commitlog, consume-queue and index files"
           if cfg.disk_policy == EMBEDDED else "usage is past diskSpaceWarningLevelRatio (retention frees space)")
    return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error=f"disk full: {why}")


def _refused(cfg: MessageStoreConfig) -> PutMessageResult:
    if cfg.broker_role == "SLAVE":  # HA: upstream DefaultMessageStore refuses puts on a slave
        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error="the store is a SLAVE: it takes "
                                "messages only from its master")
    return _disk_full_result(cfg)


class MessageStore(StoreReads):
    """A RocketMQ store directory, opened for writing or read-only (the reads: :class:`StoreReads`)."""

    def __init__(self, path: str, cfg: MessageStoreConfig, read_only: bool):
        self.path = os.path.abspath(path)
        self.cfg = cfg
        self.read_only = read_only
        self.delay_levels_ms = cfg.delay_levels_ms
        self.commit_log = CommitLog(self.path, cfg, read_only=read_only)
        self.checkpoint = StoreCheckpoint(paths.checkpoint_path(self.path), read_only=read_only)
        self.index_service = IndexService(self.path, cfg, read_only=read_only, checkpoint=self.checkpoint)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.cq_lock = threading.Lock()
        self.reput: ReputMessageService | None = None
        self.recovery_report: R.RecoveryReport | None = None
        #: what recovery computed from the files at open (a writer applied it, a reader did not)
        self.recovery_plan: R.RecoveryPlan | None = None
        self._lock_fd: int | None = None
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
        self._ram = _total_ram()
        self._retired: list[tuple[float, object]] = []
        self._refresh_lock = threading.RLock()
        self.maintenance_lock = threading.RLock()
        self._reput_restarted_at = 0.0
        #: upstream's DISK_FULL running flag: set by retention's space check past
        #: diskSpaceWarningLevelRatio; puts are refused with SERVICE_NOT_AVAILABLE while set
        self.disk_full = False
        #: committed offsets of consumer groups (``config/consumerOffset.json``), shared by the
        #: embedded consumers and the broker
        self.consumer_offsets = ConsumerOffsetManager(os.path.join(self.path, CONSUMER_OFFSET_FILE),
                                                      read_only=read_only)
        #: PID of a live writer in another process when this read-only store was opened (-1: PID unknown)
        self.live_writer_pid: int | None = None
        self._dispatch_listeners: tuple[Callable[[set[tuple[str, int]]], None], ...] = ()
        #: what the open rebuilt from the commitlog (:meth:`_restore_derived_files`): "topic/queue" names
        #: and "index"
        self.derived_files_restored: list[str] = []
        #: every queue's max offset after the open (a clean close writes QUEUE_EXTENTS_FILE when they changed)
        self._extents_at_open: dict[str, int] = {}
        #: size and mtime of the index files at open, and their item counts (a clean close writes
        #: INDEX_STATS_FILE when the counts changed, or the file exists)
        self._index_stats_at_open: dict[str, list[int]] = {}
        self._index_counts_at_open: dict[str, int] = {}
        #: no abort file and no live writer when opened: every record was dispatched
        self._closed_cleanly = False
        #: a reader's temporary consume queues and index (:meth:`_shadow_derived_files`), removed at
        #: close, and the store's own objects they stand in for (what verify checks)
        self._shadow_dir: str | None = None
        self._own_derived: tuple[dict, object] | None = None
        self._stand_in_derived = True
        # --- HA (replication): the running HAService (start_ha), and whether put_message waits for
        # the slaves under SYNC_MASTER (the broker awaits ha.after_put's future instead)
        self.ha = None
        self.ha_wait_in_put = True

    # ==========================================================================================
    # Opening and closing
    # ==========================================================================================
    @classmethod
    def open(cls, path: str | os.PathLike, cfg: MessageStoreConfig | None = None, read_only: bool = False, *,
             stand_in_derived: bool = True) -> "MessageStore":
        """Open (or, writable, create) the store at ``path``; ``cfg`` None: the embedded preset with
        the sizes of the files already there. A read-only open whose consume queues or index are
        missing, damaged or behind the commitlog answers from a scan of the commitlog into temporary
        files (:meth:`_shadow_derived_files`) unless ``stand_in_derived=False`` (what ``verify``
        and tools that judge the files themselves want)."""
        path = os.fspath(path)
        cfg = resolve_config(path, cfg)
        if read_only:
            if not os.path.isdir(path):
                raise StoreNotFoundError("store directory does not exist", path=path)
            if not is_store_dir(path):
                raise StoreNotFoundError("not a message store (no commitlog/, consumequeue/, checkpoint or lock)", path=path)
        else:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as e:
                raise StoreIOError(f"cannot create store directory: {e.strerror}", path=path) from e
        try:
            store = cls(path, cfg, read_only)
            store._stand_in_derived = stand_in_derived
        except OSError as e:
            if isinstance(e, RmqStoreError):
                raise
            raise _as_store_io_error(e, path) from e
        try:
            store._open()
        except BaseException as e:
            store._release(abort_clean=False)
            if isinstance(e, OSError) and not isinstance(e, RmqStoreError):
                raise _as_store_io_error(e, path) from e
            raise
        _OPEN_STORES.add(store)
        return store

    def _take_lock(self) -> None:
        lock_path = paths.lock_path(self.path)
        with _LOCKED_GUARD:
            if self.path in _LOCKED_PATHS:
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
            _LOCKED_PATHS.add(self.path)
            self._lock_fd = fd

    def _open(self) -> None:
        if not self.read_only:
            self._take_lock()
        else:
            self.live_writer_pid = _lock_holder(paths.lock_path(self.path))
        self._load_consumer_offsets()
        abort_path = paths.abort_path(self.path)
        last_exit_ok = not os.path.exists(abort_path)
        self._closed_cleanly = last_exit_ok and self.live_writer_pid is None
        self.commit_log.queue.load()
        self._load_consume_queues()
        dropped_index = self.index_service.load(last_exit_ok)
        self._index_stats_at_open = self._index_stats()
        self._index_counts_at_open = self._index_counts()
        changed = self._index_files_changed(last_exit_ok, dropped_index)
        # checked before recovery, whose re-dispatch may create a fresh index file
        index_lost = (self.cfg.message_index_enable and not dropped_index and bool(self.commit_log.queue.files)
                      and (not self.index_service.files or self._index_has_a_hole()))
        self._recover(last_exit_ok, dropped_index)
        if changed and not index_lost:
            index_lost = self._index_files_damaged(changed)
        if self.read_only and self.live_writer_pid is None and self._stand_in_derived:
            self._shadow_derived_files(index_lost)
        if not self.read_only:
            self._write_abort(abort_path)
            # ASYNC_FLUSH: every append wakes the dispatcher (the bound method itself: no wrapper
            # call on the put path); SYNC_FLUSH wakes it after the group commit
            self.commit_log.on_append = None if self.cfg.sync_flush else self.reput.wake
            self.reput.start()
            self._flusher = threading.Thread(target=self._flush_loop, name="rmqstore-flush", daemon=True)
            self._flusher.start()
            self._restore_derived_files(index_lost)
            self._extents_at_open = {f"{t}/{q}": cq.max_offset for (t, q), cq in sorted(self.consume_queues.items())}

    def _index_counts(self) -> dict[str, int]:
        return {os.path.basename(f.path): f.index_count for f in self.index_service.files}

    def _index_stats(self, paths: list[str] | None = None) -> dict[str, list[int]]:
        out = {}
        for p in [f.path for f in self.index_service.files] if paths is None else paths:
            try:
                st = os.stat(p)
            except OSError:
                continue
            out[os.path.basename(p)] = [st.st_size, st.st_mtime_ns]
        return out

    def _index_files_changed(self, last_exit_ok: bool, dropped: list) -> list:
        """Index files whose size or mtime differ from :data:`INDEX_STATS_FILE` (the last clean
        close): something else changed them. Not those the recovery cuts back anyway, nor, after a
        crash or with a live writer, the newest of that close and later ones (a writer appends)."""
        try:
            with open(os.path.join(self.path, INDEX_STATS_FILE), encoding="utf-8") as fh:
                table = json.load(fh)
        except (OSError, ValueError):
            return []
        if not isinstance(table, dict):
            return []
        files = [f for f in self.index_service.files if f not in dropped]
        if not last_exit_ok or self.live_writer_pid is not None:
            # a writer since that close appended to the then newest file and to files it created
            # (as their names grow): only the older ones must be as they were
            newest = max(table, default="")
            files = [f for f in files if os.path.basename(f.path) < newest]
        now = self._index_stats_at_open
        return [f for f in files if os.path.basename(f.path) in table
                and table[os.path.basename(f.path)] != now.get(os.path.basename(f.path))]

    def _index_files_damaged(self, changed: list) -> bool:
        """Beyond upstream: index files changed since the last clean close are checked against the
        commitlog (:func:`~rmqstore.engine.verify.index_file_problems`); True when one is damaged
        (a writer then rebuilds the index, a reader answers from a scan)."""
        damaged = False
        for f in changed:
            problems = V.index_file_problems(self, f)
            if problems:
                log.error("%s: index file %s changed since the last clean close and is damaged (%d problem(s), "
                          "e.g. %s)", self.path, f.path, len(problems), problems[0])
                damaged = True
        return damaged

    def _write_queue_extents(self, table: dict[str, int]) -> None:
        """Beyond upstream: every queue's max offset at a clean close, in ``config/`` (a file
        RocketMQ's broker does not read), so that the next open sees a queue that lost files since.
        Written only when the queues changed or the file exists: opening and closing a broker's
        store without writing leaves every file but the checkpoint as it was."""
        try:
            atomic_write_text(os.path.join(self.path, QUEUE_EXTENTS_FILE), json.dumps(table, indent=0) + "\n")
        except OSError:
            log.exception("%s: the queue extents could not be written (the next open checks less)", self.path)

    def _queues_short_of_extents(self) -> set[tuple[str, int]]:
        """Queues holding fewer units than at the last clean close (their files were lost)."""
        try:
            with open(os.path.join(self.path, QUEUE_EXTENTS_FILE), encoding="utf-8") as fh:
                table = json.load(fh)
        except (OSError, ValueError):
            return set()
        out = set()
        for name, hi in (table.items() if isinstance(table, dict) else ()):
            topic, _, qid = str(name).rpartition("/")
            if not qid.isdigit() or not isinstance(hi, int) or hi <= 0:
                continue  # (a queue asked about but never written has nothing to lose)
            cq = self.consume_queues.get((topic, int(qid)))
            if cq is None or cq.max_offset < hi:
                out.add((topic, int(qid)))
        return out

    def _rebuild_progress(self, what: str, every_s: float = 5.0) -> Callable[[int], None]:
        """A progress callback for a long scan of the commitlog: one log line every ``every_s``
        seconds (offset reached, share of the commitlog, rate); silent for a short one."""
        cl = self.commit_log
        lo, hi = cl.min_offset, max(cl.confirm_offset, cl.min_offset + 1)
        t0 = last = time.monotonic()

        def progress(phy: int) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= every_s:
                last = now
                done = max(0, phy - lo)
                log.warning("%s: %s derived files from the commitlog: %.0f%% (%d of %d MB, %.0f MB/s)", self.path,
                            what, 100 * done / (hi - lo), done >> 20, (hi - lo) >> 20, done / (now - t0) / 1e6)
        return progress

    def _queues_that_lost_units(self) -> set[tuple[str, int]]:
        """Queues with blank units for lost records or a file missing or short in the middle, one
        that starts past 0 although no commitlog segment was ever deleted (its first files are
        gone), one shorter than at the last clean close, or one that recovery cut back (a damaged
        unit) while the commitlog kept all its records."""
        cl = self.commit_log
        short = {k for k, cq in self.consume_queues.items()
                 if cq.gap_units or cq.cut_in_middle or cq.queue.gaps or (cl.min_offset == 0 and cq.min_offset > 0)}
        short |= self._queues_short_of_extents()
        rep = self.recovery_report
        if rep is not None and not rep.cuts:
            for name in rep.consume_queues_truncated:
                topic, _, qid = name.rpartition("/")
                short.add((topic, int(qid)))
        return short

    def _undispatched_queues(self) -> tuple[int, set[tuple[str, int]]]:
        """Where the records after the last dispatched one start (up to the readable end), and the
        queues they belong to: a crash before dispatch, or consume queues that were never there."""
        cl = self.commit_log
        last = max((cq.max_physic_offset for cq in self.consume_queues.values()), default=-1)
        start = cl.min_offset
        if last >= cl.min_offset:
            mf = cl.queue.find(last)
            total = M.I32.unpack_from(mf.mm, last - mf.file_from_offset)[0] if mf is not None else 0
            start = last + total if total >= M.MIN_RECORD_SIZE else last
        out: set[tuple[str, int]] = set()
        cache: dict = {}
        for mf, batch in iter_record_batches(cl.queue, start, cl.confirm_offset):
            cols = extract_dispatch_columns(mf.u8, batch, self.delay_levels_ms, cache)
            tx = batch.sys_flag & M.SYSFLAG_TX_MASK
            for i in np.flatnonzero((tx != M.TX_PREPARED) & (tx != M.TX_ROLLBACK)).tolist():
                out.add((cols.topics[cols.topic_ids[i]], int(batch.queue_id[i])))
        return start, out

    def _shadow_derived_files(self, index_lost: bool) -> None:
        """Beyond upstream, for a reader with no live writer: consume queues that lost units or are
        behind the commitlog (a crash before dispatch, or no ``consumequeue/`` at all) and an index
        that is missing or has a hole are built from the commitlog into a temporary directory and
        answer instead of the store's own (one warning line; the store is not touched; removed at
        close). Opening the store for writing once rebuilds them in place."""
        cl = self.commit_log
        if cl.confirm_offset <= cl.min_offset:
            return
        lost = self._queues_that_lost_units()
        tail_from, behind = self._undispatched_queues()
        behind -= lost  # only behind: continued from the tail; lost units: rebuilt whole
        queues = lost | behind
        index_from = None
        if not index_lost and self.cfg.message_index_enable and self.index_service.files:
            idx_end = R.index_end(self, cl.confirm_offset)  # the index behind (its newest file lost)
            if idx_end < cl.confirm_offset and R.keyed_records_in(self, idx_end, cl.confirm_offset):
                index_from = idx_end
        if not queues and not index_lost and index_from is None:
            return
        import tempfile
        self._shadow_dir = tempfile.mkdtemp(prefix="rmqstore-reader-")
        what = [f"{len(queues)} consume queue(s) missing units"] if queues else []
        what += ["the index is missing or has a hole"] if index_lost else []
        what += [f"the index ends at offset {index_from}"] if index_from is not None else []
        log.warning("%s: %s: answering from a scan of the commitlog (%d bytes) into temporary files in %s; "
                    "open the store for writing once to rebuild them in place", self.path, " and ".join(what),
                    cl.confirm_offset - cl.min_offset, self._shadow_dir)
        own_queues, own_index = V.shadow_derived(self, lost, index_lost, self._shadow_dir, index_from,
                                                 self._rebuild_progress("building temporary"))
        if behind:
            own_queues.update(V.shadow_queue_tails(self, behind, os.path.join(self._shadow_dir, "tails"), tail_from))
        self._own_derived = (own_queues, own_index)
        self.derived_files_restored = [f"{t}/{q}" for t, q in sorted(queues)] + \
            (["index"] if index_lost or index_from is not None else [])

    def _restore_derived_files(self, index_lost: bool) -> None:
        """Beyond upstream: a writer whose index files are gone, or whose recovery found a consume
        queue short of the records it re-dispatched (its files lost, or units missing), rebuilds them
        from the commitlog at open (the fix of :meth:`verify`: every message keeps its queue offset
        and is findable by its keys again). Upstream keeps serving without them."""
        cl = self.commit_log
        if cl.confirm_offset <= cl.min_offset:
            return
        short = self._queues_that_lost_units()
        if not index_lost and not short:
            return
        names = [f"{t}/{q}" for t, q in sorted(short)]
        what = ["the index files are missing"] if index_lost else []
        what += [f"consume queue(s) {', '.join(names)} lost units"] if short else []
        log.warning("%s: %s: rebuilding them from the commitlog (%d bytes)", self.path, "; ".join(what),
                    cl.confirm_offset - cl.min_offset)
        self.wait_dispatched()
        V.rebuild_derived(self, short, index_lost, self._rebuild_progress("rebuilding"))
        self.derived_files_restored = names + (["index"] if index_lost else [])
        for cq in self.consume_queues.values():
            cq.gap_units, cq.cut_in_middle = 0, False

    def _load_consumer_offsets(self) -> None:
        """Load ``config/consumerOffset.json``; an unreadable file (and ``.bak``) does not make the
        store unopenable: it is logged, kept beside as ``.damaged`` by a writer (the next persist
        would replace it), and the groups start without committed offsets."""
        try:
            self.consumer_offsets.load()
        except CorruptRecordError as e:
            log.error("%s: %s; consumer groups start without committed offsets", self.path, e)
            if not self.read_only and e.path and os.path.exists(e.path):
                shutil.copyfile(e.path, e.path + ".damaged")

    def _write_abort(self, abort_path: str) -> None:
        """``abort`` holds the writer's PID while the store is open; it is fsync'd (file and
        directory) so that a crash after open is always recovered as abnormal."""
        try:
            fd = os.open(abort_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, str(os.getpid()).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise StoreIOError(f"cannot write the abort file: {e.strerror}", path=abort_path) from e
        fsync_dir(self.path)

    def _load_consume_queues(self) -> None:
        root = paths.consume_queue_dir(self.path)
        if not os.path.isdir(root):
            return
        for topic in sorted(os.listdir(root)):
            tdir = os.path.join(root, topic)
            if not os.path.isdir(tdir):
                continue
            for q in sorted(os.listdir(tdir)):
                if not q.isdigit() or (topic, int(q)) in self.consume_queues:
                    continue
                cq = ConsumeQueue(self.path, topic, int(q), self.cfg, read_only=self.read_only)
                cq.load()
                self.consume_queues[(topic, int(q))] = cq

    def _recover(self, last_exit_ok: bool, dropped_index: list) -> None:
        """FORMAT.md §9 with the changes described in :mod:`.engine.recovery`: each consume queue
        finds its own end, a plan is computed from the files (:attr:`recovery_plan`), then a writer
        applies it to the files and a reader to its in-memory view only."""
        t0 = R.now()
        for cq in self.consume_queues.values():
            cq.recover()
        pre = R.plan_before_scan(self, last_exit_ok, dropped_index)
        if not self.read_only and R.one_pass_applies(self, pre):
            plan, report = R.recover_after_crash(self, pre)  # (after a crash: the same plan and files, one walk)
        else:
            plan = R.plan_from_scan(self, pre)
            report = R.apply_read_view(self, plan) if self.read_only else R.apply_recovery(self, plan)
        self.recovery_plan = plan
        if self.read_only:
            resume = plan.end_offset
        else:
            resume = max(report.redispatch_from, plan.end_offset) if plan.mode != "empty" else plan.end_offset
        self.reput = ReputMessageService(self, report.redispatch_from)
        self.reput.reput_from = resume
        report.seconds = R.now() - t0
        self.recovery_report = report
        if self.live_writer_pid is not None and not report.corrupt_records:
            pid = "" if self.live_writer_pid < 0 else f" (pid {self.live_writer_pid})"
            log.warning("%s: a live writer%s has the store open: reading what it has written so far, up to "
                        "offset %d", self.path, pid, report.end_offset)
        elif report.mode != "empty" and (not report.clean or report.mode == "abnormal"):
            log.warning("%s: %s", self.path, report.summary())

    def _index_has_a_hole(self) -> bool:
        """An index file is missing before the newest: keyed records lie between where one file ends
        and the next begins (or before the first file), which only the lost file could have held."""
        files = self.index_service.files
        cl = self.commit_log
        spans = [(cl.min_offset, files[0].begin_phy)] if files[0].index_count > 1 else []
        spans += [(R.index_end_of(self, a), b.begin_phy) for a, b in zip(files, files[1:]) if b.index_count > 1]
        return any(R.keyed_records_in(self, a, b) for a, b in spans if a < b)

    def refresh(self) -> int:
        """Follow a writer in another process (read-only stores; a no-op for a writer).

        New commitlog segments are mapped and scanned from the current end with CRC checks: the
        view grows only by complete, valid records. Consume queues grow only by units that match
        their records inside that view; new queues and index files appear; files deleted by
        retention leave the view (min offsets move). Returns the new end of valid data."""
        self.check_open()
        cl = self.commit_log
        if not self.read_only:
            return cl.confirm_offset
        with self._refresh_lock:
            self._close_retired()
            added, removed = cl.queue.refresh()
            for mf in removed:
                self.retire(mf)
            files = cl.queue.files
            if files:
                start = min(max(cl.confirm_offset, files[0].file_from_offset),
                            files[-1].file_from_offset + files[-1].file_size)
                scan = R.scan_log(files, start, self.cfg, check_crc=True)
                end = max(scan.end, start)
                for s in R.really_corrupt(self, scan.corrupt):
                    log.error("%s: %s (kept, never served)", s.segment, s.reason)
            else:
                end = 0
            R.set_read_positions(self, end)
            cl.confirm_offset = cl.flushed_offset = end
            # consume queues: new queues, new files, units that match their records
            known = set(self.consume_queues)
            self._load_consume_queues()
            fresh = [cq for k, cq in self.consume_queues.items() if k not in known]
            for cq in fresh:
                for mf in cq.queue.files:
                    mf.wrote_position = mf.flushed_position = 0
            for key, cq in list(self.consume_queues.items()):
                if key in known:
                    added_q, removed_q = cq.queue.refresh()
                    for mf in removed_q:
                        self.retire(mf)
            R.validate_read_views(self)
            grown = set()
            for key, cq in self.consume_queues.items():
                if cl.topic_queue_table.get(key, 0) < cq.max_offset:
                    grown.add(key)
                cl.topic_queue_table[key] = cq.max_offset
                cq.correct_min_offset(cl.min_offset)
            self._refresh_index()
            if grown:
                self.notify_dispatched(grown)
            return end

    def _refresh_index(self) -> None:
        svc = self.index_service
        d = svc.dir
        size = self.cfg.index_file_size
        with svc.lock:
            while svc.files and not os.path.exists(svc.files[0].path):
                self.retire(svc.files.pop(0))
            have = {f.name for f in svc.files}
            last = svc.files[-1].name if svc.files else ""
            try:
                names = sorted(os.listdir(d))
            except FileNotFoundError:
                names = []
            for name in names:
                p = os.path.join(d, name)
                if name in have or name <= last or not name.isdigit():
                    continue
                try:
                    if os.path.getsize(p) != size:
                        continue
                    svc.files.append(IndexFile(p, self.cfg.max_hash_slot_num, self.cfg.max_index_num, read_only=True))
                except (FileNotFoundError, StoreIOError, CorruptRecordError):
                    continue
            for f in svc.files:
                if f.is_write_full:
                    continue  # a full file never changes
                h = IF.HEADER.unpack_from(f.mf.mm, 0)
                if 0 <= h[5] <= f.index_num:
                    f.begin_ts, f.end_ts, f.begin_phy, f.end_phy, f.slot_count = h[:5]
                    f.index_count = max(1, h[5])

    # ------------------------------------------------------------------------------------------
    # Background work
    # ------------------------------------------------------------------------------------------
    def dispatch_end(self) -> int:
        cl = self.commit_log
        return cl.flushed_offset if self.cfg.sync_flush else cl.confirm_offset

    def on_dispatched(self, store_ts: int) -> None:
        self.checkpoint.values.logics_msg_timestamp = store_ts

    def add_dispatch_listener(self, fn: Callable[[set[tuple[str, int]]], None]) -> None:
        """Call ``fn(queues)`` after each dispatched batch is readable, with the set of
        ``(topic, queue_id)`` it advanced (upstream's ``MessageArrivingListener``, per batch).
        ``fn`` runs on the dispatcher thread (a read-only store: the thread calling
        :meth:`refresh`) and must be quick; an exception in it is logged, dispatch goes on."""
        self._dispatch_listeners = self._dispatch_listeners + (fn,)

    def remove_dispatch_listener(self, fn: Callable[[set[tuple[str, int]]], None]) -> None:
        self._dispatch_listeners = tuple(f for f in self._dispatch_listeners if f != fn)

    def notify_dispatched(self, queues: set[tuple[str, int]]) -> None:
        """Tell the dispatch listeners that ``queues`` have new messages."""
        for fn in self._dispatch_listeners:
            try:
                fn(queues)
            except Exception:  # noqa: BLE001 - a listener must not stop dispatch
                log.exception("dispatch listener %r failed", fn)

    def _flush_loop(self) -> None:
        """The flusher thread: commitlog (ASYNC_FLUSH: every ``flushIntervalCommitLog`` when at
        least ``flushCommitLogLeastPages`` pages are dirty, everything at least every
        ``flushCommitLogThoroughInterval``; SYNC_FLUSH: put_message flushes, this catches the
        rest), consume queues (every ``flushIntervalConsumeQueue``, ``flushConsumeQueueLeastPages``,
        thorough every ``flushConsumeQueueThoroughInterval``) and the checkpoint after them; it
        also restarts a dispatcher stopped by an I/O error (a full disk), runs retention
        (``cleanResourceInterval``) and unmaps files deleted by retention."""
        cfg = self.cfg
        last_thorough = last_cq = last_cq_thorough = time.monotonic()
        next_clean = time.monotonic() + RT.FIRST_CLEAN_DELAY_S
        tick = min(cfg.flush_interval_commit_log, cfg.flush_interval_consume_queue, 1000) / 1000
        last_cl = last_offsets = 0.0
        while not self._stop.wait(tick):
            try:
                now = time.monotonic()
                if (now - last_cl) * 1000 >= cfg.flush_interval_commit_log:
                    last_cl = now
                    thorough = (now - last_thorough) * 1000 >= cfg.flush_commit_log_thorough_interval
                    self.commit_log.flush(0 if thorough else cfg.flush_commit_log_least_pages)
                    if thorough:
                        last_thorough = now
                    if self.cfg.sync_flush:
                        self.reput.wake()
                if (now - last_cq) * 1000 >= cfg.flush_interval_consume_queue:
                    last_cq = now
                    cq_thorough = (now - last_cq_thorough) * 1000 >= cfg.flush_consume_queue_thorough_interval
                    if cq_thorough:
                        last_cq_thorough = now
                    self._flush_queues_and_checkpoint(0 if cq_thorough else cfg.flush_consume_queue_least_pages)
                if (now - last_offsets) * 1000 >= cfg.flush_consumer_offset_interval:
                    last_offsets = now
                    self.consumer_offsets.persist()
                self._supervise_reput(now)
                self._close_retired()
                if now >= next_clean:
                    next_clean = now + RT.CLEAN_INTERVAL_S
                    RT.run_periodic(self)
            except Exception:  # noqa: BLE001 - a background thread must not die silently
                log.exception("background flush/clean failed in %s", self.path)

    def _flush_queues_and_checkpoint(self, least_pages: int) -> None:
        """Consume queues, then the checkpoint with values captured *before* the flushes (so the
        checkpoint never claims more than is on disk)."""
        cp = self.checkpoint.values
        logics = cp.logics_msg_timestamp
        physic = self.commit_log.flushed_store_timestamp
        for cq in list(self.consume_queues.values()):
            cq.flush(least_pages)
        if physic:
            cp.physic_msg_timestamp = physic
        fsync_dirty_dirs()
        self.checkpoint.flush(dataclasses.replace(cp, logics_msg_timestamp=logics))

    def _supervise_reput(self, now: float) -> None:
        """Restart the dispatcher after an I/O error (e.g. a full disk while creating a consume
        queue or index file), at most once a second; duplicates are dropped by the queues."""
        r = self.reput
        if r is None or r.error is None:
            return
        t = getattr(r, "_thread", None)
        if t is not None and t.is_alive():
            return
        if now - self._reput_restarted_at < 1.0:
            return
        self._reput_restarted_at = now
        with r.lock:
            if self.cfg.message_index_enable and self.index_service.files:
                # the failed batch may have filled an index file in the middle of a record's keys
                # without being able to create the next file: put the rest of them back first
                try:
                    with self.index_service.lock:
                        r.reput_from = min(r.reput_from, max(R.complete_split_record(self, r.reput_from),
                                                             self.commit_log.min_offset))
                except (StoreIOError, OSError) as e:
                    log.warning("dispatcher still cannot resume: %s", e)
                    return
            log.warning("restarting the dispatcher after: %s", r.error)
            r.error = None
        r.start()

    def retire(self, obj) -> None:
        """Close a mapping later (readers may still hold it); its file is already deleted."""
        self._retired.append((time.monotonic(), obj))

    def _close_retired(self, force: bool = False) -> None:
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

    @property
    def closed(self) -> bool:
        """:meth:`close` was called."""
        return self._closed

    @property
    def closed_cleanly(self) -> bool:
        """No abort file and no live writer when opened: every record was dispatched."""
        return self._closed_cleanly

    def close(self) -> None:
        """Clean shutdown: dispatch everything, flush all files, write the checkpoint, remove
        ``abort`` (kept if dispatch could not finish, so the next open recovers)."""
        if self._closed:
            return
        self.stop_ha()  # HA: replication stops before the final flush
        clean = True
        if not self.read_only and self.reput is not None:
            try:
                self.commit_log.flush(0)
                if self.reput.stopped:  # shut down on purpose: dispatch the rest here
                    self.reput.do_reput()
                else:
                    self.reput.wake_now()
                    self._supervise_reput(time.monotonic() + 10)
                    self.reput.wait_until(self._complete_end(), timeout=60)
            except Exception:  # noqa: BLE001 - a failed flush keeps abort: the next open recovers
                log.exception("flush at close failed")
                clean = False
            clean = clean and self.reput.error is None and self.reput.reput_from >= self._complete_end()
        self._release(abort_clean=clean)

    def _complete_end(self) -> int:
        """Where dispatch ends at close: the commitlog's end, or on a SLAVE (HA) the end of its
        last whole record (a record cut by a replication batch is not dispatched; the next open
        cuts it, and the master sends it again)."""
        if self.cfg.broker_role != "SLAVE":
            return self.dispatch_end()
        from .engine.ha.replica import complete_records_end
        return complete_records_end(self.commit_log, self.dispatch_end())

    def _release(self, abort_clean: bool) -> None:
        self.stop_ha()  # HA
        self._closed = True
        _OPEN_STORES.discard(self)
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        if self.reput is not None:
            self.reput.shutdown()
        if not self.read_only and self._lock_fd is not None:
            abort_clean = self._final_flush() and abort_clean
        index_paths = [f.path for f in self.index_service.files]
        index_counts = self._index_counts()
        self.index_service.close()
        extents = {f"{t}/{q}": cq.max_offset for (t, q), cq in sorted(self.consume_queues.items())}
        for cq in self.consume_queues.values():
            cq.close()
        self.commit_log.close()
        self._close_retired(force=True)
        self._close_own_derived()
        if self._lock_fd is not None:
            if abort_clean:
                self._mark_clean_close(extents, index_paths, index_counts)
            with _LOCKED_GUARD:
                _LOCKED_PATHS.discard(self.path)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _final_flush(self) -> bool:
        """A writer's last flush of offsets, commitlog, queues, index and checkpoint; False when it
        failed (the next open then recovers)."""
        try:
            self.consumer_offsets.persist()
        except StoreIOError:
            log.exception("consumer offsets could not be written at close")
        try:
            self.commit_log.flush(0)
            for cq in self.consume_queues.values():
                cq.flush(0)
            self.checkpoint.values.physic_msg_timestamp = self.commit_log.flushed_store_timestamp or \
                self.checkpoint.values.physic_msg_timestamp
            self.index_service.flush()
            fsync_dirty_dirs()
            self.checkpoint.flush()
        except Exception:  # noqa: BLE001 - the next open recovers
            log.exception("final flush failed; the next open will recover")
            return False
        return True

    def _close_own_derived(self) -> None:
        """Close the store's own queues and index a reader's shadow copies stood in for; remove the copies."""
        if self._own_derived is not None:
            own_queues, own_index = self._own_derived
            for cq in own_queues.values():
                if cq is not None:
                    cq.close()
            if own_index is not None:
                own_index.close()
        if self._shadow_dir is not None:
            shutil.rmtree(self._shadow_dir, ignore_errors=True)

    def _mark_clean_close(self, extents: dict[str, int], index_paths: list[str], index_counts: dict[str, int]) -> None:
        """A clean close: the queue extents and index stats files (when they changed), then no abort file."""
        if extents != self._extents_at_open or os.path.exists(os.path.join(self.path, QUEUE_EXTENTS_FILE)):
            self._write_queue_extents(extents)
        stats = self._index_stats(index_paths)
        # (a close that indexed nothing leaves a broker's store without the file: mtimes move
        # when a writer merely maps and flushes, the counts do not)
        if index_counts != self._index_counts_at_open or os.path.exists(os.path.join(self.path, INDEX_STATS_FILE)):
            try:
                atomic_write_text(os.path.join(self.path, INDEX_STATS_FILE), json.dumps(stats, indent=0) + "\n")
            except OSError:
                log.exception("%s: the index file stats could not be written (the next open checks less)",
                              self.path)
        try:
            os.unlink(paths.abort_path(self.path))
            fsync_dir(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ==========================================================================================
    # Writing
    # ==========================================================================================
    def _check_writable(self) -> None:
        self.check_open()
        if self.read_only:
            raise ReadOnlyStoreError("store is open read-only", path=self.path)

    def put_message(self, msg: Message) -> PutMessageResult:
        """Append one message (``putMessage``). Under SYNC_FLUSH, PUT_OK means the record is on
        disk (group commit); FLUSH_DISK_TIMEOUT means it was appended but not confirmed durable
        within ``syncFlushTimeout``. A full disk gives CREATE_MAPPED_FILE_FAILED (no segment could
        be created) or SERVICE_NOT_AVAILABLE (past ``diskSpaceWarningLevelRatio``); nothing is
        half-written either way."""
        self._check_writable()
        if self.disk_full or self.cfg.broker_role == "SLAVE":
            return _refused(self.cfg)
        return self._replicated(self.commit_log.put_message(msg))  # HA

    def put_messages(self, msgs: Iterable[Message]) -> PutMessageResult:
        """Append a batch for one topic and queue (``putMessages``); all of it or none of it
        becomes visible, also across a crash."""
        self._check_writable()
        if self.disk_full or self.cfg.broker_role == "SLAVE":
            return _refused(self.cfg)
        return self._replicated(self.commit_log.put_messages(list(msgs)))  # HA

    # --- HA (replication; docs/ha-protocol.md) --------------------------------------------------
    def start_ha(self, host: str = "127.0.0.1", port: int | None = None):
        """Start replication for the store's ``brokerRole``: a master listens on ``host:port``
        (None: ``haListenPort``; 0: any free port), a SLAVE connects to its master's HA address
        (``haMasterAddress``, or :meth:`HAService.set_master_address`). Returns the service
        (also :attr:`ha`); :meth:`close` stops it before the final flush."""
        self._check_writable()
        if self.ha is None:
            from .engine.ha import HAService
            self.ha = HAService(self, host, port).start()
        return self.ha

    def stop_ha(self) -> None:
        ha, self.ha = self.ha, None
        if ha is not None:
            ha.shutdown()

    def _replicated(self, result: PutMessageResult) -> PutMessageResult:
        """HA after a put: wake the senders; SYNC_MASTER waits for the slaves' acknowledgement
        unless the caller awaits it (``ha_wait_in_put`` False: the broker)."""
        ha = self.ha
        if ha is None:
            return result
        fut = ha.after_put(result)
        if fut is not None and self.ha_wait_in_put:
            result.status = fut.result()
        return result

    def dispatch(self) -> None:
        """Dispatch everything appended so far in the calling thread (consume queues, index,
        dispatch listeners), instead of waiting for the background dispatcher. For a single
        writer that prefers no thread switches, such as the broker's event loop (see
        :meth:`set_background_dispatch`). Under SYNC_FLUSH only what is flushed is dispatched."""
        self.check_open()
        if not self.read_only:
            self.reput.do_reput()

    def set_background_dispatch(self, enabled: bool) -> None:
        """``False``: appends no longer wake the background dispatcher (it still looks every
        50 ms, a safety net); the writer calls :meth:`dispatch` after its appends. ``True`` (the
        default) restores waking it on every append. No effect under SYNC_FLUSH, where the flush
        thread wakes the dispatcher after each group commit."""
        self.check_open()
        if not self.read_only and not self.cfg.sync_flush:
            self.commit_log.on_append = self.reput.wake if enabled else None

    def wait_dispatched(self, timeout: float | None = None) -> None:
        """Block until every message appended so far is in its consume queue and the index."""
        self.check_open()
        if self.read_only:
            return
        target = self.commit_log.confirm_offset
        if self.cfg.sync_flush:
            self.commit_log.sync_to(target)
        self.reput.wake_now()
        if not self.reput.wait_until(target, timeout):
            raise TimeoutError(f"dispatch did not reach offset {target} in {timeout}s")
        if self.reput.error is not None:
            raise StoreIOError(f"dispatcher failed: {self.reput.error}", path=self.path) from self.reput.error

    def flush(self) -> int:
        """Force commitlog, consume queues, index headers and checkpoint to disk; returns the
        flushed commitlog offset."""
        self._check_writable()
        off = self.commit_log.flush(0)
        for cq in list(self.consume_queues.values()):
            cq.flush(0)
        self.checkpoint.values.physic_msg_timestamp = self.commit_log.flushed_store_timestamp
        self.checkpoint.flush()
        return off

    # ==========================================================================================
    # Consume queues
    # ==========================================================================================
    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue object for topic/queue, created (without files) on demand as upstream."""
        key = (topic, queue_id)
        cq = self.consume_queues.get(key)
        if cq is None:
            with self.cq_lock:
                cq = self.consume_queues.get(key)
                if cq is None:
                    cq = ConsumeQueue(self.path, topic, queue_id, self.cfg, read_only=self.read_only)
                    self.consume_queues[key] = cq
        return cq

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.find_consume_queue(topic, queue_id).min_offset

    def get_max_offset_in_queue(self, topic: str, queue_id: int, committed: bool = True) -> int:
        """CQ max offset; ``committed=False`` counts appended but not yet dispatched messages."""
        if not committed:
            return self.commit_log.topic_queue_table.get((topic, queue_id), 0)
        return self.find_consume_queue(topic, queue_id).max_offset

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, queue_offset: int) -> int:
        u = self.find_consume_queue(topic, queue_id).get_unit(queue_offset)
        return u[0] if u else 0

    def get_message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        u = self.find_consume_queue(topic, queue_id).get_unit(queue_offset)
        return self.commit_log.pickup_store_timestamp(u[0], u[1]) if u else -1

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store time of the queue's first message, or of the commitlog's first record; -1 if none."""
        if topic is None:
            cl = self.commit_log
            return cl.pickup_store_timestamp(cl.min_offset, 64) if cl.confirm_offset > cl.min_offset else -1
        cq = self.find_consume_queue(topic, queue_id)
        return self.get_message_store_timestamp(topic, queue_id, cq.min_offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int, boundary: str = "lower") -> int:
        """``getOffsetInQueueByTime``: LOWER = first offset with store time >= t, UPPER = last with
        store time <= t (upstream quirks kept, FORMAT.md §5.7), clamped to [min, max]."""
        boundary = boundary.lower()
        if boundary not in ("lower", "upper"):
            raise ValueError(f"boundary must be 'lower' or 'upper', got {boundary!r}")
        cq = self.find_consume_queue(topic, queue_id)
        off = cq.offset_in_queue_by_time(timestamp_ms, boundary, self.commit_log.pickup_store_timestamp,
                                         self.commit_log.min_offset)
        return min(max(off, cq.min_offset), cq.max_offset)

    # ==========================================================================================
    # Reading
    # ==========================================================================================
    def memory_limit_bytes(self) -> int:
        """How much of the commitlog's end counts as "in memory" (``accessMessageInMemoryMaxRatio`` %
        of RAM): pulls from there use the in-memory transfer limits, and a new broker group starts at
        offset 0 of a queue whose first message is still there."""
        return self._ram * self.cfg.access_message_in_memory_max_ratio // 100

    # ==========================================================================================
    # Care: verify, retention
    # ==========================================================================================
    def verify(self, fix: bool = False, progress=None) -> list[V.Finding]:
        """Check the store (every record's CRC, consume queues and index against the commitlog,
        checkpoint, tail) and return what is wrong as :class:`~rmqstore.engine.verify.Finding`
        objects (empty when sound); never raises for damage found, and writes nothing.
        ``fix=True`` (writers only) then applies :meth:`repair` to them: it rebuilds what the
        commitlog can regenerate and marks those findings ``fixed``. ``progress(bytes_done)`` is
        called while the store is checked."""
        self.check_open()
        if fix and self.read_only:
            raise ReadOnlyStoreError("verify(fix=True) needs the store opened for writing", path=self.path)
        with self._own_derived_files():
            findings = V.verify(self, progress=progress)
        return self.repair(findings) if fix else findings

    def repair(self, findings: list[V.Finding]) -> list[V.Finding]:
        """Apply the repairs that ``findings`` (from :meth:`verify`) carry (writers only): cut
        the bytes after the end of valid data (saved under ``recovery/``), lower checkpoint
        values that are ahead, rebuild the named consume queues and the index from the commitlog.
        Returns the findings, those repaired marked ``fixed``; damaged records cannot be repaired
        and stay unfixed. Raises :class:`ReadOnlyStoreError` on a reader."""
        self.check_open()
        return V.repair(self, findings)

    @contextlib.contextmanager
    def _own_derived_files(self):
        """A reader answering from temporary derived files (:meth:`_shadow_derived_files`) puts
        the store's own back meanwhile: verify reports what is on disk."""
        if self._own_derived is None:
            yield
            return
        own_queues, own_index = self._own_derived
        with self.cq_lock:
            shadows = {k: self.consume_queues.get(k) for k in own_queues}
            for k, cq in own_queues.items():
                if cq is None:
                    self.consume_queues.pop(k, None)
                else:
                    self.consume_queues[k] = cq
            shadow_index = self.index_service
            if own_index is not None:
                self.index_service = own_index
        try:
            yield
        finally:
            with self.cq_lock:
                self.consume_queues.update(shadows)
                self.index_service = shadow_index

    def clean_expired(self, now_ms: int | None = None, dry_run: bool = True, force: bool = False) -> RT.CleanResult:
        """One retention run (``fileReservedTime``, ``deleteWhen``, disk-usage ratios,
        ``deleteFileBatchMax``, never the last segment; consume-queue and index files whose data
        is gone follow). ``dry_run`` (default) only plans; ``force`` runs whatever the hour
        (upstream's manual trigger). See :mod:`rmqstore.engine.retention`."""
        self.check_open()
        return RT.clean_expired(self, now_ms=now_ms, dry_run=dry_run, force=force)

    # ==========================================================================================
    # Introspection
    # ==========================================================================================
    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.confirm_offset

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for (t, q), cq in sorted(self.consume_queues.items()):
            if cq.queue.files:
                out.setdefault(t, []).append(q)
        return out

    def __repr__(self) -> str:
        return f"MessageStore({self.path!r}, read_only={self.read_only}, max_phy={self.max_phy_offset})"
