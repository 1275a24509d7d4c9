"""The flush service (upstream's ``FlushRealTimeService``/``FlushConsumeQueueService``, the
checkpoint's flush and the ``CleanCommitLogService`` schedule in one thread): flushes the commitlog,
the consume queues and then the checkpoint on their intervals, persists the consumer offsets, runs
retention, unmaps retired files, and restarts a dispatcher (the reput) stopped by an I/O error.
Also the store's explicit flushes: :meth:`FlushService.flush_now` (``MessageStore.flush``),
:meth:`FlushService.drain` and :meth:`FlushService.final_flush` (a writer's close).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable

from ..errors import StoreIOError
from ..io.mapped_file import fsync_dirty_dirs
from . import recovery as R
from . import retention as RT
from .contract import StoreParts
from .ha.replica import complete_records_end

log = logging.getLogger("rmqstore.message_store")

#: at most one restart of a failed dispatcher in this many seconds
REPUT_RESTART_INTERVAL_S = 1.0


class FlushService:
    """The background flusher of one writer's store (a :class:`~.lifecycle.Service`)."""

    def __init__(self, store: StoreParts, close_retired: Callable[[], None]):
        self.store = store
        self.close_retired = close_retired
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reput_restarted_at = 0.0

    # --- the service ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rmqstore-flush", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def running(self) -> bool:
        """The flush thread is alive."""
        t = self._thread
        return t is not None and t.is_alive()

    def _run(self) -> None:
        """The flusher thread: commitlog (ASYNC_FLUSH: every ``flushIntervalCommitLog`` when at
        least ``flushCommitLogLeastPages`` pages are dirty, everything at least every
        ``flushCommitLogThoroughInterval``; SYNC_FLUSH: put_message flushes, this catches the
        rest), consume queues (every ``flushIntervalConsumeQueue``, ``flushConsumeQueueLeastPages``,
        thorough every ``flushConsumeQueueThoroughInterval``) and the checkpoint after them; it
        also restarts a dispatcher stopped by an I/O error (a full disk), runs retention
        (``cleanResourceInterval``) and unmaps files deleted by retention."""
        store, cfg = self.store, self.store.cfg
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
                    store.commit_log.flush(0 if thorough else cfg.flush_commit_log_least_pages)
                    if thorough:
                        last_thorough = now
                    if cfg.sync_flush:
                        store.reput.wake()
                if (now - last_cq) * 1000 >= cfg.flush_interval_consume_queue:
                    last_cq = now
                    cq_thorough = (now - last_cq_thorough) * 1000 >= cfg.flush_consume_queue_thorough_interval
                    if cq_thorough:
                        last_cq_thorough = now
                    self.flush_queues_and_checkpoint(0 if cq_thorough else cfg.flush_consume_queue_least_pages)
                if (now - last_offsets) * 1000 >= cfg.flush_consumer_offset_interval:
                    last_offsets = now
                    store.consumer_offsets.persist()
                self.supervise_reput(now)
                self.close_retired()
                if now >= next_clean:
                    next_clean = now + RT.CLEAN_INTERVAL_S
                    RT.run_periodic(store)
            except Exception:  # noqa: BLE001 - a background thread must not die silently
                log.exception("background flush/clean failed in %s", store.path)

    # --- its steps ------------------------------------------------------------------------------
    def flush_queues_and_checkpoint(self, least_pages: int) -> None:
        """Consume queues, then the checkpoint with values captured *before* the flushes (so the
        checkpoint never claims more than is on disk)."""
        store = self.store
        cp = store.checkpoint.values
        logics = cp.logics_msg_timestamp
        physic = store.commit_log.flushed_store_timestamp
        for cq in list(store.consume_queues.values()):
            cq.flush(least_pages)
        if physic:
            cp.physic_msg_timestamp = physic
        fsync_dirty_dirs()
        store.checkpoint.flush(dataclasses.replace(cp, logics_msg_timestamp=logics))

    def supervise_reput(self, now: float) -> None:
        """Restart the dispatcher after an I/O error (e.g. a full disk while creating a consume
        queue or index file), at most once a second; duplicates are dropped by the queues."""
        store = self.store
        r = store.reput
        if r is None or r.error is None or r.running:
            return
        if now - self._reput_restarted_at < REPUT_RESTART_INTERVAL_S:
            return
        self._reput_restarted_at = now
        with r.lock:
            if store.cfg.message_index_enable and store.index_service.files:
                # the failed batch may have filled an index file in the middle of a record's keys
                # without being able to create the next file: put the rest of them back first
                try:
                    with store.index_service.lock:
                        r.reput_from = min(r.reput_from, max(R.complete_split_record(store, r.reput_from),
                                                             store.commit_log.min_offset))
                except (StoreIOError, OSError) as e:
                    log.warning("dispatcher still cannot resume: %s", e)
                    return
            log.warning("restarting the dispatcher after: %s", r.error)
            r.error = None
        r.start()

    # --- explicit flushes -----------------------------------------------------------------------
    def flush_now(self) -> int:
        """Commitlog, consume queues, index headers and checkpoint to disk now; the flushed
        commitlog offset."""
        store = self.store
        off = store.commit_log.flush(0)
        for cq in list(store.consume_queues.values()):
            cq.flush(0)
        store.checkpoint.values.physic_msg_timestamp = store.commit_log.flushed_store_timestamp
        store.checkpoint.flush()
        return off

    def drain(self) -> bool:
        """A close's first step: flush the commitlog and dispatch everything appended (in this
        thread when the reput was shut down on purpose, else by waking it, restarting it once if
        an error stopped it). False when that failed: the close keeps ``abort``."""
        store = self.store
        reput = store.reput
        clean = True
        try:
            store.commit_log.flush(0)
            if reput.stopped:  # shut down on purpose: dispatch the rest here
                reput.do_reput()
            else:
                reput.wake_now()
                self.supervise_reput(time.monotonic() + 10)
                reput.wait_until(drain_end(store), timeout=60)
        except Exception:  # noqa: BLE001 - a failed flush keeps abort: the next open recovers
            log.exception("flush at close failed")
            clean = False
        return clean and reput.error is None and reput.reput_from >= drain_end(store)

    def final_flush(self) -> bool:
        """A writer's last flush of offsets, commitlog, queues, index and checkpoint (after the
        services are shut down); False when it failed (the next open then recovers)."""
        store = self.store
        try:
            store.consumer_offsets.persist()
        except StoreIOError:
            log.exception("consumer offsets could not be written at close")
        try:
            store.commit_log.flush(0)
            for cq in store.consume_queues.values():
                cq.flush(0)
            store.checkpoint.values.physic_msg_timestamp = store.commit_log.flushed_store_timestamp or \
                store.checkpoint.values.physic_msg_timestamp
            store.index_service.flush()
            fsync_dirty_dirs()
            store.checkpoint.flush()
        except Exception:  # noqa: BLE001 - the next open recovers
            log.exception("final flush failed; the next open will recover")
            return False
        return True


def drain_end(store) -> int:
    """Where a close's dispatch ends: the dispatch end; on a SLAVE (HA) the end of its last whole
    record: a record cut by a replication batch is not dispatched (the next open cuts it off, and
    the master sends it again)."""
    end = store.dispatch_end()
    if store.cfg.broker_role != "SLAVE":
        return end
    return complete_records_end(store.commit_log, end, start=min(store.reput.reput_from, end))
