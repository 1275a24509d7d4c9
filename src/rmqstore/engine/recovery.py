"""Startup recovery of the commitlog (mirrors ``CommitLog#recoverNormally``/``recoverAbnormally``),
and the log-scanning primitives that recovery, :mod:`.verify` and read-only refresh share.

1. Choose the start segment (FORMAT.md §9.2).
2. Scan records with CRC checks (:func:`scan_log`) to the end of valid data ``E``.
3. Keep the evidence: bytes after ``E`` (the torn or corrupt tail, and later segments) are copied to
   ``recovery/<segment>.<n>.cut`` before the commitlog is cut; a :class:`RecoveryReport` says what
   was cut, where and why.
4. Consume queues are truncated; everything after the recovery point is re-dispatched.

What a valid record is (stricter than upstream, which checks magic, the length formula and the
body CRC): also ``PHYSICALOFFSET`` equal to the record's position, and, when present, a non-zero
last byte of TOPIC and of PROPERTIES. A record torn by a crash or a lost page keeps its header but
has zeros where its last bytes should be; upstream's checks miss a tear that falls after the body.

Beyond upstream:

* **Corruption in the middle is not a tail.** Upstream stops at the first bad record and deletes
  everything after it. Here a bad record is skipped when an intact record follows it (found by its
  magic and ``PHYSICALOFFSET`` within one maximal record length, or at the next segment start):
  the bad bytes stay in place, are reported (:class:`CorruptSpan`) and are never served; the
  acknowledged messages after them survive. Only a bad region with nothing valid after it is a torn
  tail and is cut.
* **The index keeps its entries.** After a crash upstream deletes the index files newer than the
  checkpoint (quirk 15.14); here their tail beyond the recovery point is cut
  (:func:`truncate_index_file`) and rebuilt by the re-dispatch.
* A read-only open runs steps 1-2 in memory and reports what a recovery would do without touching a
  byte.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import StoreIOError
from ..format import index_file as IF
from ..format import message as M

log = logging.getLogger(__name__)

#: Records decoded per numpy batch while scanning.
SCAN_BATCH = 65536
#: Candidate positions examined per resynchronisation attempt (pathological data guard).
MAX_RESYNC_CANDIDATES = 100_000
_MAGIC_BYTES = (M.I32.pack(M.MAGIC_V1), M.I32.pack(M.MAGIC_V2), M.I32.pack(M.BLANK_MAGIC))


@dataclass
class TailCut:
    segment: str
    offset: int          # phy offset of the first byte cut
    length: int          # bytes saved (up to the last non-zero byte)
    reason: str
    saved_to: str | None = None


@dataclass
class CorruptSpan:
    """Bytes inside the valid data that do not form a valid record (kept in place, never served)."""

    segment: str         # path of the commitlog segment
    offset: int          # phy offset of the first bad byte
    length: int          # bytes up to the next valid record (or the segment end)
    kind: str            # "record_crc" (framing intact, CRC or completeness check failed) / "record_invalid"
    reason: str


@dataclass
class RecoveryReport:
    mode: str                      # "normal" (clean shutdown) / "abnormal" (abort file) / "empty"
    applied: bool                  # False for a read-only open (nothing was changed)
    start_offset: int = 0          # first byte scanned
    end_offset: int = 0            # end of valid data (E)
    last_valid_offset: int = -1    # start of the last valid record
    records_scanned: int = 0
    cuts: list[TailCut] = field(default_factory=list)
    corrupt_records: list[CorruptSpan] = field(default_factory=list)
    consume_queues_truncated: list[str] = field(default_factory=list)
    index_files_rebuilt: list[str] = field(default_factory=list)
    redispatch_from: int = 0
    records_redispatched: int = 0
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.cuts and not self.consume_queues_truncated and not self.corrupt_records

    def summary(self) -> str:
        s = (f"{self.mode} recovery{'' if self.applied else ' (dry run, read-only)'}: valid data "
             f"[{self.start_offset}, {self.end_offset}), {self.records_scanned} records scanned")
        for c in self.cuts:
            s += f"; cut {c.length} bytes at {c.offset} in {c.segment} ({c.reason})"
        for c in self.corrupt_records:
            s += f"; kept {c.length} corrupt bytes at {c.offset} in {os.path.basename(c.segment)} ({c.reason})"
        if self.consume_queues_truncated:
            s += f"; {len(self.consume_queues_truncated)} consume queues truncated"
        if self.index_files_rebuilt:
            s += f"; tail of {len(self.index_files_rebuilt)} index files rebuilt"
        if self.records_redispatched:
            s += f"; {self.records_redispatched} records re-dispatched from {self.redispatch_from}"
        return s


# ------------------------------------------------------------------------------------------------
# Record validity
# ------------------------------------------------------------------------------------------------

def batch_checks(mf, batch: M.RecordBatch, cfg, *, check_crc: bool) -> tuple[np.ndarray, np.ndarray]:
    """For records whose framing ``decode_batch`` accepted: ``(structure_ok, crc_ok)``.

    ``structure_ok``: PHYSICALOFFSET equals the position, the last TOPIC byte and the last
    PROPERTIES byte (when there are properties) are not zero. ``crc_ok``: body CRC, or the
    properties CRC under ``forceVerifyPropCRC`` (all True when ``check_crc`` is off)."""
    u8 = mf.u8
    n = len(batch)
    ok = batch.valid.copy()
    if n == 0:
        return ok, ok.copy()
    idx = np.flatnonzero(ok)
    if idx.size:
        phy_ok = batch.phy_offset[idx] == mf.file_from_offset + batch.starts[idx]
        tl = batch.topic_len[idx]
        tp = batch.topic_pos[idx]
        has_t = tl > 0
        last_t = u8[np.where(has_t, tp + tl - 1, 0)]
        pl = batch.props_len[idx]
        pp = batch.props_pos[idx]
        has_p = pl > 0
        last_p = u8[np.where(has_p, pp + pl - 1, 0)]
        ok[idx] = phy_ok & (~has_t | (last_t != 0)) & (~has_p | (last_p != 0))
    crc = np.ones(n, dtype=bool)
    if check_crc and idx.size:
        if cfg.force_verify_prop_crc:
            for i in idx.tolist():
                crc[i] = M.check_record(mf.mm, int(batch.starts[i]), mf.file_size, check_crc=True,
                                        force_verify_prop_crc=True)[1]
        else:
            crc[idx] = M.body_crc_ok(mf.mm, take_idx(batch, idx))
    return ok, crc


def take_idx(batch: M.RecordBatch, idx: np.ndarray) -> M.RecordBatch:
    return M.RecordBatch(**{k: v[idx] for k, v in batch.__dict__.items()})


def record_ok_at(mf, pos: int, cfg, *, check_crc: bool = True) -> bool:
    """Whether a complete, valid record starts at ``pos`` of segment ``mf``."""
    if pos < 0 or pos + 91 > mf.file_size:
        return False
    batch = M.decode_batch(mf.u8, np.array([pos], dtype=np.int64))
    if not batch.valid[0]:
        return False
    ok, crc = batch_checks(mf, batch, cfg, check_crc=check_crc)
    return bool(ok[0] and crc[0])


def _blank_ok_at(mf, pos: int) -> bool:
    if pos + 8 > mf.file_size:
        return False
    total, magic = M.BLANK.unpack_from(mf.mm, pos)
    return magic == M.BLANK_MAGIC and total == mf.file_size - pos


def max_record_size(cfg) -> int:
    return min(cfg.max_message_size + 65536, cfg.mapped_file_size_commit_log)


def find_resync(files, i: int, bad_pos: int, cfg, *, check_crc: bool = True) -> tuple[int, int] | None:
    """After bad bytes at ``files[i]`` position ``bad_pos``: where the next intact record (or the
    end-of-segment blank) starts, as ``(segment index, position)``, or None when nothing valid
    follows (a torn or corrupt tail). Records are written back to back, so an intact successor
    starts within one maximal record length (anywhere in the rest of a segment before the last);
    past the segment end, the next segment must start with an intact record."""
    mf = files[i]
    # a segment before the last is full (records up to its blank end): all of it is searched; in
    # the last one an intact successor starts within one maximal record length
    window_end = mf.file_size if i + 1 < len(files) else min(mf.file_size, bad_pos + max_record_size(cfg) + 8)
    mm = mf.mm
    cands: list[int] = []
    for pat in _MAGIC_BYTES:
        j = mm.find(pat, bad_pos + 5, window_end)
        tried = 0
        while j >= 0 and tried < MAX_RESYNC_CANDIDATES:
            cands.append(j - 4)
            tried += 1
            j = mm.find(pat, j + 1, window_end)
    for q in sorted(set(cands)):
        if q <= bad_pos:
            continue
        if _blank_ok_at(mf, q) or record_ok_at(mf, q, cfg, check_crc=check_crc):
            return i, q
    if window_end >= mf.file_size and i + 1 < len(files) and record_ok_at(files[i + 1], 0, cfg, check_crc=check_crc):
        return i + 1, 0
    if getattr(mf, "stand_in", "") and i + 1 < len(files):
        return i + 1, 0  # the rest of a segment that is missing or short is a known gap, not a tail
    return None


# ------------------------------------------------------------------------------------------------
# Scanning the log
# ------------------------------------------------------------------------------------------------

@dataclass
class ScanResult:
    end: int                       # E: end of valid data
    last_valid: int                # start of the last valid record (-1 if none)
    records: int                   # valid records seen
    reason: str                    # why the scan stopped at E
    corrupt: list[CorruptSpan] = field(default_factory=list)
    max_store_timestamp: int = 0
    bytes_scanned: int = 0


def scan_log(files, start_phy: int, cfg, *, check_crc: bool = True, limit_phy: int | None = None,
             on_batch: Callable | None = None, dispatchable: bool = False,
             progress: Callable[[int], None] | None = None,
             on_corrupt: Callable[[CorruptSpan], None] | None = None) -> ScanResult:
    """Walk the commitlog segments ``files`` from ``start_phy``.

    Valid records are handed to ``on_batch(mf, batch)`` in order (numpy batches, no per-record
    objects). Bad bytes followed by an intact record are recorded as a :class:`CorruptSpan` and
    skipped; bad bytes with nothing valid after them end the scan. ``limit_phy`` bounds the scan
    (records must end at or before it). With ``dispatchable`` the batches also include records
    whose framing is intact but whose CRC or completeness check fails (what upstream's reput
    dispatches: their consume-queue units keep queue offsets aligned; reads refuse them).
    """
    res = ScanResult(end=start_phy, last_valid=-1, records=0, reason="end of data")
    if on_corrupt is not None:
        res.corrupt = _NotifyingList(on_corrupt)
    if not files:
        res.end = 0
        return res
    first = files[0].file_from_offset
    size = files[0].file_size
    i = (start_phy - first) // size
    if i < 0:
        i, start_phy = 0, first
    if i >= len(files):
        res.end = start_phy
        res.reason = "no segment holds the start offset"
        return res
    pos = start_phy - files[i].file_from_offset
    limit_phy = (1 << 62) if limit_phy is None else limit_phy
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
        starts, stop, stop_pos = M.walk_records(mf.mm, pos, seg_limit, SCAN_BATCH)
        batch = M.decode_batch(mf.u8, starts)
        ok, crc = batch_checks(mf, batch, cfg, check_crc=check_crc)
        good = ok & crc
        framing = batch.valid & (batch.phy_offset == base + batch.starts)
        out_mask = framing if dispatchable else good
        n_out = len(starts) if out_mask.all() else int(np.argmin(out_mask))
        if n_out:
            g = good[:n_out]
            n_good = int(g.sum())
            if n_good:
                res.records += n_good
                gi = np.flatnonzero(g)
                res.last_valid = base + int(starts[gi[-1]])
                res.max_store_timestamp = max(res.max_store_timestamp, int(batch.store_timestamp[gi].max()))
            if n_good < n_out:  # dispatchable mode: framing intact, CRC or completeness failed
                for j in np.flatnonzero(~g).tolist():
                    p = base + int(starts[j])
                    res.corrupt.append(CorruptSpan(mf.path, p, int(batch.total[j]), "record_crc",
                                                   f"record at {p} fails its CRC or completeness check"))
            if on_batch is not None:
                on_batch(mf, batch.take(n_out) if n_out < len(starts) else batch)
            pos = int(starts[n_out - 1] + batch.total[n_out - 1])
        if progress is not None:
            progress(base + pos)
        if n_out < len(starts):
            bad = int(starts[n_out])
            if framing[n_out] and not crc[n_out]:
                kind, reason = "record_crc", f"CRC mismatch in the record at {base + bad}"
            elif framing[n_out]:
                kind, reason = "record_crc", f"record at {base + bad} is incomplete (its end is zero-filled)"
            elif batch.valid[n_out]:
                kind, reason = "record_invalid", (f"record at {base + bad} says PHYSICALOFFSET "
                                                  f"{int(batch.phy_offset[n_out])}")
            else:
                kind, reason = "record_invalid", f"invalid record at {base + bad}"
            nxt = _resync_or_end(res, files, i, bad, kind, reason, cfg, check_crc, limit_phy)
            if nxt is None:
                return res
            i, pos = nxt
            continue
        if stop == "limit" and len(starts) == SCAN_BATCH:
            continue
        nxt = _handle_stop(res, files, i, pos, stop, stop_pos, seg_limit, cfg, check_crc, limit_phy)
        if nxt is None:
            return res
        i, pos = nxt


class _NotifyingList(list):
    def __init__(self, callback):
        super().__init__()
        self._callback = callback

    def append(self, item) -> None:
        super().append(item)
        self._callback(item)


def _handle_stop(res: ScanResult, files, i: int, pos: int, stop: str, stop_pos: int, seg_limit: int, cfg,
                 check_crc: bool, limit_phy: int | None = None) -> tuple[int, int] | None:
    """What to do where ``walk_records`` stopped after the last valid record (at ``pos``)."""
    mf = files[i]
    if stop == "blank":
        if i + 1 < len(files):
            return i + 1, 0
        # the last segment is full: data ends at its end (the next append opens a new segment)
        res.end = mf.file_from_offset + mf.file_size
        res.reason = "end of data (last segment full)"
        return None
    if stop == "end":
        # zeros where a record would start: the end of the data in the last segment (a batch whose
        # first header was never published ends there too: whole or not at all); before the last
        # segment, intact records after them make them damage (a zeroed range, or a segment missing
        # or short in the middle), skipped
        nxt = find_resync(files, i, pos, cfg, check_crc=check_crc) if i + 1 < len(files) else None
        if nxt is not None and (limit_phy is None or files[nxt[0]].file_from_offset + nxt[1] <= limit_phy):
            what = f"segment {mf.stand_in}" if getattr(mf, "stand_in", "") else "zeros where a record should start"
            return _resync_or_end(res, files, i, pos, "record_invalid",
                                  f"{what} at {mf.file_from_offset + pos}", cfg, check_crc, limit_phy)
        res.end = mf.file_from_offset + pos
        res.reason = "end of data"
        return None
    if stop == "limit" and seg_limit < mf.file_size and seg_limit - pos < 8:
        res.end = mf.file_from_offset + pos
        res.reason = "limit"
        return None
    # (a record running past ``limit_phy`` is bad: callers pass limits at record boundaries)
    if stop == "limit" and mf.file_size - pos < 8:
        if i + 1 < len(files):
            return i + 1, 0
        res.end = mf.file_from_offset + pos
        res.reason = "end of the last segment"
        return None
    # "invalid" header, or a record running past the segment end
    bad = stop_pos if stop == "invalid" else pos
    reason = (f"invalid record header at {mf.file_from_offset + bad}" if stop == "invalid"
              else f"record at {mf.file_from_offset + bad} runs past the end of its segment")
    return _resync_or_end(res, files, i, bad, "record_invalid", reason, cfg, check_crc, limit_phy)


def _resync_or_end(res: ScanResult, files, i: int, bad: int, kind: str, reason: str, cfg, check_crc: bool,
                   limit_phy: int | None) -> tuple[int, int] | None:
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


def choose_start_segment(files, cfg, *, normal: bool, dispatch_from_phy: int, min_timestamp: int,
                         index_msg_timestamp: int) -> int:
    """Index of the segment to start scanning from (FORMAT.md §9.2)."""
    if not files:
        return 0
    safe = cfg.message_index_enable and cfg.message_index_safe
    lowest = 1 if normal else 0
    for i in range(len(files) - 1, lowest - 1, -1):
        mf = files[i]
        if not record_ok_at(mf, 0, cfg, check_crc=cfg.check_crc_on_recover):
            continue
        (_, _, _, _, _, _, phy, sys_flag, _) = M.HEAD.unpack_from(mf.mm, 0)
        ts = M.I64.unpack_from(mf.mm, M.store_timestamp_pos(sys_flag))[0]
        if ts == 0 or (safe and ts > index_msg_timestamp):
            continue
        if normal and phy <= dispatch_from_phy:
            return i
        if not normal and ts <= min_timestamp:
            return i
    return 0


# ------------------------------------------------------------------------------------------------
# Tails
# ------------------------------------------------------------------------------------------------

def tail_extents(files, end: int, zero_window: int) -> list[tuple[object, int, int]]:
    """(segment, start pos, end pos of non-zero data) of the non-zero bytes at or after ``end``.

    Segments are zero-filled and written front to back, and no valid record holds a run of zeros
    longer than the largest record (``zero_window``), so each segment's scan stops once that many
    zero bytes follow the last non-zero one instead of reading a whole (sparse) segment.
    """
    out = []
    chunk = 1 << 20
    for mf in files:
        seg_start = mf.file_from_offset
        if seg_start + mf.file_size <= end:
            continue
        start = pos = max(0, end - seg_start)
        last_nz = -1
        u8 = mf.u8
        while pos < mf.file_size:
            block = u8[pos:pos + chunk]
            # ``!= 0`` takes a snapshot first: a writer in another process may be filling these very
            # pages (a read-only open of a live store), and flatnonzero on the live view counts and
            # then collects, failing when the count changed in between
            nz = np.flatnonzero(block != 0)
            if nz.size:
                last_nz = pos + int(nz[-1])
            pos += block.size
            if pos - max(last_nz, start) > zero_window:
                break
        if last_nz >= 0:
            out.append((mf, start, last_nz + 1))
    return out


def save_cuts(store_dir: str, extents, reason: str, applied: bool) -> list[TailCut]:
    """Describe (and, when ``applied``, copy to ``recovery/<segment>.<n>.cut``, fsync'd) the bytes
    about to be cut."""
    cuts = []
    rdir = os.path.join(store_dir, "recovery")
    for mf, pos, stop in extents:
        cut = TailCut(os.path.basename(mf.path), mf.file_from_offset + pos, stop - pos, reason)
        if applied:
            try:
                os.makedirs(rdir, exist_ok=True)
                n = 0
                while os.path.exists(os.path.join(rdir, f"{cut.segment}.{n}.cut")):
                    n += 1
                path = os.path.join(rdir, f"{cut.segment}.{n}.cut")
                with open(path, "wb") as fh:
                    fh.write(mf.mm[pos:stop])
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as e:
                raise StoreIOError(f"cannot save the {stop - pos} bytes about to be cut: {e.strerror}",
                                   path=rdir, offset=cut.offset) from e
            cut.saved_to = path
            log.warning("recovery: cut %d bytes at commitlog offset %d (%s), saved to %s",
                        cut.length, cut.offset, reason, path)
        cuts.append(cut)
        reason = "after the end of valid data"
    return cuts


# ------------------------------------------------------------------------------------------------
# Consume-queue units against the commitlog
# ------------------------------------------------------------------------------------------------

def units_match(files, end: int, phys: np.ndarray, sizes: np.ndarray, queue_offsets: np.ndarray,
                topic: str, queue_id: int) -> np.ndarray:
    """Per consume-queue unit: does it point at a record (below ``end``) of its size, topic, queue
    and queue offset, whose framing is intact? (Tags and CRC are not checked here.)"""
    n = phys.size
    out = np.zeros(n, dtype=bool)
    if n == 0 or not files:
        return out
    phys = phys.astype(np.int64)
    sizes = sizes.astype(np.int64)
    tb = np.frombuffer(topic.encode("utf-8"), dtype=np.uint8)
    first = files[0].file_from_offset
    fsize = files[0].file_size
    seg = np.where(phys >= first, (phys - first) // fsize, -1)
    in_range = (phys >= first) & (seg < len(files)) & (sizes >= 91) & (phys + sizes <= end)
    for s in np.unique(seg[in_range]).tolist():
        mf = files[s]
        sel = np.flatnonzero(in_range & (seg == s))
        rel = phys[sel] - mf.file_from_offset
        fits = rel + sizes[sel] <= mf.file_size
        sel, rel = sel[fits], rel[fits]
        if not sel.size:
            continue
        b = M.decode_batch(mf.u8, rel)
        ok = (b.valid & (b.total == sizes[sel]) & (b.phy_offset == phys[sel]) & (b.queue_id == queue_id)
              & (b.queue_offset == queue_offsets[sel]) & (b.topic_len == tb.size))
        idx = np.flatnonzero(ok)
        if idx.size and tb.size:
            pos = b.topic_pos[idx][:, None] + np.arange(tb.size)
            same = (mf.u8[pos] == tb).all(axis=1)
            ok[idx] = same
        out[sel] = ok
    return out


def validated_unit_end(cq, files, end: int, from_q: int) -> int:
    """Consume-queue view end for a reader: units from ``from_q`` are checked against the
    commitlog (up to ``end``); the view ends after the last unit that matches its record. A unit
    being written (torn) never matches and anything after it is not written yet; a non-matching
    unit followed by matching ones is corruption in the middle and stays (reads refuse it)."""
    out = from_q
    for mf in list(cq.queue.files):
        n_units = mf.file_size // 20   # every unit written so far, whatever the current view
        q_first = mf.file_from_offset // 20
        if q_first + n_units <= from_q:
            continue
        lo = max(0, from_q - q_first)
        units = np.frombuffer(mf.mm, dtype=_UNIT_DTYPE, count=n_units - lo, offset=lo * 20)
        written = np.flatnonzero((units["p"] != 0) | (units["s"] != 0))
        if not written.size:
            continue
        units = units[:int(written[-1]) + 1]
        n_units = lo + units.size
        qs = np.arange(q_first + lo, q_first + n_units, dtype=np.int64)
        ok = units_match(files, end, units["p"].astype(np.int64), units["s"].astype(np.int64), qs,
                         cq.topic, cq.queue_id)
        good = np.flatnonzero(ok)
        if good.size:
            out = int(qs[good[-1]]) + 1
    return out


def truncate_queue(cq, phy_end: int, *, apply: bool) -> bool:
    """Cut a consume queue after its last unit pointing below ``phy_end`` (to the end of valid
    data, or to the re-dispatch start after a crash). Unlike upstream's
    ``truncateDirtyLogicFiles`` an all-zero first unit of a file is not kept (that quirk leaves a
    unit pointing at offset 0 where the re-dispatch would have written the real one); the bytes
    after the cut are zeroed so that no stale unit comes back at the next load. Blank pre-fill
    units do not count as the last unit. Returns True when units were cut."""
    files = cq.queue.files
    if not files:
        return False
    end_q = cq.max_offset
    new_end = end_q
    for mf in reversed(files):
        n = mf.wrote_position // 20
        q0 = mf.file_from_offset // 20
        if n == 0:
            new_end = min(new_end, q0)
            continue
        phys = np.frombuffer(mf.mm, dtype=_UNIT_DTYPE, count=n)["p"].astype(np.int64)
        keep = np.flatnonzero(phys < phy_end)
        k = int(keep[-1]) + 1 if keep.size else 0
        new_end = q0 + k
        if k > 0:
            break
    if new_end >= end_q:
        return False
    cut = new_end * 20
    if apply:
        cq.queue.truncate_dirty_files(cut)
        for mf in cq.queue.files:
            if mf.file_from_offset <= cut < mf.file_from_offset + mf.file_size:
                mf.zero_from(cut - mf.file_from_offset)
                mf.flushed_position = min(mf.flushed_position, mf.wrote_position)
                mf.flush(0)
    else:
        keep_files = []
        for mf in cq.queue.files:
            if mf.file_from_offset > cut or (mf.file_from_offset == cut and mf is not cq.queue.files[0]):
                mf.close()
                continue
            mf.wrote_position = mf.flushed_position = min(mf.file_size, max(0, cut - mf.file_from_offset))
            keep_files.append(mf)
        cq.queue.files = keep_files
    cq.max_physic_offset = last_real_unit_end(cq)
    return True


def last_real_unit_end(cq) -> int:
    """``phy + size`` of the queue's last unit that is not a blank pre-fill unit (-1: none)."""
    for mf in reversed(cq.queue.files):
        n = mf.wrote_position // 20
        if n == 0:
            continue
        units = np.frombuffer(mf.mm, dtype=_UNIT_DTYPE, count=n)
        real = np.flatnonzero(~((units["p"] == 0) & (units["s"] == 0x7FFFFFFF)))
        if real.size:
            u = units[int(real[-1])]
            return int(u["p"]) + int(u["s"])
    return -1


_UNIT_DTYPE = np.dtype([("p", ">i8"), ("s", ">i4"), ("t", ">i8")])


# ------------------------------------------------------------------------------------------------
# Index tail
# ------------------------------------------------------------------------------------------------

def truncate_index_file(f, phy_limit: int, store_ts_at: Callable[[int], int], prev_end: tuple[int, int]) -> int:
    """Cut an index file back to its items for records below ``phy_limit`` (the re-dispatch start).

    Items are in commitlog order, so the kept items are a prefix. Slots that point at a cut item
    (or past the header's item count: a crash between the slot writes and the header write) are
    set to the newest kept item of their chain, which is the ``prevIndex`` of the oldest cut item
    in the slot. Header counts and end offsets are recomputed from the kept items. ``prev_end`` is
    ``(endPhyOffset, endTimestamp)`` of the previous file (a file left empty starts from there).
    Returns the number of items cut."""
    mm = f.mf.mm
    slots_n, cap = f.slot_num, f.index_num
    count = max(1, min(int(f.index_count), cap))
    slots = np.frombuffer(mm, dtype=">i4", count=slots_n, offset=IF.HEADER_SIZE)
    items = np.frombuffer(mm, dtype=IF.ITEM_DTYPE, count=cap, offset=IF.item_pos(slots_n, 0))
    upper = max(count, min(cap, int(slots.max(initial=0)) + 1))
    phys = items["phy_offset"][1:count].astype(np.int64)
    cut_at = np.flatnonzero(phys >= phy_limit)
    new_count = 1 + int(cut_at[0]) if cut_at.size else count
    if new_count == count and upper == count:
        return 0
    removed = items[new_count:upper]
    slot_of = (removed["key_hash"].astype(np.int64) % slots_n)
    if removed.size:
        uniq, first = np.unique(slot_of, return_index=True)
        prev = removed["prev_index"][first].astype(np.int64)
        prev = np.where((prev > 0) & (prev < new_count), prev, 0)
        slots_w = np.frombuffer(mm, dtype=">i4", count=slots_n, offset=IF.HEADER_SIZE)
        cur = slots_w[uniq].astype(np.int64)
        slots_w[uniq] = np.where(cur >= new_count, prev, cur).astype(np.int32)
        del slots_w
    stale = np.flatnonzero(slots.astype(np.int64) >= new_count)
    if stale.size:
        slots_w = np.frombuffer(mm, dtype=">i4", count=slots_n, offset=IF.HEADER_SIZE)
        slots_w[stale] = 0
        del slots_w
    start = IF.item_pos(slots_n, new_count)
    mm[start:start + (upper - new_count) * IF.ITEM_SIZE] = bytes((upper - new_count) * IF.ITEM_SIZE)
    f.index_count = new_count
    f.slot_count = int(np.count_nonzero(slots))
    if new_count > 1:
        first_item = items[1]
        f.begin_phy = int(first_item["phy_offset"])
        if f.begin_ts <= 0:
            f.begin_ts = store_ts_at(f.begin_phy)
        last = items[new_count - 1]
        f.end_phy = int(last["phy_offset"])
        ts = store_ts_at(f.end_phy)
        f.end_ts = ts if ts > 0 else f.begin_ts + int(last["time_diff"]) * 1000
    else:
        f.begin_phy = f.end_phy = max(prev_end[0], 0)
        f.begin_ts = f.end_ts = max(prev_end[1], 0)
    del slots, items, removed
    f.write_header()
    return upper - new_count


def store_ts_reader(files) -> Callable[[int], int]:
    """``phy -> STORETIMESTAMP`` of the record there (-1 when no record header is readable)."""
    def at(phy: int) -> int:
        if not files:
            return -1
        first, size = files[0].file_from_offset, files[0].file_size
        i = (phy - first) // size
        if phy < first or i >= len(files):
            return -1
        mf = files[i]
        pos = phy - mf.file_from_offset
        if pos + 64 > mf.file_size:
            return -1
        sys_flag = M.I32.unpack_from(mf.mm, pos + M.SYSFLAG_POS)[0]
        return M.I64.unpack_from(mf.mm, pos + M.store_timestamp_pos(sys_flag))[0]
    return at


def now() -> float:
    return time.monotonic()
