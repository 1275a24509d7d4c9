"""Dispatch (reput): build consume queues and the index from new commitlog records.

Mirrors ``ReputMessageService`` + ``CommitLogDispatcherBuildConsumeQueue`` +
``CommitLogDispatcherBuildIndex``. Records are walked and decoded in batches with the numpy codecs
(:func:`~rmqstore.format.message.decode_batch`); per batch the units of each queue are written with
one copy and the index takes all keys of the batch at once. The Spark rebuild calls
:func:`dispatch_batch` too, so both produce identical files.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

import numpy as np

from ..format import message as M
from ..types import tags_code_of

log = logging.getLogger(__name__)

BATCH_RECORDS = 8192
_TX_SKIP_CQ = (M.TX_PREPARED, M.TX_ROLLBACK)


def extract_dispatch_fields(buf, batch: M.RecordBatch, delay_levels_ms, topic_cache: dict):
    """Per record: topic, tagsCode and the index keys (``topic#key`` strings, UNIQ_KEY first)."""
    mv = memoryview(buf)
    topics, tags_codes, key_lists = [], np.empty(len(batch), dtype=np.int64), []
    tp, tl, pp, pl, sts = (batch.topic_pos.tolist(), batch.topic_len.tolist(), batch.props_pos.tolist(),
                          batch.props_len.tolist(), batch.store_timestamp.tolist())
    for i in range(len(batch)):
        tb = bytes(mv[tp[i]:tp[i] + tl[i]])
        topic = topic_cache.get(tb)
        if topic is None:
            topic = topic_cache[tb] = tb.decode("utf-8", "replace")
        topics.append(topic)
        keys: list[str] = []
        if pl[i] > 0:
            props = {}
            for seg in bytes(mv[pp[i]:pp[i] + pl[i]]).split(b"\x02"):
                j = seg.find(b"\x01")
                if 0 < j < len(seg) - 1:
                    k = seg[:j]
                    if k in (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY"):
                        props[k.decode()] = seg[j + 1:].decode("utf-8", "replace")
            tags_codes[i] = tags_code_of(topic, props, sts[i], delay_levels_ms)
            u = props.get("UNIQ_KEY")
            if u is not None:
                keys.append(f"{topic}#{u}")
            kv = props.get("KEYS")
            if kv:
                keys.extend(f"{topic}#{k}" for k in kv.split(" ") if k)
        else:
            tags_codes[i] = 0
        key_lists.append(keys)
    return topics, tags_codes, key_lists


def dispatch_batch(buf, batch: M.RecordBatch, *, cq_for: Callable, index_service, delay_levels_ms,
                   topic_cache: dict, build_cq: bool = True, build_index: bool = True) -> None:
    """Write the CQ units and index items of a batch of valid records (commitlog order)."""
    if len(batch) == 0:
        return
    topics, tags_codes, key_lists = extract_dispatch_fields(buf, batch, delay_levels_ms, topic_cache)
    if build_cq:
        tx = batch.sys_flag & M.SYSFLAG_TX_MASK
        cq_ok = (tx != M.TX_PREPARED) & (tx != M.TX_ROLLBACK)
        groups: dict[tuple[str, int], list[int]] = {}
        qids = batch.queue_id.tolist()
        for i in np.flatnonzero(cq_ok).tolist():
            groups.setdefault((topics[i], qids[i]), []).append(i)
        for (topic, qid), idx in groups.items():
            ix = np.asarray(idx, dtype=np.int64)
            cq_for(topic, qid).put_units(batch.queue_offset[ix], batch.phy_offset[ix], batch.total[ix], tags_codes[ix])
    if build_index and index_service is not None:
        index_service.build_index(batch.phy_offset, batch.store_timestamp, batch.sys_flag, key_lists)


def iter_record_batches(queue, start: int, end: int, batch_records: int = BATCH_RECORDS):
    """Yield ``(mapped_file, RecordBatch)`` for the valid records in ``[start, end)`` of a commitlog
    segment queue, in order, following blank records to the next segment.

    Stops at the end of data, at ``end``, or before the first invalid record; the generator's
    return value (``StopIteration.value``) is ``(offset, reason)`` where it stopped."""
    pos_phy = start
    while pos_phy < end:
        mf = queue.find(pos_phy)
        if mf is None:
            return pos_phy, "no segment"
        pos = pos_phy - mf.file_from_offset
        starts, stop, stop_pos = M.walk_records(mf.mm, pos, min(mf.file_size, end - mf.file_from_offset), batch_records)
        batch = M.decode_batch(mf.u8, starts)
        k = batch.first_invalid()
        if k < len(batch):
            batch = batch.take(k)
        if len(batch):
            yield mf, batch
            pos_phy = mf.file_from_offset + int(batch.starts[-1] + batch.total[-1])
        if k < len(starts):
            return pos_phy, "invalid record"
        if stop == "blank":
            pos_phy = mf.file_from_offset + stop_pos
            pos_phy += mf.file_size - stop_pos
            continue
        if stop == "limit" and len(starts) == batch_records:
            continue
        return pos_phy, "end" if stop in ("end", "limit") else stop
    return pos_phy, "end"


class ReputMessageService:
    """Background dispatcher: follows the commitlog from ``reput_from`` to the confirm offset."""

    def __init__(self, store, reput_from: int):
        self.store = store
        self.reput_from = reput_from
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._thread: threading.Thread | None = None
        self._topic_cache: dict[bytes, str] = {}
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    # --- control -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rmqstore-reput", daemon=True)
        self._thread.start()

    def wake(self, _end: int = 0) -> None:
        self._wake.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def behind_bytes(self) -> int:
        return max(0, self.store.dispatch_end() - self.reput_from)

    def wait_until(self, offset: int, timeout: float | None = None) -> bool:
        """Block until everything below ``offset`` is dispatched."""
        with self._progress:
            return self._progress.wait_for(lambda: self.reput_from >= offset or self.error is not None, timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.001 if self.reput_from < self.store.dispatch_end() else 0.05)
            self._wake.clear()
            try:
                self.do_reput()
            except BaseException as e:  # noqa: BLE001 - surfaced through wait_dispatched
                log.exception("dispatch failed at offset %d", self.reput_from)
                self.error = e
                with self._progress:
                    self._progress.notify_all()
                return

    # --- work --------------------------------------------------------------------------------
    def do_reput(self, end: int | None = None) -> None:
        """Dispatch everything in ``[reput_from, end)`` (default: the store's dispatch end)."""
        with self.lock:
            store = self.store
            cl = store.commit_log
            end = store.dispatch_end() if end is None else end
            if self.reput_from < cl.min_offset:
                self.reput_from = cl.min_offset
            while self.reput_from < end:
                mf = cl.queue.find(self.reput_from)
                if mf is None:
                    break
                pos = self.reput_from - mf.file_from_offset
                seg_end = min(mf.file_size, end - mf.file_from_offset)
                starts, stop, stop_pos = M.walk_records(mf.mm, pos, seg_end, BATCH_RECORDS)
                batch = M.decode_batch(mf.u8, starts)
                k = batch.first_invalid()
                if k < len(batch):
                    batch = batch.take(k)
                if len(batch):
                    dispatch_batch(mf.mm, batch, cq_for=store.find_consume_queue, index_service=store.index_service,
                                   delay_levels_ms=store.delay_levels_ms, topic_cache=self._topic_cache,
                                   build_index=store.cfg.message_index_enable)
                    store.on_dispatched(int(batch.store_timestamp[-1]))
                    new = mf.file_from_offset + int(batch.starts[-1] + batch.total[-1])
                else:
                    new = self.reput_from
                if k < len(starts) or (stop == "invalid" and not len(batch)):
                    bad = mf.file_from_offset + (int(starts[k]) if k < len(starts) else stop_pos)
                    log.error("dispatch: invalid record at %d in %s; skipping to the end of readable data", bad, mf.path)
                    new = min(end, mf.file_from_offset + mf.wrote_position)
                    if new <= self.reput_from:
                        new = cl.roll_next_file(self.reput_from)
                elif stop == "blank" and (not len(batch) or new == mf.file_from_offset + stop_pos):
                    new = cl.roll_next_file(mf.file_from_offset + stop_pos)
                if new <= self.reput_from:
                    break  # nothing complete to dispatch yet
                with self._progress:
                    self.reput_from = new
                    self._progress.notify_all()
