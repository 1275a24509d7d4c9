"""The walk over the commitlog's records that recovery, :mod:`..verify`, read-only refresh and the
Spark verify share (:func:`scan_log`): magic, size and CRC checks per record, a stop at blank, end
or invalid data, and resynchronisation past bad bytes (MAGIC + PHYSICALOFFSET,
:func:`.records.find_resync`).

The record walk proper is :func:`walk_log` with its two stop helpers (:func:`_handle_stop`,
:func:`_resync_or_end`), over the commitlog cursor (:mod:`rmqstore.format.cursor`): the cursor walks
and frames a segment's records and says why it halted; this module adds the CRC and completeness
checks, the move to the next segment, and the resynchronisation across segments.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...format import cursor as C
from ...format import message as M
from .records import find_resync
from .report import CorruptSpan

log = logging.getLogger(__name__)

#: Records decoded per numpy batch while scanning.
SCAN_BATCH = 65536


@dataclass
class ScanResult:
    end: int                       # E: end of valid data
    last_valid: int                # start of the last valid record (-1 if none)
    records: int                   # valid records seen
    reason: str                    # why the scan stopped at E
    corrupt: list[CorruptSpan] = field(default_factory=list)
    max_store_timestamp: int = 0
    bytes_scanned: int = 0



@dataclass(frozen=True)
class ScanOptions:
    """How :func:`scan_log` walks (see there for each)."""

    check_crc: bool = True
    limit_phy: int | None = None
    on_batch: Callable | None = None
    dispatchable: bool = False
    progress: Callable[[int], None] | None = None
    on_corrupt: Callable[[CorruptSpan], None] | None = None
    hints: Callable | None = None


def scan_log(files, start_phy: int, cfg, **options) -> ScanResult:
    """Walk the commitlog segments ``files`` from ``start_phy``; ``options`` are those of
    :class:`ScanOptions` (``check_crc``, ``limit_phy``, ``on_batch``, ``dispatchable``,
    ``progress``, ``on_corrupt``).

    Valid records are handed to ``on_batch(mf, batch)`` in order (numpy batches, no per-record
    objects). Bad bytes followed by an intact record are recorded as a :class:`CorruptSpan` and
    skipped; bad bytes with nothing valid after them end the scan. ``limit_phy`` bounds the scan
    (records must end at or before it). With ``dispatchable`` the batches also include records
    whose framing is intact but whose CRC or completeness check fails (what upstream's reput
    dispatches: their consume-queue units keep queue offsets aligned; reads refuse them).
    ``hints(mf)`` gives sorted positions in segment ``mf`` where records probably start (or
    None): the walk is vectorised where they chain, with the same answer
    (:func:`rmqstore.format.cursor.walk_starts`).
    """
    return walk_log(files, start_phy, cfg, ScanOptions(**options))


@dataclass
class _Walk:
    """What the stop helpers of one walk share."""

    res: ScanResult
    files: list
    cfg: object
    check_crc: bool
    limit_phy: int


def _start_position(files, start_phy: int, res: ScanResult) -> tuple[int, int] | None:
    """(segment index, position) where the walk starts; None (``res`` says where data ends) when
    no segment holds ``start_phy``."""
    if not files:
        res.end = 0
        return None
    first = files[0].file_from_offset
    size = files[0].file_size
    i = (start_phy - first) // size
    if i < 0:
        i, start_phy = 0, first
    if i >= len(files):
        res.end = start_phy
        res.reason = "no segment holds the start offset"
        return None
    return i, start_phy - files[i].file_from_offset


def walk_log(files, start_phy: int, cfg, opts: ScanOptions) -> ScanResult:
    """The record walk of :func:`scan_log` (one batch of up to :data:`SCAN_BATCH` records a turn)."""
    res = ScanResult(end=start_phy, last_valid=-1, records=0, reason="end of data")
    if opts.on_corrupt is not None:
        res.corrupt = _NotifyingList(opts.on_corrupt)
    at = _start_position(files, start_phy, res)
    if at is None:
        return res
    i, pos = at
    limit_phy = (1 << 62) if opts.limit_phy is None else opts.limit_phy
    walk = _Walk(res, files, cfg, opts.check_crc, limit_phy)
    while True:
        mf = files[i]
        base = mf.file_from_offset
        seg_limit = min(mf.file_size, limit_phy - base)
        if pos >= seg_limit:
            res.end = base + pos
            if seg_limit < mf.file_size:
                res.reason = "limit"
                return res
            # exactly at a segment end (full segment without blank): go on with the next one
            if i + 1 < len(files):
                i, pos = i + 1, 0
                continue
            res.reason = "end of the last segment"
            return res
        starts, halt = C.walk_starts(mf.mm, pos, seg_limit, SCAN_BATCH,
                                     hints=opts.hints(mf) if opts.hints is not None else None)
        walked = M.decode_batch(mf.u8, starts)
        batch = C.check_framing(mf.mm, mf.u8, walked, halt, base).batch  # framing and PHYSICALOFFSET hold
        n_frame = len(batch)
        ok = C.complete(mf.u8, batch)  # (framing and PHYSICALOFFSET were checked by the cursor)
        crc = C.crc_ok(mf.mm, batch, cfg.force_verify_prop_crc) if opts.check_crc and n_frame else \
            np.ones(n_frame, dtype=bool)
        good = ok & crc
        n_out = n_frame if opts.dispatchable or good.all() else int(np.argmin(good))
        if n_out:
            _count_records(res, mf, batch, good[:n_out])
            if opts.on_batch is not None:
                opts.on_batch(mf, batch.take(n_out) if n_out < n_frame else batch)
            pos = int(starts[n_out - 1] + batch.total[n_out - 1])
        if opts.progress is not None:
            opts.progress(base + pos)
        if n_out < len(starts):
            bad = int(starts[n_out])
            framed = n_out < n_frame
            kind, reason = _why_bad(walked, n_out, framed, bool(crc[n_out]) if framed else True, base + bad)
            nxt = _resync_or_end(walk, i, bad, kind, reason)
            if nxt is None:
                return res
            i, pos = nxt
            continue
        if halt.stop is C.Stop.FULL:
            continue
        nxt = _handle_stop(walk, i, pos, halt, seg_limit)
        if nxt is None:
            return res
        i, pos = nxt


def _count_records(res: ScanResult, mf, batch: M.RecordBatch, g: np.ndarray) -> None:
    """Account for the first ``g.size`` records of a batch handed on (``g``: which are valid)."""
    base = mf.file_from_offset
    starts = batch.starts
    n_good = int(g.sum())
    if n_good:
        res.records += n_good
        gi = np.flatnonzero(g)
        res.last_valid = base + int(starts[gi[-1]])
        res.max_store_timestamp = max(res.max_store_timestamp, int(batch.store_timestamp[gi].max()))
    if n_good < g.size:  # dispatchable mode: framing intact, CRC or completeness failed
        for j in np.flatnonzero(~g).tolist():
            p = base + int(starts[j])
            res.corrupt.append(CorruptSpan(mf.path, p, int(batch.total[j]), "record_crc",
                                           f"record at {p} fails its CRC or completeness check"))


def _why_bad(batch: M.RecordBatch, n: int, framing: bool, crc: bool, phy: int) -> tuple[str, str]:
    """(kind, reason) of the bad record ``n`` of a batch, at commitlog offset ``phy``."""
    if framing and not crc:
        return "record_crc", f"CRC mismatch in the record at {phy}"
    if framing:
        return "record_crc", f"record at {phy} is incomplete (its end is zero-filled)"
    if batch.valid[n]:
        return "record_invalid", f"record at {phy} says PHYSICALOFFSET {int(batch.phy_offset[n])}"
    return "record_invalid", f"invalid record at {phy}"


class _NotifyingList(list):
    def __init__(self, callback):
        super().__init__()
        self._callback = callback

    def append(self, item) -> None:
        super().append(item)
        self._callback(item)


def _handle_stop(walk: _Walk, i: int, pos: int, halt: C.Halt, seg_limit: int) -> tuple[int, int] | None:
    """What to do where the cursor's walk halted (``halt``) after the last valid record (at ``pos``)."""
    res, files, cfg, check_crc, limit_phy = walk.res, walk.files, walk.cfg, walk.check_crc, walk.limit_phy
    stop, stop_pos = halt.stop, halt.pos
    mf = files[i]
    if stop is C.Stop.BLANK:
        if i + 1 < len(files):
            return i + 1, 0
        # the last segment is full: data ends at its end (the next append opens a new segment)
        res.end = mf.file_from_offset + mf.file_size
        res.reason = "end of data (last segment full)"
        return None
    if stop is C.Stop.END:
        # zeros where a record would start: the end of the data in the last segment (a batch whose
        # first header was never published ends there too: whole or not at all); before the last
        # segment, intact records after them make them damage (a zeroed range, or a segment missing
        # or short in the middle), skipped
        nxt = find_resync(files, i, pos, cfg, check_crc=check_crc) if i + 1 < len(files) else None
        if nxt is not None and (limit_phy is None or files[nxt[0]].file_from_offset + nxt[1] <= limit_phy):
            what = f"segment {mf.stand_in}" if getattr(mf, "stand_in", "") else "zeros where a record should start"
            return _resync_or_end(walk, i, pos, "record_invalid", f"{what} at {mf.file_from_offset + pos}")
        res.end = mf.file_from_offset + pos
        res.reason = "end of data"
        return None
    if stop is C.Stop.LIMIT and seg_limit < mf.file_size and seg_limit - pos < 8:
        res.end = mf.file_from_offset + pos
        res.reason = "limit"
        return None
    # (a record running past ``limit_phy`` is bad: callers pass limits at record boundaries)
    if stop is C.Stop.LIMIT and mf.file_size - pos < 8:
        if i + 1 < len(files):
            return i + 1, 0
        res.end = mf.file_from_offset + pos
        res.reason = "end of the last segment"
        return None
    # "invalid" header, or a record running past the segment end
    bad = stop_pos if stop is C.Stop.INVALID else pos
    reason = (f"invalid record header at {mf.file_from_offset + bad}" if stop is C.Stop.INVALID
              else f"record at {mf.file_from_offset + bad} runs past the end of its segment")
    return _resync_or_end(walk, i, bad, "record_invalid", reason)


def _resync_or_end(walk: _Walk, i: int, bad: int, kind: str, reason: str) -> tuple[int, int] | None:
    res, files, cfg, check_crc, limit_phy = walk.res, walk.files, walk.cfg, walk.check_crc, walk.limit_phy
    mf = files[i]
    nxt = find_resync(files, i, bad, cfg, check_crc=check_crc)
    if nxt is not None and limit_phy is not None and files[nxt[0]].file_from_offset + nxt[1] > limit_phy:
        nxt = None
    if nxt is None:
        res.end = mf.file_from_offset + bad
        res.reason = reason
        return None
    j, q = nxt
    length = (q - bad) if j == i else (mf.file_size - bad)
    res.corrupt.append(CorruptSpan(mf.path, mf.file_from_offset + bad, length, kind, reason))
    log.error("%s: %s; %d bytes skipped, valid data continues at %d", mf.path, reason, length,
              files[j].file_from_offset + q)
    return j, q
