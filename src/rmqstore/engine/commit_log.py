"""CommitLog: one append-only log of records for all topics (mirrors ``CommitLog``).

Appends are encoded outside the lock; under the single append lock the store owns the rest:
store timestamp, queue offset (from the per-queue table), phy offset, the optional properties CRC,
the blank record and roll at the end of a segment. ``confirm_offset`` is published only after a
record is completely written, so readers and the dispatcher never see half a record.
"""
from __future__ import annotations

import collections
import functools
import logging
import threading
import time

import numpy as np

from ..config import MessageStoreConfig
from ..errors import CorruptRecordError, OffsetError, StoreIOError
from ..format import message as M
from ..format import properties as P
from ..format.encode import V4Shape
from ..format.record import tags_code_of
from ..format.record_layout import STORE_TIMESTAMP_END_V4, stamp_record, store_timestamp_at
from ..format.msgid import encode_offset_msg_id, encode_offset_msg_ids, parse_host
from ..io.mapped_file_queue import MappedFileQueue
from ..types import SCHEDULE_TOPIC, Message, MessageRecord, PutMessageResult, PutMessageStatus
from ..io import paths
from .batch_facts import BATCH_FACTS_MAX, BatchFact
from .put_batch import put_messages_fast
from .put_encode import (DEFAULT_BORN_HOST, MAX_TOTAL_EXTRA, NO_WAIT, SLOW_SYSFLAGS, TOPIC_RE, Encoded, append_failed,
                         encode_message, illegal, is_delayed, props_bytes, range_checked)

log = logging.getLogger(__name__)

_MAX_PROPS = P.MAX_PROPERTIES_SIZE
#: batches whose record starts wait for the dispatcher at most (of 256 records: 8 MiB of starts)
START_HINTS_MAX = 4096
_PUT_OK = PutMessageStatus.PUT_OK
_BLANK_MIN = M.END_FILE_MIN_BLANK_LENGTH
_time_ns = time.time_ns
_sleep = time.sleep


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendLock:
    """The append lock, taken without blocking in the common case.

    A plain ``threading.Lock`` makes producer threads convoy under the GIL: a thread that blocks
    on the lock takes it at the OS level the moment it is released, *before* it has the GIL back,
    so the releasing thread, still running, blocks on its next put, and the lock and the GIL
    change hands (two context switches) on every append. Four producers ran 3.5x slower than one.

    Here a thread only ever takes the lock while holding the GIL: it tries without blocking and,
    when the holder was preempted inside the lock, gives the GIL away (``sleep(0)``) and tries
    again; after ``SPINS`` tries (the holder is in a long GIL-free call, such as creating a
    segment) it blocks like a plain lock. Mutual exclusion is the plain lock's."""

    __slots__ = ("_lock", "_try", "release")
    SPINS = 100

    def __init__(self):
        self._lock = threading.Lock()
        self._try = self._lock.acquire
        self.release = self._lock.release

    def acquire(self) -> bool:
        if self._try(False):
            return True
        for _ in range(self.SPINS):
            _sleep(0)
            if self._try(False):
                return True
        return self._lock.acquire()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> "AppendLock":
        if not self._try(False):
            self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class CommitLog:
    """The commitlog of one store directory."""

    def __init__(self, store_dir: str, cfg: MessageStoreConfig, *, read_only: bool):
        self.cfg = cfg
        self.read_only = read_only
        self.queue = MappedFileQueue(paths.commitlog_dir(store_dir), cfg.mapped_file_size_commit_log,
                                     read_only=read_only)
        self.put_lock = AppendLock()
        #: (topic, queue_id) -> next queue offset (upstream ``topicQueueTable``)
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        #: end of completely written data; everything below it is readable
        self.confirm_offset = 0
        self.last_store_timestamp = 0
        self._store_host_raw = parse_host(cfg.store_host)
        self._delay_levels = cfg.delay_levels_ms
        self.on_append = None  # callable(end_offset), set by the store (wakes the dispatcher)
        self._flush_cv = threading.Condition()
        self._flushing = False
        self.flushed_offset = 0
        self.flushed_store_timestamp = 0
        self._plans: dict = {}
        self.max_body = cfg.max_message_size
        # a record must fit the segment with room for the 8-byte blank, and the upstream total limit
        self.max_record = min(cfg.max_message_size + MAX_TOTAL_EXTRA, cfg.mapped_file_size_commit_log - 8)
        self._sync = cfg.sync_flush
        #: ``(first phy, end phy, record starts relative to the first)`` of each batch the fast
        #: path appended, in commitlog order: the dispatcher takes these instead of following
        #: TOTALSIZE record by record, a Python loop that holds the GIL the producer needs
        #: (:meth:`~rmqstore.engine.reput.ReputMessageService.hinted_starts`). The dispatcher alone pops; appending
        #: pauses while ``START_HINTS_MAX`` wait, and the dispatcher walks until it meets one again.
        self.batch_starts: collections.deque = collections.deque()
        #: what the group commit's single puts appended, for the dispatcher (engine/group_commit.py: FACTS)
        self.put_facts: collections.deque = collections.deque()
        self.batch_facts: collections.deque = collections.deque()  # for the dispatcher (engine/batch_facts.py)

    # ------------------------------------------------------------------------------------------
    # Appending (under the lock)
    # ------------------------------------------------------------------------------------------
    def _segment_for(self, total: int):
        """The segment the next ``total`` bytes go to, writing a blank and rolling if needed."""
        mf = self.queue.get_last_mapped_file(0)
        if total + M.END_FILE_MIN_BLANK_LENGTH > mf.remaining:
            remaining = mf.remaining
            mf.write_at(mf.wrote_position, M.encode_blank(remaining))
            mf.wrote_position = mf.file_size
            mf = self.queue.get_last_mapped_file(0)
        return mf

    def _stamp(self, e: Encoded, rec: bytearray, pos: int, store_ts: int, queue_offset: int, phy: int) -> None:
        stamp_record(rec, pos, queue_offset, phy, store_ts, e.born_unset)
        if self.cfg.enabled_append_prop_crc:
            M.fill_prop_crc(rec, pos, e.total)

    def fast_plan(self, msg: Message):
        """Per (topic, born host, store host) constants of the common record shape (V1 or V2,
        IPv4 hosts, no properties CRC), or None when the message needs the general path."""
        key = (msg.topic, msg.born_host, msg.store_host)
        plan = self._plans.get(key)
        if plan is None:
            if self.cfg.enabled_append_prop_crc or not isinstance(msg.topic, str):
                return None
            topic = msg.topic
            if not topic or not TOPIC_RE.match(topic) or len(topic) > M.MAX_TOPIC_BYTES or len(topic) > 127 \
                    or topic == SCHEDULE_TOPIC:  # its DELAY is checked as Java parses it (encode_message)
                return None
            try:
                born = parse_host(msg.born_host or DEFAULT_BORN_HOST)
                store_raw = parse_host(msg.store_host) if msg.store_host else self._store_host_raw
            except ValueError:
                return None
            if len(born) != 8 or len(store_raw) != 8:
                return None
            plan = (V4Shape(topic.encode("ascii"), False, born, store_raw), store_raw.hex().upper())
            if len(self._plans) < 4096:
                self._plans[key] = plan
        return plan

    def fast_parts(self, msg: Message):
        """Outside the lock, the fast path's parts of ``msg`` (the common shape: IPv4 hosts, V1 topic,
        no properties CRC, not transactional): ``(shape, store host hex, properties, total, prepared)``;
        None when it needs the general path."""
        plan = self._plans.get((msg.topic, msg.born_host, msg.store_host)) or self.fast_plan(msg)
        body = msg.body
        if plan is None or msg.sys_flag & SLOW_SYSFLAGS or type(body) is not bytes or msg.queue_id < 0:
            return None
        props = props_bytes(msg)
        shape, store_hex = plan
        blen, plen = len(body), len(props)
        total = shape.overhead + blen + plen
        if plen > _MAX_PROPS or blen > self.max_body or total > self.max_record or b"INNER_NUM\x01" in props:
            return None
        return shape, store_hex, props, total, shape.prepare(msg, body, props)

    @range_checked
    def put_message(self, msg: Message) -> PutMessageResult:
        """Append one message. The common shape takes a fast path (:meth:`fast_parts`): everything but
        the header is encoded outside the lock, the header is packed under it with the stamp (offsets
        and time), and both go straight into the mapped segment. Anything else goes through
        :meth:`_put_general` (same bytes, more checks)."""
        parts = self.fast_parts(msg)
        if parts is None:
            return self._put_general(msg)
        shape, store_hex, props, total, prepared = parts
        try:
            with self.put_lock:
                phy, qoff, store_ts, end = self.append_fast(msg, shape, total, prepared)
        except (OSError, StoreIOError) as ex:
            return append_failed(ex)
        status = self.after_append(end, props)
        return PutMessageResult(status, f"{store_hex}{phy:016X}", phy, total, qoff, store_ts, 1)

    def append_fast(self, msg: Message, shape, total: int, prepared) -> tuple[int, int, int, int]:
        """Under the lock: stamp and write one record of the fast path; ``(phy, queue offset, store
        time, end offset)``."""
        fixed_ts = msg.store_timestamp
        store_ts = fixed_ts if fixed_ts is not None else _time_ns() // 1_000_000
        key = (msg.topic, msg.queue_id)
        qoff = self.topic_queue_table.get(key, 0)
        mf = self.queue.last
        if mf is None or total + _BLANK_MIN > mf.file_size - mf.wrote_position:
            mf = self._segment_for(total)
        pos = mf.wrote_position
        phy = mf.file_from_offset + pos
        shape.write_stamped(mf.mm, pos, msg, prepared, (qoff, phy, store_ts))  # all or nothing
        return phy, qoff, store_ts, self._publish(mf, pos + total, store_ts, key, qoff + 1)

    def _put_general(self, msg: Message) -> PutMessageResult:
        e = encode_message(msg, self.cfg, self._store_host_raw)
        if isinstance(e, PutMessageResult):
            return e
        return self._append_encoded([e])

    def _append_encoded(self, enc: list[Encoded]) -> PutMessageResult:
        """Append records encoded by :func:`~.put_encode.encode_message` (one message, or a batch for one queue sharing
        the first's store time); PREPARED/ROLLBACK records take queue offset 0 and no offset."""
        total = sum(e.total for e in enc)
        if total + M.END_FILE_MIN_BLANK_LENGTH > self.cfg.mapped_file_size_commit_log:
            return illegal(f"batch of {total} bytes cannot fit one commitlog segment")
        buf = enc[0].rec if len(enc) == 1 else bytearray().join(e.rec for e in enc)
        counts = enc[0].tx_type in (M.TX_NOT_TYPE, M.TX_COMMIT)
        key = enc[0].key
        try:
            with self.put_lock:
                store_ts = enc[0].store_timestamp if enc[0].store_timestamp is not None else now_ms()
                qoff0 = self.topic_queue_table.get(key, 0) if counts else 0
                mf = self._segment_for(total)
                pos0 = mf.wrote_position
                phy0 = mf.file_from_offset + pos0
                pos = 0
                for i, e in enumerate(enc):
                    self._stamp(e, buf, pos, store_ts, qoff0 + i if counts else 0, phy0 + pos)
                    pos += e.total
                mf.write_at(pos0, buf)
                end = self._publish(mf, pos0 + total, store_ts, key, qoff0 + len(enc) if counts else None)
        except (OSError, StoreIOError) as ex:
            return append_failed(ex)
        status = self.after_append(end, None if enc[0].wait else NO_WAIT)
        ids, pos = [], 0
        for e in enc:
            ids.append(encode_offset_msg_id(e.store_host_raw, phy0 + pos))
            pos += e.total
        return PutMessageResult(status, ",".join(ids), phy0, total, qoff0, store_ts, len(enc))

    def _publish(self, mf, new_pos: int, store_ts: int, key: tuple[str, int], next_queue_offset: int | None) -> int:
        """Under the append lock, after the bytes are in the segment: make them visible (write
        position, queue offset table, confirm offset). Returns the new end offset."""
        mf.wrote_position = new_pos
        mf.last_store_timestamp = store_ts
        if next_queue_offset is not None:
            self.topic_queue_table[key] = next_queue_offset
        end = mf.file_from_offset + new_pos
        self.confirm_offset = end
        self.last_store_timestamp = store_ts
        return end

    def after_append(self, end: int, props: bytes | None) -> PutMessageStatus:
        """Outside the lock: wake the dispatcher and, under SYNC_FLUSH, wait for the group commit
        unless the message says ``WAIT=false``."""
        on_append = self.on_append
        if on_append is not None:
            on_append(end)
        if self._sync and not (props and NO_WAIT in props) and not self.sync_to(end):
            return PutMessageStatus.FLUSH_DISK_TIMEOUT
        return _PUT_OK

    @range_checked
    def put_messages(self, msgs: list[Message]) -> PutMessageResult:
        """A batch for one topic and queue: consecutive records and queue offsets, one store time,
        all in one segment (a blank rolls the whole batch to the next one)."""
        if not msgs:
            return illegal("empty batch")
        fast = put_messages_fast(self, msgs)
        if fast is not None:
            return fast
        first = msgs[0]
        for m in msgs:
            if m.topic != first.topic or m.queue_id != first.queue_id:
                return illegal("a batch must be for one topic and queue")
            if m.sys_flag & M.SYSFLAG_TX_MASK:
                return illegal("transactional messages cannot be batched")
            props = m.properties or {}
            items = props.items() if hasattr(props, "items") else props
            for k, v in items:
                if k == P.DELAY and is_delayed(v):
                    return illegal("delayed messages cannot be batched")
        if sum(len(m.body or b"") for m in msgs) > self.cfg.max_message_size:
            return illegal("message body size exceeded")
        enc = []
        for m in msgs:
            e = encode_message(m, self.cfg, self._store_host_raw)
            if isinstance(e, PutMessageResult):
                return e
            enc.append(e)
        return self._append_encoded(enc)

    def append_batch(self, batch, parts: list, born_unset, store_host: bytes) -> list[PutMessageResult] | None:
        """Under the lock: stamp and write an encoded batch (:class:`~.put_batch.BatchPart` s back to
        back, each one producer's batch: its queue offsets consecutive in its own queue, a
        ``BatchFact`` when it has ``facts``). One result per part; None, with nothing written, when
        several parts would not all fit the current segment (one-by-one puts would roll between them)."""
        total, first, many = batch.size, parts[0].template, len(parts) > 1
        bounds = [int(batch.starts[p.at]) for p in parts] + [total]  # each part's span in the batch
        cols = [p.columns(batch) for p in parts]
        try:
            with self.put_lock:
                last = self.queue.last  # (the first part fits where the whole does not: one by one would roll after it)
                if many and last is not None and bounds[1] + _BLANK_MIN <= last.remaining < total + _BLANK_MIN:
                    return None
                store_ts = first.store_timestamp if first.store_timestamp is not None else _time_ns() // 1_000_000
                table, nxt, q0s = self.topic_queue_table, {}, []
                for p in parts:
                    key = (p.template.topic, p.template.queue_id)
                    q0s.append(nxt[key] if key in nxt else table.get(key, 0))
                    nxt[key] = q0s[-1] + p.count
                mf = self._segment_for(total)
                pos = mf.wrote_position
                phy0 = mf.file_from_offset + pos
                qoffs = np.concatenate([np.arange(q, q + p.count) for q, p in zip(q0s, parts)]) if many else q0s[0]
                mf.write_at(pos, batch.render(qoffs, phy0, store_ts, born_unset))  # first 8 bytes last: all or none
                end = self._publish(mf, pos + total, store_ts, None, None)
                table.update(nxt)
                if len(self.batch_starts) < START_HINTS_MAX:
                    self.batch_starts.append((phy0, end, batch.starts))
                for p, c, q0, a, b in zip(parts, cols, q0s, bounds, bounds[1:]):
                    if p.facts is not None and len(self.batch_facts) < BATCH_FACTS_MAX:
                        self.batch_facts.append(BatchFact(phy0 + a, phy0 + b, *c, q0, store_ts,
                                                          p.template.topic, p.template.queue_id, p.template.sys_flag,
                                                          *p.facts))
        except (OSError, StoreIOError) as ex:
            failed = append_failed(ex)
            return [PutMessageResult(failed.status, error=failed.error) for _ in parts]
        waits = [NO_WAIT not in p.props0 for p in parts]
        status = self.after_append(end, None if any(waits) else NO_WAIT)  # one wake-up, one flush wait
        return [PutMessageResult(status if w else _PUT_OK, functools.partial(  # (ids formatted when read)
            encode_offset_msg_ids, store_host, c[0] + (phy0 + a)), phy0 + a, b - a, q0, store_ts, p.count)
            for p, c, w, q0, a, b in zip(parts, cols, waits, q0s, bounds, bounds[1:])]

    # ------------------------------------------------------------------------------------------
    # Flushing
    # ------------------------------------------------------------------------------------------
    def sync_to(self, end: int) -> bool:
        """Group commit: return once every byte below ``end`` is flushed (True) or after
        ``syncFlushTimeout`` (False). The first waiter flushes for everyone behind it."""
        deadline = time.monotonic() + self.cfg.sync_flush_timeout / 1000
        cv = self._flush_cv
        with cv:
            while self.flushed_offset < end:
                if not self._flushing:
                    self._flushing = True
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                cv.wait(left)
            else:
                return True
        try:
            self.flush(0)
        finally:
            with cv:
                self._flushing = False
                cv.notify_all()
        return self.flushed_offset >= end

    def flush(self, least_pages: int = 0) -> int:
        """Flush dirty commitlog pages; returns the flushed offset."""
        if self.read_only:
            return self.confirm_offset
        target, ts = self.confirm_offset, self.last_store_timestamp
        self.queue.flush(least_pages)
        flushed = min(self.queue.flushed_where, target) if least_pages else target
        if flushed > self.flushed_offset:
            self.flushed_offset = flushed
        if least_pages == 0:
            self.flushed_store_timestamp = ts
        return self.flushed_offset

    # ------------------------------------------------------------------------------------------
    # Reading
    # ------------------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.confirm_offset

    def get_data(self, phy: int, size: int) -> memoryview | None:
        """``size`` bytes at ``phy`` when they are inside written data, else None."""
        if phy < self.min_offset or phy + size > self.confirm_offset or size <= 0:
            return None
        mf = self.queue.find(phy)
        if mf is None:
            return None
        pos = phy - mf.file_from_offset
        if pos + size > mf.file_size:
            return None
        return mf.read(pos, size)

    def read_record(self, phy: int, *, check_crc: bool = False, check_torn: bool = False):
        """Decode the record at ``phy`` (:class:`CorruptRecordError` when it is not one)."""
        confirm = self.confirm_offset
        if phy >= confirm or phy < self.min_offset:
            raise OffsetError(f"commitlog offset {phy} is outside [{self.min_offset}, {confirm})",
                              path=self.queue.directory, offset=phy)
        mf = self.queue.find(phy)
        if mf is None:
            raise OffsetError(f"no commitlog segment holds offset {phy}", path=self.queue.directory, offset=phy)
        base = mf.file_from_offset
        pos = phy - base
        limit = min(mf.file_size, confirm - base)
        rec = None
        if limit - pos >= M.MIN_RECORD_SIZE and not (check_crc and self.cfg.force_verify_prop_crc):
            # the usual record (V1 topic, IPv4 hosts), one call: a pull reads every message through here
            rec = M.decode_v1_ipv4(mf.mm, pos, limit, check_crc, check_torn, (base, mf.path))
        if rec is None:
            rec = M.decode_message(mf.mm, pos, limit, base_offset=base, path=mf.path, check_crc=check_crc,
                                   force_verify_prop_crc=self.cfg.force_verify_prop_crc, check_torn=check_torn)
        if rec.phy_offset != phy:
            raise CorruptRecordError(f"record at {phy} says PHYSICALOFFSET {rec.phy_offset}", path=mf.path, offset=pos)
        return apply_delay_levels(rec, self._delay_levels)

    def read_pulled(self, phy: int, size: int, topic: str, queue_id: int, queue_offset: int, end_phy: int):
        """The fast path of a pull: the record at ``phy`` when it is exactly the consume-queue unit's
        (V1, IPv4 hosts, ``size`` bytes, that topic, queue and queue offset, before ``end_phy``) and
        intact (CRC, no torn end); None for anything else, so the caller's careful path
        (:meth:`read_record` and its checks) decides what is wrong and says so."""
        if self.cfg.force_verify_prop_crc:
            return None
        mf = self.queue.find(phy)
        if mf is None:
            return None
        base = mf.file_from_offset
        pos = phy - base
        limit = min(mf.file_size, end_phy - base)
        if size < M.MIN_RECORD_SIZE or pos + size > limit:
            return None
        try:
            rec = M.decode_v1_ipv4(mf.mm, pos, limit, True, True, (base, mf.path))
        except CorruptRecordError:
            return None
        if rec is None or rec.phy_offset != phy or rec.store_size != size or rec.queue_offset != queue_offset or \
                rec.queue_id != queue_id or rec.topic != topic:
            return None
        return apply_delay_levels(rec, self._delay_levels) if topic == SCHEDULE_TOPIC else rec

    def pickup_store_timestamp(self, phy: int, size: int) -> int:
        """STORETIMESTAMP of the record at ``phy`` or -1 (FORMAT.md §11.6)."""
        if phy < 0 or phy < self.min_offset or phy + size > self.confirm_offset:
            return -1
        mf = self.queue.find(phy)
        if mf is None:
            return -1
        pos = phy - mf.file_from_offset
        if pos + STORE_TIMESTAMP_END_V4 > mf.file_size:
            return -1
        return store_timestamp_at(mf.mm, pos)

    def roll_next_file(self, phy: int) -> int:
        size = self.cfg.mapped_file_size_commit_log
        return phy + size - phy % size

    def close(self) -> None:
        self.queue.close()


def apply_delay_levels(rec: MessageRecord, delay_levels_ms) -> MessageRecord:
    """``rec`` with the tagsCode the store gives it: a SCHEDULE_TOPIC_XXXX record's is its delivery
    time by the broker's delay levels (the codec, knowing no broker policy, gives the TAGS hash)."""
    if rec.topic == SCHEDULE_TOPIC:
        rec.tags_code = tags_code_of(rec.topic, rec.properties, rec.store_timestamp, delay_levels_ms)
    return rec
