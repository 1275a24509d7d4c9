"""MessageStore: the facade (mirrors ``DefaultMessageStore``).

Opening takes the lock (writers only), loads segments, consume queues, index and checkpoint,
recovers (FORMAT.md §9), starts the dispatcher and the flusher, and creates the ``abort`` file.
A clean :meth:`close` waits for dispatch, flushes everything and removes ``abort``.

Read-only opens take no lock, never create, truncate or delete a file (every mmap is read-only) and
put the would-be recovery in :attr:`recovery_report` instead of applying it.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from typing import Iterable

import numpy as np

from .config import MessageStoreConfig
from .engine import recovery as R
from .engine.checkpoint import StoreCheckpoint
from .engine.commit_log import CommitLog, now_ms
from .engine.consume_queue import ConsumeQueue
from .engine.dispatch import ReputMessageService
from .engine.index import IndexService
from .errors import (CorruptRecordError, OffsetError, ReadOnlyStoreError, StoreClosedError, StoreIOError,
                     StoreLockedError, StoreNotFoundError)
from .format.hashes import java_hash_cached
from .format.msgid import decode_offset_msg_id
from .types import (GetMessageResult, GetMessageStatus, Message, MessageRecord, PutMessageResult,
                    PutMessageStatus, QueryMessageResult)

log = logging.getLogger(__name__)

_LOCKED_PATHS: set[str] = set()
_LOCKED_GUARD = threading.Lock()
MAX_PULL_SIZE = 128 * 1024 * 1024


def _total_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover
        return 8 << 30


def parse_subscription(expr: str | None) -> tuple[frozenset[str], frozenset[int]] | None:
    """``"TagA || TagB"`` to (tags, 32-bit hashes); None means every message matches."""
    if expr is None:
        return None
    tags = [t.strip() for t in expr.split("||")]
    tags = [t for t in tags if t]
    if not tags or "*" in tags:
        return None
    return frozenset(tags), frozenset(java_hash_cached(t) for t in tags)


class MessageStore:
    """A RocketMQ store directory, opened for writing or read-only."""

    def __init__(self, path: str, cfg: MessageStoreConfig, read_only: bool):
        self.path = os.path.abspath(path)
        self.cfg = cfg
        self.read_only = read_only
        self.delay_levels_ms = cfg.delay_levels_ms
        self.commit_log = CommitLog(self.path, cfg, read_only=read_only)
        self.checkpoint = StoreCheckpoint(os.path.join(self.path, "checkpoint"), read_only=read_only)
        self.index_service = IndexService(self.path, cfg, read_only=read_only, checkpoint=self.checkpoint)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._cq_lock = threading.Lock()
        self.reput: ReputMessageService | None = None
        self.recovery_report: R.RecoveryReport | None = None
        self._lock_fd: int | None = None
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
        self._ram = _total_ram()

    # ==========================================================================================
    # Opening and closing
    # ==========================================================================================
    @classmethod
    def open(cls, path: str | os.PathLike, cfg: MessageStoreConfig | None = None, read_only: bool = False
             ) -> "MessageStore":
        cfg = cfg or MessageStoreConfig()
        path = os.fspath(path)
        if read_only:
            if not os.path.isdir(path):
                raise StoreNotFoundError("store directory does not exist", path=path)
            if not any(os.path.exists(os.path.join(path, d)) for d in ("commitlog", "consumequeue", "checkpoint")):
                raise StoreNotFoundError("not a message store (no commitlog/, consumequeue/ or checkpoint)", path=path)
        else:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as e:
                raise StoreIOError(f"cannot create store directory: {e.strerror}", path=path) from e
        store = cls(path, cfg, read_only)
        try:
            store._open()
        except BaseException:
            store._release(abort_clean=False)
            raise
        return store

    def _take_lock(self) -> None:
        lock_path = os.path.join(self.path, "lock")
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
        abort_path = os.path.join(self.path, "abort")
        last_exit_ok = not os.path.exists(abort_path)
        self.commit_log.queue.load()
        self._load_consume_queues()
        dropped_index = self.index_service.load(last_exit_ok)
        self._recover(last_exit_ok, dropped_index)
        if not self.read_only:
            with open(abort_path, "w") as fh:
                fh.write(str(os.getpid()))
            self.commit_log.on_append = self._on_append
            self.reput.start()
            self._flusher = threading.Thread(target=self._flush_loop, name="rmqstore-flush", daemon=True)
            self._flusher.start()

    def _load_consume_queues(self) -> None:
        root = os.path.join(self.path, "consumequeue")
        if not os.path.isdir(root):
            return
        for topic in sorted(os.listdir(root)):
            tdir = os.path.join(root, topic)
            if not os.path.isdir(tdir):
                continue
            for q in sorted(os.listdir(tdir)):
                if not q.isdigit():
                    continue
                cq = ConsumeQueue(self.path, topic, int(q), self.cfg, read_only=self.read_only)
                cq.load()
                self.consume_queues[(topic, int(q))] = cq

    def _recover(self, last_exit_ok: bool, dropped_index: list) -> None:
        t0 = R.now()
        cl = self.commit_log
        files = cl.queue.files
        applied = not self.read_only
        for cq in self.consume_queues.values():
            cq.recover()
        dispatch_from = max((cq.max_physic_offset for cq in self.consume_queues.values()), default=-1)
        mode = "empty" if not files else ("normal" if last_exit_ok else "abnormal")
        report = R.RecoveryReport(mode=mode, applied=applied)
        if files:
            cp = self.checkpoint.values
            start_i = R.choose_start_segment(files, self.cfg, normal=last_exit_ok, dispatch_from_phy=dispatch_from,
                                             min_timestamp=cp.min_timestamp, index_msg_timestamp=cp.index_msg_timestamp)
            end, last_valid, nrec, reason = R.scan_valid(files, start_i, self.cfg)
            report.start_offset, report.end_offset = files[start_i].file_from_offset, end
            report.last_valid_offset, report.records_scanned = last_valid, nrec
            extents = R.tail_extents(files, end, self.cfg.max_message_size + 65536 + 4096)
            report.cuts = R.save_cuts(self.path, extents, reason, applied)
            if applied:
                for mf, pos, stop in extents:
                    mf.zero_from(pos, stop)
                    mf.flush(0)
                cl.queue.truncate_dirty_files(end)
                for mf in cl.queue.files:
                    mf.flushed_position = mf.wrote_position
            else:
                for mf in files:
                    if mf.file_from_offset <= end < mf.file_from_offset + mf.file_size:
                        mf.wrote_position = mf.flushed_position = end - mf.file_from_offset
                    elif mf.file_from_offset >= end:
                        mf.wrote_position = mf.flushed_position = 0
            cl.confirm_offset = cl.flushed_offset = end
            if last_valid >= 0:
                self.checkpoint.values.confirm_phy_offset = last_valid
            for cq in self.consume_queues.values():
                if cq.max_physic_offset >= end:
                    before = cq.max_offset
                    cq.truncate_dirty(end)
                    if cq.max_offset != before:
                        report.consume_queues_truncated.append(f"{cq.topic}/{cq.queue_id}")
        else:
            for cq in self.consume_queues.values():
                if applied:
                    cq.destroy()
            if applied:
                self.consume_queues.clear()
        # what has to be dispatched again
        end = cl.confirm_offset
        redispatch = min(max(dispatch_from, 0), end) if last_exit_ok else min(report.start_offset, end)
        if dropped_index:
            report.index_files_rebuilt = [f.name for f in dropped_index]
            kept = self.index_service.files
            rebuild_from = kept[-1].end_phy if kept else cl.min_offset
            redispatch = min(redispatch, rebuild_from)
            if applied:
                self.index_service.destroy_files(dropped_index)
            else:
                for f in dropped_index:
                    f.close()
        redispatch = max(redispatch, cl.min_offset)
        report.redispatch_from = redispatch
        self.reput = ReputMessageService(self, redispatch)
        if applied:
            self.reput.do_reput(end)
            for cq in self.consume_queues.values():
                cq.flush(0)
            self.checkpoint.flush()
        else:
            self.reput.reput_from = end
        for cq in self.consume_queues.values():
            cl.topic_queue_table[(cq.topic, cq.queue_id)] = cq.max_offset
            cq.correct_min_offset(cl.min_offset)
        report.seconds = R.now() - t0
        self.recovery_report = report
        if report.mode != "empty" and (not report.clean or report.mode == "abnormal"):
            log.warning("%s: %s", self.path, report.summary())

    def dispatch_end(self) -> int:
        cl = self.commit_log
        return cl.flushed_offset if self.cfg.sync_flush else cl.confirm_offset

    def _on_append(self, end: int) -> None:
        if not self.cfg.sync_flush:
            self.reput.wake()

    def on_dispatched(self, store_ts: int) -> None:
        self.checkpoint.values.logics_msg_timestamp = store_ts

    def _flush_loop(self) -> None:
        cfg = self.cfg
        last_thorough = last_cq = time.monotonic()
        while not self._stop.wait(cfg.flush_interval_commit_log / 1000):
            try:
                now = time.monotonic()
                thorough = (now - last_thorough) * 1000 >= cfg.flush_commit_log_thorough_interval
                self.commit_log.flush(0 if thorough else cfg.flush_commit_log_least_pages)
                if thorough:
                    last_thorough = now
                    self.checkpoint.values.physic_msg_timestamp = self.commit_log.flushed_store_timestamp
                if self.cfg.sync_flush:
                    self.reput.wake()
                if (now - last_cq) * 1000 >= cfg.flush_interval_consume_queue:
                    last_cq = now
                    for cq in list(self.consume_queues.values()):
                        cq.flush(cfg.flush_consume_queue_least_pages)
                    self.checkpoint.flush()
            except Exception:  # noqa: BLE001 - a background thread must not die silently
                log.exception("flush failed")

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("store is closed", path=self.path)

    def close(self) -> None:
        """Clean shutdown: dispatch everything, flush all files, write the checkpoint, remove
        ``abort`` (kept if dispatch could not finish, so the next open recovers)."""
        if self._closed:
            return
        clean = True
        if not self.read_only and self.reput is not None:
            try:
                self.commit_log.flush(0)
                self.reput.wake()
                self.reput.wait_until(self.commit_log.confirm_offset, timeout=60)
            except Exception:  # noqa: BLE001
                log.exception("flush at close failed")
                clean = False
            clean = clean and self.reput.error is None and self.reput.behind_bytes() == 0
        self._release(abort_clean=clean)

    def _release(self, abort_clean: bool) -> None:
        self._closed = True
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        if self.reput is not None:
            self.reput.shutdown()
        if not self.read_only and self._lock_fd is not None:
            try:
                self.commit_log.flush(0)
                for cq in self.consume_queues.values():
                    cq.flush(0)
                self.checkpoint.values.physic_msg_timestamp = self.commit_log.flushed_store_timestamp or \
                    self.checkpoint.values.physic_msg_timestamp
                self.index_service.flush()
                self.checkpoint.flush()
            except Exception:  # noqa: BLE001
                log.exception("final flush failed; the next open will recover")
                abort_clean = False
        self.index_service.close()
        for cq in self.consume_queues.values():
            cq.close()
        self.commit_log.close()
        if self._lock_fd is not None:
            if abort_clean:
                try:
                    os.unlink(os.path.join(self.path, "abort"))
                except FileNotFoundError:
                    pass
            with _LOCKED_GUARD:
                _LOCKED_PATHS.discard(self.path)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ==========================================================================================
    # Writing
    # ==========================================================================================
    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyStoreError("store is open read-only", path=self.path)

    def put_message(self, msg: Message) -> PutMessageResult:
        """Append one message (``putMessage``)."""
        self._check_writable()
        return self.commit_log.put_message(msg)

    def put_messages(self, msgs: Iterable[Message]) -> PutMessageResult:
        """Append a batch for one topic and queue (``putMessages``)."""
        self._check_writable()
        return self.commit_log.put_messages(list(msgs))

    def wait_dispatched(self, timeout: float | None = None) -> None:
        """Block until every message appended so far is in its consume queue and the index."""
        self._check_open()
        if self.read_only:
            return
        target = self.commit_log.confirm_offset
        if self.cfg.sync_flush:
            self.commit_log.sync_to(target)
        self.reput.wake()
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
            with self._cq_lock:
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
    def look_message_by_offset(self, phy_offset: int) -> MessageRecord | None:
        """The record at a commitlog offset; None when nothing is stored there, and
        :class:`CorruptRecordError` (path, offset) when the bytes there are not a valid record."""
        self._check_open()
        cl = self.commit_log
        if phy_offset < cl.min_offset or phy_offset >= cl.confirm_offset:
            return None
        return cl.read_record(phy_offset)

    def view_message_by_id(self, offset_msg_id: str) -> MessageRecord | None:
        """Decode an offsetMsgId and read the record it points to."""
        _, phy = decode_offset_msg_id(offset_msg_id)
        return self.look_message_by_offset(phy)

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_nums: int = 32,
                    subscription: str | None = None) -> GetMessageResult:
        """Pull up to ``max_nums`` messages from ``offset`` (``getMessage``, FORMAT.md §11.1).

        ``subscription`` is a tag expression (``"TagA || TagB"``, ``"*"``); units are matched by
        tag hash as upstream, then by the exact TAGS string (what the client would do), so hash
        collisions are never returned; ``filtered`` counts what the exact check dropped."""
        self._check_open()
        cfg = self.cfg
        cq = self.find_consume_queue(topic, queue_id)
        min_o, max_o = cq.min_offset, cq.max_offset
        if max_o == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_o, max_o)
        if offset < min_o:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_o, min_o, max_o)
        if offset == max_o:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_o, max_o)
        if offset > max_o:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_o, min_o, max_o)
        sub = parse_subscription(subscription)
        cl = self.commit_log
        max_phy = cl.confirm_offset
        in_mem_limit = self._ram * cfg.access_message_in_memory_max_ratio // 100
        max_filter = max(cfg.max_filter_message_size, max_nums * 20)
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        next_begin = offset
        messages: list[MessageRecord] = []
        total_bytes = 0
        filtered = 0
        files_walked = 0
        while total_bytes <= 0 and next_begin < max_o and files_walked < cfg.travel_cq_file_num_when_get_message:
            files_walked += 1
            units = cq.iterate_from(next_begin)
            if units is None:
                status = GetMessageStatus.OFFSET_FOUND_NULL
                next_begin = cq.roll_next_file(next_begin)
                break
            q = next_begin
            next_phy_file_start = None
            for phy, size, tags_code in zip(units["phy_offset"].tolist(), units["size"].tolist(),
                                            units["tags_code"].tolist()):
                if next_begin >= max_o:
                    break
                if (q - offset) * 20 >= max_filter:
                    break
                count = len(messages)
                if total_bytes and count:
                    in_mem = (max_phy - phy) <= in_mem_limit
                    if count + 1 > max_nums or total_bytes + size > MAX_PULL_SIZE:
                        break
                    if in_mem:
                        if total_bytes + size > cfg.max_transfer_bytes_on_message_in_memory or \
                                count > cfg.max_transfer_count_on_message_in_memory - 1:
                            break
                    elif total_bytes + size > cfg.max_transfer_bytes_on_message_in_disk or \
                            count > cfg.max_transfer_count_on_message_in_disk - 1:
                        break
                if total_bytes >= MAX_PULL_SIZE:
                    break
                next_begin = q + 1
                q += 1
                if next_phy_file_start is not None and phy < next_phy_file_start:
                    continue
                if sub is not None:
                    t32 = ((tags_code + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
                    if t32 not in sub[1]:
                        if total_bytes == 0:
                            status = GetMessageStatus.NO_MATCHED_MESSAGE
                        continue
                if cl.get_data(phy, size) is None:
                    if total_bytes == 0:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    next_phy_file_start = cl.roll_next_file(phy)
                    continue
                rec = cl.read_record(phy)
                if sub is not None and rec.tags not in sub[0]:
                    filtered += 1
                    continue
                messages.append(rec)
                total_bytes += size
                status = GetMessageStatus.FOUND
                next_phy_file_start = None
        return GetMessageResult(status, next_begin, min_o, max_o, messages, filtered)

    def _read_quiet(self, phy: int) -> MessageRecord | None:
        try:
            return self.look_message_by_offset(phy)
        except (CorruptRecordError, OffsetError):
            return None

    def query_message(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                      end_ms: int = 2**63 - 1, exact: bool = True) -> QueryMessageResult:
        """Messages whose KEYS or UNIQ_KEY equal ``key``, oldest first, at most ``max_num``.

        ``exact=True`` (default, beyond upstream): every candidate is read and kept only when its
        topic matches and a KEYS token or the UNIQ_KEY equals ``key``; duplicates are dropped and
        ``truncated`` says whether ``max_num`` cut the result (``maxMsgsNumBatch`` does not apply).
        ``exact=False``: upstream ``queryMessage`` — index hash matches, hash collisions included,
        ``max_num`` capped at ``maxMsgsNumBatch``, up to three rounds."""
        self._check_open()
        if exact:
            return self._query_exact(topic, key, max_num, begin_ms, end_ms, uniq_only=False)
        result = QueryMessageResult([])
        last_time = end_ms
        for _ in range(3):
            offs, lt, lp = self.index_service.query_offsets(topic, key, max_num, begin_ms, last_time)
            if not offs:
                break
            offs.sort()
            result.index_last_update_timestamp, result.index_last_update_phy_offset = lt, lp
            for m, phy in enumerate(offs):
                rec = self._read_quiet(phy)
                if rec is None:
                    continue
                if m == 0:
                    last_time = rec.store_timestamp
                result.messages.append(rec)
            if result.messages or last_time < begin_ms:
                break
        return result

    def _query_exact(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int, uniq_only: bool
                     ) -> QueryMessageResult:
        limit = max(1, max_num + 1)
        while True:
            offs, lt, lp = self.index_service.query_offsets(topic, key, limit, begin_ms, end_ms, cap=False)
            seen: set[int] = set()
            found: list[MessageRecord] = []
            for phy in sorted(set(offs)):
                rec = self._read_quiet(phy)
                if rec is None or rec.topic != topic or phy in seen:
                    continue
                if rec.uniq_key == key or (not uniq_only and key in rec.keys):
                    seen.add(phy)
                    found.append(rec)
            if len(offs) < limit or len(found) > max_num:
                break
            limit *= 2
        # the index yields newest first: when max_num cuts, keep the newest max_num (as upstream)
        kept = found[max(0, len(found) - max_num):] if max_num > 0 else []
        return QueryMessageResult(kept, len(found) > max_num, lt, lp)

    def query_message_by_unique_key(self, topic: str, uniq_key: str, begin_ms: int = 0,
                                    end_ms: int = 2**63 - 1) -> QueryMessageResult:
        """Messages whose UNIQ_KEY equals ``uniq_key`` (broker default maxNum 32)."""
        self._check_open()
        return self._query_exact(topic, uniq_key, self.cfg.default_query_max_num, begin_ms, end_ms, uniq_only=True)

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
