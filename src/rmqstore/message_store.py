"""MessageStore: the facade (mirrors ``DefaultMessageStore``): the public API, and the wiring of
the services that do the work.

Opening takes the lock (writers only), loads segments, consume queues, index and checkpoint,
recovers (FORMAT.md §9: :mod:`.engine.recovery` plans from the files, then applies the plan; the
call site is :class:`~.engine.lifecycle.StoreLifecycle`), creates the ``abort`` file and starts the
services in one ordered list (:attr:`MessageStore.services`): the dispatcher
(:class:`~.engine.reput.ReputMessageService`), the flusher (:class:`~.engine.flush_service.FlushService`)
and the derived-files keeper (:class:`~.engine.derived_files.DerivedFilesKeeper`). A clean
:meth:`~MessageStore.close` waits for dispatch, shuts the services down in the reverse order,
flushes everything and removes ``abort``.

Read-only opens take no lock, never create, truncate or delete a file (every mmap is read-only) and
compute the same recovery plan (:attr:`recovery_plan`) without applying it, reporting the would-be
recovery in :attr:`recovery_report`; their one service is the keeper (stand-ins for lost files).
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from typing import Callable, Iterable

from .config import EMBEDDED, MessageStoreConfig
from .layout import is_store_dir, resolve_config
from .engine import recovery as R
from .engine import retention as RT
from .engine import verify as V
from .engine.checkpoint import StoreCheckpoint
from .engine.commit_log import CommitLog
from .engine.consume_queue import ConsumeQueue, load_consume_queues
from .engine.consumer_offsets import CONSUMER_OFFSET_FILE, ConsumerOffsetManager
from .engine.derived_files import INDEX_STATS_FILE, QUEUE_EXTENTS_FILE, DerivedFilesKeeper
from .engine.flush_service import FlushService
from .engine.index import IndexService
from .engine.lifecycle import RETIRE_GRACE_S, ServiceChain, StoreLifecycle, as_store_io_error, lock_holder
from .engine.group_commit import put_group
from .engine.reput import ReputMessageService
from .errors import ReadOnlyStoreError, RmqStoreError, StoreIOError, StoreNotFoundError
from .io import paths
from .store_reads import StoreReads
from .types import Message, PutMessageResult, PutMessageStatus

log = logging.getLogger(__name__)

__all__ = ["MessageStore", "RETIRE_GRACE_S", "QUEUE_EXTENTS_FILE", "INDEX_STATS_FILE"]

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


def _total_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover
        return 8 << 30


def _disk_full_result(cfg: MessageStoreConfig) -> PutMessageResult:
    why = ("the free space would not hold the next commitlog, consume-queue and index files"
           if cfg.disk_policy == EMBEDDED else "usage is past diskSpaceWarningLevelRatio (retention frees space)")
    return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error=f"disk full: {why}")


def _refused(cfg: MessageStoreConfig) -> PutMessageResult:  # (HA: upstream refuses puts on a slave)
    return _disk_full_result(cfg) if cfg.broker_role != "SLAVE" else PutMessageResult(
        PutMessageStatus.SERVICE_NOT_AVAILABLE, error="the store is a SLAVE: it takes messages only from its master")


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
        self._closed = False
        self._ram = _total_ram()
        self._refresh_lock = threading.RLock()
        self.maintenance_lock = threading.RLock()
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
        #: no abort file and no live writer when opened: every record was dispatched
        self._closed_cleanly = False
        #: lock, abort file, recovery's call site, closing the files, retired mappings
        self.lifecycle = StoreLifecycle(self)
        #: restores lost derived files at open (a reader: stands in for them), marks a clean close
        self.derived_files = DerivedFilesKeeper(self)
        #: the flush loop, the checkpoint, retention's schedule, the dispatcher's supervision
        self.flush_service = FlushService(self, self.lifecycle.close_retired)
        #: the running services: started in order at open (and any added later, e.g. HA), shut
        #: down in the reverse order at close, before the final flush
        self.services = ServiceChain()
        # HA (replication): the running HAService (start_ha), and whether put_message waits for the
        # slaves under SYNC_MASTER (the broker awaits HAService.replication_future instead)
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
        files (the derived-files keeper) unless ``stand_in_derived=False`` (what ``verify``
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
            store.derived_files.stand_in = stand_in_derived
        except OSError as e:
            if isinstance(e, RmqStoreError):
                raise
            raise as_store_io_error(e, path) from e
        try:
            store._open()
        except BaseException as e:
            store._release(abort_clean=False)
            if isinstance(e, OSError) and not isinstance(e, RmqStoreError):
                raise as_store_io_error(e, path) from e
            raise
        _OPEN_STORES.add(store)
        return store

    def _open(self) -> None:
        life, derived = self.lifecycle, self.derived_files
        if not self.read_only:
            life.take_lock()
        else:
            self.live_writer_pid = lock_holder(self.path)
        life.load_consumer_offsets()
        last_exit_ok = life.last_exit_ok()
        self._closed_cleanly = last_exit_ok and self.live_writer_pid is None
        self.commit_log.queue.load()
        load_consume_queues(self.path, self.cfg, self.read_only, self.consume_queues)
        dropped_index = self.index_service.load(last_exit_ok)
        derived.note_before_recovery(last_exit_ok, dropped_index, self.live_writer_pid)
        self.recovery_plan, self.recovery_report, self.reput = life.recover(last_exit_ok, dropped_index,
                                                                            self.live_writer_pid)
        derived.note_after_recovery(self.recovery_report)
        if self.read_only:
            self.services.start(derived)  # stand-ins for lost derived files
            return
        life.write_abort()
        # ASYNC_FLUSH: every append wakes the dispatcher (the bound method itself: no wrapper
        # call on the put path); SYNC_FLUSH wakes it after the group commit
        self.commit_log.on_append = None if self.cfg.sync_flush else self.reput.wake
        # the services, in start order; close() shuts them down in the reverse order
        self.services.start(self.reput, self.flush_service, derived)

    @property
    def closed(self) -> bool:
        """:meth:`close` was called."""
        return self._closed

    @property
    def closed_cleanly(self) -> bool:
        """No abort file and no live writer when opened: every record was dispatched."""
        return self._closed_cleanly

    @property
    def derived_files_restored(self) -> list[str]:
        """What the open rebuilt from the commitlog (a reader: stood in for with temporary files):
        "topic/queue" names and "index"."""
        return self.derived_files.restored

    def close(self) -> None:
        """Clean shutdown: dispatch everything, flush all files, write the checkpoint, remove
        ``abort`` (kept if dispatch could not finish, so the next open recovers)."""
        if self._closed:
            return
        clean = True
        if not self.read_only and self.reput is not None:
            clean = self.flush_service.drain()
        self._release(abort_clean=clean)

    def _release(self, abort_clean: bool) -> None:
        """Shut the services down (reverse start order), flush a writer's files a last time, close
        every file, and at a clean close leave the marks and remove ``abort``; then unlock."""
        self._closed = True
        _OPEN_STORES.discard(self)
        abort_clean = self.services.shutdown() and abort_clean
        life = self.lifecycle
        if not self.read_only and life.locked:
            abort_clean = self.flush_service.final_flush() and abort_clean
        life.close_files()
        self.derived_files.close()
        if life.locked:
            if abort_clean:
                self.derived_files.write_marks()
                life.remove_abort()
            life.unlock()

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
        (also :attr:`ha`); :meth:`close` shuts it down first, before the final flush."""
        self._check_writable()
        if self.ha is None:
            from .engine.ha import HAService
            self.ha = self.services.add(HAService(self, host, port))
        return self.ha

    def stop_ha(self) -> None:
        """Stop replication now (whoever started it may; :meth:`close` does it too)."""
        ha, self.ha = self.ha, None
        if ha is not None:
            ha.shutdown()  # (idempotent: the service chain's shutdown at close finds it stopped)

    def _replicated(self, result: PutMessageResult) -> PutMessageResult:
        """HA: wake the senders; SYNC_MASTER waits for the slaves unless the broker awaits it."""
        return result if self.ha is None else self.ha.settle(result, wait=self.ha_wait_in_put)

    def put_group(self, items: list) -> list[PutMessageResult]:
        """Append puts that arrived together (a broker's group commit), one result per item in order: one message
        is a :meth:`put_message`, more a :meth:`put_messages` batch, an ``engine.put_batch.RawBatch`` a batch as its
        producer sent it. One hold of the append lock, one dispatcher, flush and HA wake-up (:mod:`.engine.group_commit`)."""
        self._check_writable()
        if self.disk_full or self.cfg.broker_role == "SLAVE":
            return [_refused(self.cfg) for _ in items]
        results = put_group(self.commit_log, items)
        return results if self.ha is None else self.ha.settle_all(results, wait=self.ha_wait_in_put)

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
            self.reput.set_inline(not enabled)

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
        return self.flush_service.flush_now()

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
        with self.derived_files.own_files_in_place():
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

    def clean_expired(self, now_ms: int | None = None, dry_run: bool = True, force: bool = False) -> RT.CleanResult:
        """One retention run (``fileReservedTime``, ``deleteWhen``, disk-usage ratios,
        ``deleteFileBatchMax``, never the last segment; consume-queue and index files whose data
        is gone follow). ``dry_run`` (default) only plans; ``force`` runs whatever the hour
        (upstream's manual trigger). See :mod:`rmqstore.engine.retention`."""
        self.check_open()
        return RT.clean_expired(self, now_ms=now_ms, dry_run=dry_run, force=force)

    def refresh(self) -> int:
        """Follow a writer in another process (read-only stores; a no-op for a writer).

        New commitlog segments are mapped and scanned from the current end with CRC checks: the
        view grows only by complete, valid records. Consume queues grow only by units that match
        their records inside that view; new queues and index files appear; files deleted by
        retention leave the view (min offsets move). Returns the new end of valid data."""
        self.check_open()
        if not self.read_only:
            return self.commit_log.confirm_offset
        with self._refresh_lock:
            self.lifecycle.close_retired()
            return R.follow_writer(self)

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

    def retire(self, obj) -> None:
        """Close a mapping later (readers may still hold it); its file is already deleted."""
        self.lifecycle.retire(obj)

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
