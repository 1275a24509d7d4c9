"""The commitlog cursor: the one way every reader follows records through a segment.

Dispatch (the background reput and the dispatch of a rebuild), recovery, verify and the Spark scan
all walk a commitlog segment the same way, through this module:

* :func:`walk_starts` follows TOTALSIZE from a position; given hints (positions where records
  probably start, as the consume queues know them), it takes each run of hints that the walk would
  visit anyway in one numpy pass, with the same answer as without them.
* :func:`read_batch` follows TOTALSIZE from a position while the headers look like records, decodes
  the records it passed as one numpy :class:`~rmqstore.format.message.RecordBatch`, keeps the ones
  whose framing holds (magic, length formula and, when the caller knows the segment's base offset,
  ``PHYSICALOFFSET`` equal to the record's own offset) and says why it stopped: a :class:`Halt`
  holding a typed :class:`Stop`, the position, and for a broken record what is wrong with it.
* :func:`is_record_at` / :func:`find_record_start` are the resynchronisation rule, in one place: after
  bad bytes, the next record is the first position with the V1/V2 magic, a ``PHYSICALOFFSET`` equal to
  its own offset and an intact length formula.
* :func:`complete` and :func:`crc_ok` are the per-record checks beyond the framing: a record torn by a
  crash keeps its header but ends in zeros; its body CRC (or, under ``forceVerifyPropCRC``, the
  ``__CRC32#`` property) must hold.

Positions are relative to the buffer (a segment's mapping); ``base`` is the commitlog offset of the
buffer's first byte. Nothing here holds per-record Python objects: a batch is a handful of arrays.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import numpy as np

from . import message as M
from . import properties as P
from .arrays import rows_at
from .hashes import crc32

#: records walked per batch unless the caller says otherwise
BATCH_RECORDS = 8192

_TOTAL_MAGIC = struct.Struct(">ii")
_I64 = struct.Struct(">q")
#: the 4 magic bytes a record (V1, V2) or the blank end record starts its second int with
RECORD_MAGIC_BYTES = (struct.pack(">i", M.MAGIC_V1), struct.pack(">i", M.MAGIC_V2))
BLANK_MAGIC_BYTES = struct.pack(">i", M.BLANK_MAGIC)


class Stop(enum.StrEnum):
    """What a walk found where it stopped (or, for :func:`kind_at`, what starts at a position).

    The values are the words the stores' reports and the Spark summaries have always used, so a
    ``Stop`` compares equal to them and travels through JSON as them."""

    RECORD = "record"            #: a record header (the walk goes on)
    END = "end"                  #: a zero header: nothing was written from here
    BLANK = "blank"              #: the BLANK record that closes a segment
    LIMIT = "limit"              #: the caller's bound; or the next record would end past it
    FULL = "full"                #: the batch holds ``max_records``: more may follow from ``Halt.pos``
    INVALID = "invalid"          #: broken framing: bad magic or size, length formula, PHYSICALOFFSET
    CORRUPT = "crc"              #: framing intact, but the CRC or the completeness check fails
    TORN = "torn"                #: a header whose record runs past the end of the segment
    SEGMENT_END = "segment_end"  #: the position is the end of the segment


@dataclass(frozen=True)
class Halt:
    """Where and why a walk stopped: ``pos`` relative to the buffer; ``reason`` says what is wrong
    for :attr:`Stop.INVALID` (empty otherwise)."""

    stop: Stop
    pos: int
    reason: str = ""


@dataclass(frozen=True)
class Step:
    """One batch of a walk: the records whose framing holds, in order, then the halt."""

    batch: M.RecordBatch
    halt: Halt

    @property
    def end(self) -> int | None:
        """Position after the batch's last record (None for an empty batch)."""
        b = self.batch
        return int(b.starts[-1] + b.total[-1]) if len(b) else None


def walk_starts(buf, pos: int, end: int, max_records: int = BATCH_RECORDS,
                hints: np.ndarray | None = None) -> tuple[np.ndarray, Halt]:
    """Record starts from ``pos`` by TOTALSIZE (headers only, nothing decoded) and the halt.

    The framing is only sketched here (magic and a size that fits); :func:`read_batch` checks it.
    ``hints`` (sorted positions where records probably start, e.g. from consume-queue units) make
    the walk vectorised where they chain; the answer is the same with or without them
    (:func:`_hinted_walk`)."""
    if hints is None:
        starts, stop, stop_pos = M.walk_records(buf, pos, end, max_records)
    else:
        starts, stop, stop_pos = _hinted_walk(buf, pos, end, max_records, hints)
    kind = Stop(stop)
    if kind is Stop.LIMIT and starts.size == max_records:
        kind = Stop.FULL
    return starts, Halt(kind, stop_pos)


#: records walked one by one after the hints stopped chaining, before they are tried again (doubled
#: at each further miss, up to the most)
_PLAIN_RUN, _PLAIN_RUN_MOST = 16, 1 << 14
#: hints tried at once (doubled while whole windows chain): work stays in proportion to the chain found
_HINT_WINDOW, _HINT_WINDOW_MOST = 256, 1 << 16


def _hinted_walk(buf, pos: int, end: int, max_records: int, hints: np.ndarray) -> tuple[np.ndarray, str, int]:
    """:func:`.message.walk_records` with ``hints``. The walk from ``pos`` visits ``pos``, then
    ``pos + TOTALSIZE``, and so on; where the hints from ``pos`` on are exactly that chain (each
    header accepted by the walk's own test and ending where the next hint starts), they are the
    walk's records, found in one numpy pass. Where they stop chaining, the plain walk goes on
    from the last record proven, and the hints are tried again after it."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    parts: list[np.ndarray] = []
    n, run, window = 0, _PLAIN_RUN, _HINT_WINDOW
    while True:
        chain = _hint_chain(u8, pos, end, min(window, max_records - n), hints)
        if chain.size:
            parts.append(chain)
            n += chain.size
            last = int(chain[-1])
            pos = last + _TOTAL_MAGIC.unpack_from(buf, last)[0]
            if n == max_records:
                stop = "limit"
                break
            if chain.size == window:  # (the whole window chained: take a bigger one)
                window = min(window * 2, _HINT_WINDOW_MOST)
                continue
        window = _HINT_WINDOW
        want = min(run, max_records - n)
        more, stop, pos = M.walk_records(buf, pos, end, want)
        if more.size:
            parts.append(more)
            n += more.size
        if more.size < want or n == max_records:
            break  # (the walk's own stop, or the count reached)
        run = min(run * 2, _PLAIN_RUN_MOST) if not chain.size else _PLAIN_RUN
    starts = np.concatenate(parts) if len(parts) > 1 else (parts[0] if parts else np.zeros(0, dtype=np.int64))
    return starts.astype(np.int64, copy=False), stop, pos


def _hint_chain(u8: np.ndarray, pos: int, end: int, most: int, hints: np.ndarray) -> np.ndarray:
    """The longest run of ``hints`` from ``pos`` (at most ``most``) that the walk from ``pos``
    visits record by record: each header readable before ``end``, with the V1/V2 magic and a
    TOTALSIZE from the minimum up to ``end``, and each record but the last ending at the next
    hint. Empty when ``pos`` is not a hint."""
    i = int(np.searchsorted(hints, pos))
    cand = hints[i:i + most]
    if not cand.size or int(cand[0]) != pos:
        return cand[:0]
    cand = cand[:int(np.searchsorted(cand, end - 8, side="right"))]  # (headers readable: p + 8 <= end)
    if not cand.size:
        return cand
    head = rows_at(u8, cand, 8).view(">i4")
    total, magic = head[:, 0].astype(np.int64), head[:, 1]
    ok = ((magic == M.MAGIC_V1) | (magic == M.MAGIC_V2)) & (total >= M.MIN_RECORD_SIZE) & (total <= end - cand)
    chained = np.append(cand[:-1] + total[:-1] == cand[1:], True)
    m = int(np.argmin(ok)) if not ok.all() else cand.size          # the first header the walk refuses
    brk = int(np.argmin(chained)) + 1 if not chained.all() else cand.size  # after the first break
    return cand[:min(m, brk)]


def read_batch(buf, u8: np.ndarray, pos: int, end: int, max_records: int = BATCH_RECORDS, *,
               base: int | None = None) -> Step:
    """Walk and decode up to ``max_records`` records in ``[pos, end)``: the records whose framing
    holds, and where and why the walk stopped. With ``base`` (the buffer's commitlog offset) a
    record must also hold its own offset in PHYSICALOFFSET; the first one that does not, or whose
    length formula fails, halts the walk with :attr:`Stop.INVALID` at its position."""
    starts, halt = walk_starts(buf, pos, end, max_records)
    return check_framing(buf, u8, M.decode_batch(u8, starts), halt, base)


def check_framing(buf, u8: np.ndarray, batch: M.RecordBatch, halt: Halt, base: int | None) -> Step:
    """:func:`read_batch` for records already walked (their starts handed over by a writer)."""
    ok = batch.valid if base is None else batch.valid & (batch.phy_offset == base + batch.starts)
    k = len(batch) if bool(ok.all()) else int(np.argmin(ok))
    if k == len(batch):
        return Step(batch, halt)
    bad = int(batch.starts[k])
    if batch.valid[k]:
        reason = f"record at {(base or 0) + bad} says PHYSICALOFFSET {int(batch.phy_offset[k])}"
    else:
        reason = f"invalid record: {M.check_record(buf, bad, u8.size, check_crc=False)[2]}"
    return Step(batch.take(k), Halt(Stop.INVALID, bad, reason))


def walk(buf, u8: np.ndarray, pos: int, end: int, max_records: int = BATCH_RECORDS, *, base: int | None = None):
    """:func:`read_batch` again and again from where the last batch ended, while batches are full;
    yields every :class:`Step` (the last one's halt is not :attr:`Stop.FULL`)."""
    while True:
        step = read_batch(buf, u8, pos, end, max_records, base=base)
        yield step
        if step.halt.stop is not Stop.FULL:
            return
        pos = step.halt.pos


# ------------------------------------------------------------------------------------------------
# What is at a position; the resynchronisation rule
# ------------------------------------------------------------------------------------------------

def kind_at(buf, size: int, p: int) -> Stop:
    """What a walk finds at ``p`` of a segment of ``size`` bytes: a record header, a blank, the zero
    end of data, a record that runs past the segment end, the segment end, or junk."""
    if p >= size:
        return Stop.SEGMENT_END
    if size - p < 8:
        return Stop.TORN
    total, magic = _TOTAL_MAGIC.unpack_from(buf, p)
    if magic == M.BLANK_MAGIC:
        return Stop.BLANK
    if total == 0 and magic == 0:
        return Stop.END
    if magic == M.MAGIC_V1 or magic == M.MAGIC_V2:
        return Stop.RECORD if total >= M.MIN_RECORD_SIZE and p + total <= size else Stop.TORN
    return Stop.INVALID


def is_record_at(buf, u8: np.ndarray, size: int, base: int, p: int) -> bool:
    """The resynchronisation rule: a record starts at ``p`` when it has the V1/V2 magic, a TOTALSIZE
    inside the segment, PHYSICALOFFSET equal to ``base + p`` and its length formula holds."""
    if p < 0 or p + M.HEAD_SIZE > size:
        return False
    total, magic = _TOTAL_MAGIC.unpack_from(buf, p)
    if magic != M.MAGIC_V1 and magic != M.MAGIC_V2:
        return False
    if total < M.MIN_RECORD_SIZE or p + total > size:
        return False
    if _I64.unpack_from(buf, p + M.PHY_OFFSET_POS)[0] != base + p:
        return False
    return bool(M.decode_batch(u8, np.array([p], dtype=np.int64)).valid[0])


def is_blank_at(buf, size: int, p: int) -> bool:
    """An end-of-segment BLANK record whose length reaches exactly to the segment end starts at ``p``."""
    if p < 0 or p + 8 > size:
        return False
    total, magic = _TOTAL_MAGIC.unpack_from(buf, p)
    return magic == M.BLANK_MAGIC and total == size - p


def skip_zeros(u8: np.ndarray, lo: int, stop: int) -> int:
    """First position in ``[lo, stop)`` of a non-zero byte, else ``stop`` (numpy over growing chunks:
    the zero-filled end of a preallocated segment is passed at memory speed)."""
    step = 1 << 12
    while lo < stop:
        hi = min(stop, lo + step)
        chunk = u8[lo:hi]
        if chunk.any():
            return lo + int(np.argmax(chunk != 0))
        lo = hi
        step = min(step * 2, 1 << 24)
    return stop


def magic_candidates(buf, lo: int, hi: int, patterns=RECORD_MAGIC_BYTES, most: int | None = None) -> list[int]:
    """Sorted record starts ``c - 4`` for every ``c`` in ``[lo, hi)`` where one of ``patterns`` (4
    bytes: the magic, the record's second int) lies wholly inside ``[lo, hi)``; at most ``most``
    per pattern."""
    cands: list[int] = []
    for pat in patterns:
        c = buf.find(pat, lo, hi)
        found = 0
        while c >= 0 and (most is None or found < most):
            cands.append(c - 4)
            found += 1
            c = buf.find(pat, c + 1, hi)
    return sorted(set(cands))


def find_record_start(buf, u8: np.ndarray, size: int, base: int, pos: int, limit: int) -> int | None:
    """The first ``p`` in ``[pos, limit)`` where :func:`is_record_at` holds, or None. Searched window
    by window (a magic that never occurs costs one window, and windows grow), zero runs skipped
    with numpy (a magic starts with a non-zero byte)."""
    limit = min(limit, size)
    if pos >= limit:
        return None
    if is_record_at(buf, u8, size, base, pos):
        return pos
    stop = min(limit + 8, size)
    window = 1 << 16
    lo = pos + 5  # the magic of a record at p > pos lies at p + 4
    while lo < stop:
        lo = skip_zeros(u8, lo, stop)
        hi = min(stop, lo + window + 3)
        for p in magic_candidates(buf, lo, hi):
            if p >= limit:
                return None
            if is_record_at(buf, u8, size, base, p):
                return p
        if hi >= stop:
            return None
        lo = hi - 3  # a magic straddling the window edge is found by the next window
        window = min(window * 2, 1 << 22)
    return None


# ------------------------------------------------------------------------------------------------
# Checks beyond the framing
# ------------------------------------------------------------------------------------------------

def complete(u8: np.ndarray, batch: M.RecordBatch) -> np.ndarray:
    """Per record: its last TOPIC byte and last PROPERTIES byte (writers end properties with 0x02)
    are not zero. A write torn by a crash keeps the header but leaves zeros at the end, which the
    body CRC does not see when the tear falls after the body."""
    tl, pl = batch.topic_len, batch.props_len
    last_t = u8[np.where(tl > 0, batch.topic_pos + tl - 1, 0)]
    last_p = u8[np.where(pl > 0, batch.props_pos + pl - 1, 0)]
    return ((tl <= 0) | (last_t != 0)) & ((pl <= 0) | (last_p != 0))


def prop_crc_ok(buf, batch: M.RecordBatch) -> np.ndarray:
    """Per record: the ``__CRC32#`` property equals the CRC-32 of the record but its last 20 bytes
    (``forceVerifyPropCRC``); False when the entry is missing."""
    out = np.zeros(len(batch), dtype=bool)
    mv = memoryview(buf)
    for i, (s, pp, pl, tot) in enumerate(zip(batch.starts.tolist(), batch.props_pos.tolist(),
                                             batch.props_len.tolist(), batch.total.tolist())):
        value = P.parse_properties(mv[pp:pp + pl]).get(P.CRC32_KEY) if pl > 0 else None
        want = P.parse_crc_digits(value) if value is not None else None
        out[i] = want is not None and want == crc32(mv[s:s + tot - P.CRC32_RESERVED_LEN])
    return out


def crc_ok(buf, batch: M.RecordBatch, prop_crc: bool = False) -> np.ndarray:
    """Per record: the body CRC holds (records without a body pass), or with ``prop_crc`` the
    ``__CRC32#`` property does."""
    return prop_crc_ok(buf, batch) if prop_crc else M.body_crc_ok(buf, batch)


def intact(buf, u8: np.ndarray, batch: M.RecordBatch, prop_crc: bool = False) -> np.ndarray:
    """Per record: :func:`complete` and :func:`crc_ok` (the CRC computed for complete records only)."""
    whole = complete(u8, batch)
    if whole.all():
        return crc_ok(buf, batch, prop_crc)
    out = whole.copy()
    idx = np.flatnonzero(whole)
    if idx.size:
        out[idx] = crc_ok(buf, batch.select(idx), prop_crc)
    return out
