"""The safe end of a live store: how far a streaming reader may read a commitlog that another
process may be appending to right now (every record before it completely written), and how far
``maxOffsetsPerTrigger`` records reach. Headers only, through the commitlog cursor
(:mod:`rmqstore.format.cursor`) and :mod:`.scan`'s segments; driver side, nothing imports pyspark."""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import numpy as np

from ..format import cursor as C
from ..format import message as M
from ..format.hashes import crc32
from .scan import BLANK, RECORD, Segment
from .spans import list_segments

_TOTAL = struct.Struct(">i")

# ------------------------------------------------------------------------------------------------
# The safe end of a live store (streaming)
# ------------------------------------------------------------------------------------------------

#: A tail record (nothing written after it yet) is admitted once it has been seen unchanged for this long.
TAIL_SETTLE_SECONDS = 0.05


@dataclass
class TailState:
    """What the stream reader saw at the end of the live segment last time (driver memory)."""

    prop_crc: bool = False        # the tail record's check: the __CRC32# property (forceVerifyPropCRC)
    seg: int = -1
    walked_to: int = -1           # a record boundary (absolute) known complete
    tail_pos: int = -1            # start of the unconfirmed tail record
    tail_digest: int = -1
    tail_seen: float = 0.0


def _sealed(store_dir: str, segments: list[int], i: int, seg_size: int) -> bool:
    """Segment ``i`` is complete when the next segment already holds its first record (the store
    only writes there after the blank that closes segment ``i``)."""
    if i + 1 >= len(segments):
        return False
    with Segment(store_dir, segments[i + 1], seg_size) as nxt:
        return nxt.is_record_at(0)


def _walk_live(seg: Segment, p: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Record starts and sizes from ``p`` while the framing holds, and why the walk stopped."""
    starts_all, totals_all = [], []
    for step in C.walk(seg.mm, seg.u8, p, seg.size, 65536):
        starts_all.append(step.batch.starts)
        totals_all.append(step.batch.total)
    return np.concatenate(starts_all), np.concatenate(totals_all), step.halt.stop


def end_after_records(store_dir: str, seg_size: int, start: int, end: int, n: int) -> int:
    """The offset after the first ``n`` records that start in ``[start, end)`` (``end`` when there are
    fewer): a micro-batch of at most ``n`` messages (``maxOffsetsPerTrigger``). Headers only."""
    count = 0
    cur = start
    for seg0 in list_segments(store_dir, seg_size):
        if seg0 + seg_size <= cur:
            continue
        if seg0 >= end:
            break
        with Segment(store_dir, seg0, seg_size) as seg:
            p = seg.find_record_start(max(cur, seg0) - seg0, min(end - seg0, seg_size))
            while p is not None and p < end - seg0:
                starts, _ = C.walk_starts(seg.mm, p, seg.size, 65536)
                starts = starts[:int(np.searchsorted(starts, end - seg0))]
                if not starts.size:
                    break
                if count + starts.size > n:
                    return seg0 + int(starts[n - count])
                count += int(starts.size)
                last = int(starts[-1])
                p = last + _TOTAL.unpack_from(seg.mm, last)[0]
                if seg.kind_at(p) != RECORD:
                    break
        cur = seg0 + seg_size
    return end


def safe_end(store_dir: str, seg_size: int, start: int, max_bytes: int | None, state: TailState,
             now: float | None = None) -> int:
    """An offset ``end >= start`` such that every record starting in ``[start, end)`` is completely
    written, for a store that another process may be appending to right now.

    A segment whose successor already holds a record is complete, and so is every record of the
    live segment that is followed by another record header or a blank. The last record (nothing
    after it yet) is admitted once its CRC holds and its bytes stayed the same for
    :data:`TAIL_SETTLE_SECONDS` between two calls, which covers writers that copy a record in more
    than one piece. ``max_bytes`` caps ``end - start``. Only headers (and the one tail record) are
    read; ``state`` remembers how far the live segment was walked."""
    now = time.monotonic() if now is None else now
    segments = list_segments(store_dir, seg_size)
    if not segments:
        return start
    cap = None if max_bytes is None else start + max(1, max_bytes)
    cur = max(start, segments[0])
    i = (cur - segments[0]) // seg_size
    while i < len(segments):
        if cap is not None and cur >= cap:
            return cap
        seg0 = segments[i]
        if _sealed(store_dir, segments, i, seg_size):
            cur = seg0 + seg_size
            i += 1
            continue
        with Segment(store_dir, seg0, seg_size) as seg:
            if state.seg == seg0 and state.walked_to >= cur:
                p = state.walked_to - seg0
            else:
                p = 0 if cur == seg0 else seg.find_record_start(cur - seg0, seg_size)
                if p is None:
                    return cur
                state.seg, state.walked_to = seg0, seg0 + p
            starts, totals, why = _walk_live(seg, p)
            if why == BLANK:  # the writer moved on to the next segment
                state.walked_to = seg0 + seg_size
                cur = seg0 + seg_size
                i += 1
                continue
            end_rel = p
            if starts.size:
                last, last_total = int(starts[-1]), int(totals[-1])
                end_rel = last
                state.walked_to = seg0 + last
                digest = crc32(memoryview(seg.mm)[last:last + last_total])
                same = state.tail_pos == seg0 + last and state.tail_digest == digest
                if same and now - state.tail_seen >= TAIL_SETTLE_SECONDS:
                    tb = M.decode_batch(seg.u8, np.array([last], dtype=np.int64))
                    if bool(C.intact(seg.mm, seg.u8, tb, state.prop_crc)[0]):
                        end_rel = last + last_total
                        state.walked_to = seg0 + end_rel
                        state.tail_pos = -1
                elif not same:
                    state.tail_pos, state.tail_digest, state.tail_seen = seg0 + last, digest, now
            end = max(cur, seg0 + end_rel)
            return end if cap is None else min(end, cap)
    return cur if cap is None else min(cur, cap)
