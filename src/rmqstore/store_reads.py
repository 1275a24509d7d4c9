"""The read half of :class:`~rmqstore.message_store.MessageStore`: pulls, lookups by offset and
message id, key queries, and the checks that keep a damaged record from ever being served.

:class:`StoreReads` is a mixin: :class:`MessageStore` inherits it, and it works only through the
store's public parts (``commit_log``, ``consume_queues``, ``index_service``, ``cfg``, ``reput``,
``read_only``, ``cq_lock``, ``closed``, ``closed_cleanly``, ``memory_limit_bytes()``,
``find_consume_queue()``); it also holds ``check_open()``, which the whole facade calls.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from .consumer import EARLIEST, Consumer
from .engine import recovery as R
from .engine.consume_queue import ConsumeQueue
from .errors import CorruptRecordError, OffsetError, StoreClosedError, UnitMismatchError
from .format import consume_queue as CQF
from .format import message as M
from .format.hashes import java_hash_cached
from .format.javalang import java_trim
from .format.msgid import decode_offset_msg_id
from .io import paths
from .types import GetMessageResult, GetMessageStatus, MessageRecord, QueryMessageResult, SkippedMessage

log = logging.getLogger("rmqstore.message_store")

MAX_PULL_SIZE = 128 * 1024 * 1024
#: how far a damaged unit's record is looked for: sound units either side, and commitlog bytes
LOCATE_UNITS = 64
LOCATE_BYTES = 16 << 20


def parse_subscription(expr: str | None) -> tuple[frozenset[str], frozenset[int]] | None:
    """``"TagA || TagB"`` to (tags, 32-bit hashes); None means every message matches.

    As upstream's ``FilterAPI.buildSubscriptionData``: only an empty expression or exactly ``*``
    matches everything; otherwise the parts between ``||``, trimmed as Java's ``String.trim``,
    are tags (so ``"TagA || *"`` is TagA or the literal tag ``*``, and ``"||"`` matches nothing)."""
    if not expr or expr == "*":
        return None
    tags = [t for t in (java_trim(t) for t in expr.split("||")) if t]
    return frozenset(tags), frozenset(java_hash_cached(t) for t in tags)


def _tags_code_int32(tags_code: int) -> int:
    return ((tags_code + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _units_of_one_file(cq: ConsumeQueue, q: int, units: np.ndarray, first: int, limit: int):
    """``(phy, size, tagsCode)`` of up to ``limit`` units from ``q`` in the consume-queue file
    holding it: ``units`` (the first ``first`` of them), then further chunks as the caller goes on."""
    step = first
    while True:
        yield from zip(units["phy_offset"].tolist(), units["size"].tolist(), units["tags_code"].tolist())
        got = len(units)
        q += got
        limit -= got
        if got < step or limit <= 0 or (q * CQF.UNIT_SIZE) % cq.queue.file_size == 0:
            return  # the end of the written units, of what may be walked, or of the file
        step = min(limit, 256)
        units = cq.iterate_from(q, step)
        if units is None or not len(units):
            return


@dataclass
class _Pull:
    """One ``get_message`` in progress: what it asked for and what it has found so far."""

    cq: ConsumeQueue
    max_offset: int      # the queue's end when the pull began
    offset: int
    max_nums: int
    sub: tuple[frozenset[str], frozenset[int]] | None
    transfer_limits: bool
    max_phy: int
    in_mem_limit: int
    status: GetMessageStatus = GetMessageStatus.NO_MATCHED_MESSAGE
    next_begin: int = -1
    messages: list[MessageRecord] = field(default_factory=list)
    total_bytes: int = 0
    filtered: int = 0
    skipped: list[SkippedMessage] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.next_begin < 0:
            self.next_begin = self.offset


class StoreReads:
    """Pulls, lookups and queries of a :class:`~rmqstore.message_store.MessageStore` (a mixin)."""

    def check_open(self) -> None:
        """:class:`StoreClosedError` once the store is closed (every public call checks)."""
        if self.closed:
            raise StoreClosedError("store is closed", path=self.path)

    def look_message_by_offset(self, phy_offset: int) -> MessageRecord | None:
        """The record at a commitlog offset; None when nothing is stored there, and
        :class:`CorruptRecordError` (path, offset) when the bytes there are not a complete, valid
        record (every read checks the CRC: a damaged message is never served)."""
        self.check_open()
        cl = self.commit_log
        if phy_offset < cl.min_offset or phy_offset >= cl.confirm_offset:
            return None
        return self._read_checked(phy_offset)

    def _read_checked(self, phy: int, own_unit: bool = True) -> MessageRecord:
        """The record at ``phy`` if its framing, PHYSICALOFFSET, CRC (body, or properties CRC under
        ``forceVerifyPropCRC``) and completeness (no zero-filled end) hold; else
        :class:`CorruptRecordError` with the segment path and the phy offset."""
        rec = self.commit_log.read_record(phy, check_crc=True, check_torn=True)
        if own_unit and rec.sys_flag & 0x4 == 0:  # NOT_TYPE and COMMIT records have a consume-queue unit
            self._check_own_unit(rec)
        return rec

    def _check_own_unit(self, rec: MessageRecord) -> None:
        """No checksum covers QUEUEID and QUEUEOFFSET: a record is refused when its queue offset is
        implausible (negative, or before the queue's first unit although the record lies after
        it), when the unit its queue holds at that offset is sound and points elsewhere (a damaged
        unit does not count against the record it locates), or, for a writer, is missing although
        the record was dispatched."""
        cq = self.consume_queues.get((rec.topic, rec.queue_id))
        u = cq.get_unit(rec.queue_offset) if cq is not None else None
        first = cq.get_unit(cq.min_offset) if cq is not None and rec.queue_offset < cq.min_offset else None
        if rec.queue_offset < 0:
            why = "which no queue has"
        elif first is not None and first[1] > 0 and rec.phy_offset >= first[0]:
            # older offsets lie before the queue's first unit in the commitlog, never after it
            why = f"but that queue begins at offset {cq.min_offset}, at {first[0]}, before this record"
        elif u is not None:
            if u[0] == rec.phy_offset and u[1] == rec.store_size:
                return
            if self._unit_sound(cq, rec.queue_offset) is None:  # the unit is the damaged one
                located = self._locate_unit_record(cq, rec.queue_offset)
                if located is not None and located.phy_offset == rec.phy_offset:
                    return
            why = f"but that unit points at {u[0]} (size {u[1]})"
        elif not self.read_only and self.reput is not None and \
                rec.phy_offset + rec.store_size <= self.reput.reput_from and \
                (cq is None or rec.queue_offset >= cq.max_offset) and rec.queue_offset >= (cq.min_offset if cq else 0):
            why = "but that queue has no such unit although the record was dispatched"
        elif self.read_only and cq is not None and rec.queue_offset >= cq.max_offset + \
                max(0, rec.phy_offset - max(cq.max_physic_offset, 0)) // M.MIN_RECORD_SIZE + 1:
            # a reader's queue view may lag the commitlog, but not by more records than fit between
            why = f"but that queue ends at {cq.max_offset}, too far back for this record to follow it"
        elif self.read_only and cq is None and self.closed_cleanly and \
                os.path.isdir(paths.consume_queue_dir(self.path)):
            # a cleanly closed store's records were all dispatched: the queue a record names exists
            # (not after a crash, nor while a writer is live: their newest records may have no unit yet)
            why = "but the store has no such queue"
        else:
            return
        mf = self.commit_log.queue.find(rec.phy_offset)
        raise CorruptRecordError(f"the record at {rec.phy_offset} says {rec.topic}/{rec.queue_id} offset "
                                 f"{rec.queue_offset} {why}", path=mf.path if mf else None, offset=rec.phy_offset)

    def _read_unit(self, cq: ConsumeQueue, q: int, phy: int, size: int) -> MessageRecord:
        """The record consume-queue unit ``q`` points at, if it is that unit's record (size, topic,
        queue id, queue offset) and passes :meth:`_read_checked`."""
        cl = self.commit_log
        if size <= 0 or phy + size > cl.confirm_offset:
            raise self._unit_error(cq, q, f"unit {q} points at [{phy}, {phy + size}), outside the commitlog data "
                                          f"[{cl.min_offset}, {cl.confirm_offset})")
        try:
            rec = cl.read_record(phy, check_crc=True, check_torn=True)  # (_read_checked without its own-unit check)
        except OffsetError as e:
            raise self._unit_error(cq, q, f"unit {q}: {e}") from e
        except CorruptRecordError as e:
            if self.record_starts_at(phy):
                raise  # the record is damaged
            raise self._unit_error(cq, q, f"unit {q} points at {phy}, where no record starts") from e
        if rec.store_size != size or rec.topic != cq.topic or rec.queue_id != cq.queue_id or rec.queue_offset != q:
            raise self._unit_error(cq, q, f"unit {q} of {cq.topic}/{cq.queue_id} points at a record of "
                                          f"{rec.topic}/{rec.queue_id} offset {rec.queue_offset} size {rec.store_size} "
                                          f"(unit size {size})")
        return rec

    def record_starts_at(self, phy: int) -> bool:
        """A record header (magic, and PHYSICALOFFSET equal to ``phy``) is at ``phy``."""
        mf = self.commit_log.queue.find(phy)
        if mf is None:
            return False
        pos = phy - mf.file_from_offset
        if pos + 36 > mf.file_size:
            return False
        magic = M.I32.unpack_from(mf.mm, pos + 4)[0]
        return magic in (M.MAGIC_V1, M.MAGIC_V2) and M.I64.unpack_from(mf.mm, pos + M.PHY_OFFSET_POS)[0] == phy

    @staticmethod
    def _unit_error(cq: ConsumeQueue, q: int, msg: str) -> UnitMismatchError:
        mf = cq.queue.find(q * CQF.UNIT_SIZE)
        if mf is None:
            return UnitMismatchError(f"consume queue: {msg}", path=cq.queue.directory, offset=q * CQF.UNIT_SIZE)
        return UnitMismatchError(f"consume queue: {msg}", path=mf.path, offset=q * CQF.UNIT_SIZE - mf.file_from_offset)

    def _unit_sound(self, cq: ConsumeQueue, q: int) -> tuple[int, int] | None:
        """``(phy, size)`` of unit ``q`` when it points at its own intact record, else None."""
        u = cq.get_unit(q)
        if u is None:
            return None
        rec = self.commit_log.read_pulled(u[0], u[1], cq.topic, cq.queue_id, q, self.commit_log.confirm_offset)
        return (u[0], u[1]) if rec is not None else None

    def _locate_unit_record(self, cq: ConsumeQueue, q: int) -> MessageRecord | None:
        """Beyond upstream: the record of queue offset ``q`` when its unit is damaged in place.
        A queue's records are written in queue order, so it lies after the record of the nearest
        sound unit before ``q`` and before that of the nearest sound unit after; that stretch of
        the commitlog is walked (bounded: :data:`LOCATE_UNITS` units either side,
        :data:`LOCATE_BYTES` of commitlog) for the intact record that names this queue and offset.
        A writer rewrites the unit (logged). None when there is no such record."""
        cl = self.commit_log
        lo = hi = None
        first, last = max(cq.min_offset, q - LOCATE_UNITS), min(cq.max_offset - 1, q + LOCATE_UNITS)
        for k in range(q - 1, first - 1, -1):
            u = self._unit_sound(cq, k)
            if u is not None:
                lo = u[0] + u[1]
                break
        else:
            lo = cl.min_offset if first == cq.min_offset else None  # no unit before to start from
        for k in range(q + 1, last + 1):
            u = self._unit_sound(cq, k)
            if u is not None:
                hi = u[0]
                break
        else:
            hi = cl.confirm_offset if last == cq.max_offset - 1 else None
        if lo is None or hi is None or not 0 <= hi - lo <= LOCATE_BYTES:
            return None
        found: list[int] = []

        def on_batch(mf, batch) -> None:
            hit = np.flatnonzero((batch.queue_id == cq.queue_id) & (batch.queue_offset == q))
            found.extend((mf.file_from_offset + int(batch.starts[i])) for i in hit.tolist())

        R.scan_log(cl.queue.files, max(lo, cl.min_offset), self.cfg, check_crc=False, limit_phy=hi, on_batch=on_batch)
        for phy in found:
            try:
                rec = cl.read_record(phy, check_crc=True, check_torn=True)
            except (CorruptRecordError, OffsetError):
                continue
            if rec.topic == cq.topic and rec.queue_id == cq.queue_id and rec.queue_offset == q:
                if not self.read_only:
                    with self.cq_lock:
                        if cq.repair_unit(q, rec.phy_offset, rec.store_size, rec.tags_code):
                            log.warning("%s: unit %d of %s/%d was damaged; its record at %d rewritten into it",
                                        self.path, q, cq.topic, cq.queue_id, rec.phy_offset)
                return rec
        return None

    def records_bytes(self, records: Sequence[MessageRecord]) -> bytes:
        """The stored bytes of ``records`` (read by this store), back to back: a pull's or a query's
        body as a broker sends it. :class:`OffsetError` when one is no longer inside written data."""
        self.check_open()
        cl = self.commit_log
        lo, hi = cl.min_offset, cl.confirm_offset
        find = cl.queue.find
        parts = []
        mf = None
        for rec in records:
            phy, size = rec.phy_offset, rec.store_size
            if mf is None or not (mf.file_from_offset <= phy and phy + size <= mf.file_from_offset + mf.file_size):
                mf = find(phy)
            if mf is None or phy < lo or phy + size > hi or phy + size > mf.file_from_offset + mf.file_size:
                raise OffsetError(f"no record of {size} bytes at commitlog offset {phy}", path=self.path, offset=phy)
            pos = phy - mf.file_from_offset
            parts.append(mf.mm[pos:pos + size])
        return b"".join(parts)

    def view_message_by_id(self, offset_msg_id: str) -> MessageRecord | None:
        """Decode an offsetMsgId and read the record it points to."""
        _, phy = decode_offset_msg_id(offset_msg_id)
        return self.look_message_by_offset(phy)

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_nums: int = 32,
                    subscription: str | None = None, *, transfer_limits: bool = True) -> GetMessageResult:
        """Pull up to ``max_nums`` messages from ``offset`` (``getMessage``, FORMAT.md §11.1).

        ``subscription`` is a tag expression (``"TagA || TagB"``, ``"*"``); units are matched by
        tag hash as upstream, then by the exact TAGS string (what the client would do), so hash
        collisions are never returned; ``filtered`` counts what the exact check dropped.
        ``transfer_limits=False`` (an in-process reader such as :meth:`consumer`) drops upstream's
        per-pull byte and count limits, sized for a network transfer (``maxTransfer*OnMessageIn*``:
        32 messages from memory, 8 from disk); ``max_nums`` and the 128 MiB pull cap still hold."""
        self.check_open()
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
        pull = _Pull(cq, max_o, offset, max_nums, parse_subscription(subscription), transfer_limits,
                     self.commit_log.confirm_offset, self.memory_limit_bytes())
        files_walked = 0
        while pull.total_bytes <= 0 and pull.next_begin < max_o and \
                files_walked < self.cfg.travel_cq_file_num_when_get_message:
            files_walked += 1
            if not self._pull_one_file(pull):
                break
        return GetMessageResult(pull.status, pull.next_begin, min_o, max_o, pull.messages, pull.filtered,
                                pull.skipped)

    def _pull_one_file(self, pull: "_Pull") -> bool:
        """The units of one consume-queue file from ``pull.next_begin``; False when the queue has no
        unit there (the pull then ends at the next file)."""
        cq, cl = pull.cq, self.commit_log
        # the units a pull may look at, converted in chunks: without a filter it usually stops
        # after max_nums of them (a broker's 32), not the 800 a filtered pull may walk
        max_filter = max(self.cfg.max_filter_message_size, pull.max_nums * 20)
        limit = max_filter // 20 + 1
        first = limit if pull.sub is not None else min(limit, pull.max_nums + 8)
        units = cq.iterate_from(pull.next_begin, first)
        if units is None:
            pull.status = GetMessageStatus.OFFSET_FOUND_NULL
            pull.next_begin = cq.roll_next_file(pull.next_begin)
            return False
        q = pull.next_begin
        next_phy_file_start = None
        for phy, size, tags_code in _units_of_one_file(cq, pull.next_begin, units, first, limit):
            if pull.next_begin >= pull.max_offset or (q - pull.offset) * 20 >= max_filter or \
                    self._pull_is_full(pull, phy, size):
                break
            pull.next_begin = q = q + 1
            if next_phy_file_start is not None and phy < next_phy_file_start:
                continue
            if pull.sub is not None and _tags_code_int32(tags_code) not in pull.sub[1]:
                if pull.total_bytes == 0:
                    pull.status = GetMessageStatus.NO_MATCHED_MESSAGE
                continue
            if phy < cl.min_offset:
                if pull.total_bytes == 0:
                    pull.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = cl.roll_next_file(phy)
                continue
            rec = self._pulled_record(pull, q - 1, phy, size)
            if rec is None:
                continue
            if pull.sub is not None and rec.tags not in pull.sub[0]:
                pull.filtered += 1
                continue
            pull.messages.append(rec)
            pull.total_bytes += rec.store_size
            pull.status = GetMessageStatus.FOUND
            next_phy_file_start = None
        return True

    def _pull_is_full(self, pull: "_Pull", phy: int, size: int) -> bool:
        """Whether the record at ``phy`` of ``size`` bytes would pass the pull's limits (count, 128
        MiB, and with ``transfer_limits`` upstream's in-memory or on-disk transfer limits)."""
        count, total = len(pull.messages), pull.total_bytes
        cfg = self.cfg
        if total and count:
            if count + 1 > pull.max_nums or total + size > MAX_PULL_SIZE:
                return True
            if pull.transfer_limits:
                if (pull.max_phy - phy) <= pull.in_mem_limit:
                    if total + size > cfg.max_transfer_bytes_on_message_in_memory or \
                            count > cfg.max_transfer_count_on_message_in_memory - 1:
                        return True
                elif total + size > cfg.max_transfer_bytes_on_message_in_disk or \
                        count > cfg.max_transfer_count_on_message_in_disk - 1:
                    return True
        return total >= MAX_PULL_SIZE

    def _pulled_record(self, pull: "_Pull", q: int, phy: int, size: int) -> MessageRecord | None:
        """The record unit ``q`` points at, or None when it cannot be served (damaged: skipped and
        noted in ``pull.skipped``; a damaged unit whose record is found elsewhere serves that)."""
        cq = pull.cq
        rec = self.commit_log.read_pulled(phy, size, cq.topic, cq.queue_id, q, pull.max_phy)
        if rec is not None:
            return rec
        try:  # not the usual intact record: the careful path says what it is
            return self._read_unit(cq, q, phy, size)
        except CorruptRecordError as e:  # never served, never a stuck reader: step over it
            rec = self._locate_unit_record(cq, q) if isinstance(e, UnitMismatchError) else None
            if rec is None:
                pull.skipped.append(SkippedMessage(q, phy, e.path, e.offset, str(e)))
                log.error("%s: pull %s/%d skipped queue offset %d: %s", self.path, cq.topic, cq.queue_id, q, e)
            return rec

    def consumer(self, group: str, topics: str | Iterable[str], subscription: str | None = None, *,
                 auto_commit: bool = False, start: str | int = EARLIEST, offsets=None) -> Consumer:
        """A member of consumer group ``group`` reading every queue of ``topics`` (see
        :mod:`rmqstore.consumer`): ``poll``, ``commit``, ``committed``, ``lag``, ``seek``,
        ``seek_to_time``, ``close``. ``start`` is where a queue without a committed offset begins
        (``"earliest"``, ``"latest"`` or an epoch-ms timestamp); ``offsets`` a JSON file (or a
        :class:`ConsumerOffsetManager`) to keep the group's offsets elsewhere than the store's
        ``config/consumerOffset.json`` (needed to commit on a read-only store)."""
        self.check_open()
        return Consumer(self, group, topics, subscription, auto_commit=auto_commit, start=start, offsets=offsets)

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
        self.check_open()
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
        self.check_open()
        return self._query_exact(topic, uniq_key, self.cfg.default_query_max_num, begin_ms, end_ms, uniq_only=True)
