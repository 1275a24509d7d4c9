"""Startup recovery of the commitlog (mirrors ``CommitLog#recoverNormally``/``recoverAbnormally``).

1. Choose the start segment (FORMAT.md §9.2).
2. Scan records with CRC checks until the first invalid one: that is the end of valid data ``E``.
3. Keep the evidence: bytes after ``E`` (the torn or corrupt tail, and later segments) are copied to
   ``recovery/<segment>.<n>.cut`` before the commitlog is cut; a :class:`RecoveryReport` says what
   was cut, where and why.
4. Consume queues are truncated to ``E``; everything after the dispatch point is re-dispatched.

Beyond upstream: after a crash the index is not left without the entries of the current file
(upstream drops it, quirk 15.14): the dropped files are rebuilt from the commitlog. A read-only
open runs steps 1-2 in memory and reports what a recovery would do without touching a byte.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

import numpy as np

from ..format import message as M

log = logging.getLogger(__name__)


@dataclass
class TailCut:
    segment: str
    offset: int          # phy offset of the first byte cut
    length: int          # bytes saved (up to the last non-zero byte)
    reason: str
    saved_to: str | None = None


@dataclass
class RecoveryReport:
    mode: str                      # "normal" (clean shutdown) / "abnormal" (abort file) / "empty"
    applied: bool                  # False for a read-only open (nothing was changed)
    start_offset: int = 0          # first byte scanned
    end_offset: int = 0            # end of valid data (E)
    last_valid_offset: int = -1    # start of the last valid record
    records_scanned: int = 0
    cuts: list[TailCut] = field(default_factory=list)
    consume_queues_truncated: list[str] = field(default_factory=list)
    index_files_rebuilt: list[str] = field(default_factory=list)
    redispatch_from: int = 0
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.cuts and not self.consume_queues_truncated

    def summary(self) -> str:
        s = (f"{self.mode} recovery{'' if self.applied else ' (dry run, read-only)'}: valid data "
             f"[{self.start_offset}, {self.end_offset}), {self.records_scanned} records scanned")
        for c in self.cuts:
            s += f"; cut {c.length} bytes at {c.offset} in {c.segment} ({c.reason})"
        if self.consume_queues_truncated:
            s += f"; {len(self.consume_queues_truncated)} consume queues truncated"
        if self.index_files_rebuilt:
            s += f"; {len(self.index_files_rebuilt)} index files rebuilt"
        return s


def _first_record_ok(mf, cfg) -> tuple[bool, int, int]:
    """(parsed with CRC, STORETIMESTAMP, PHYSICALOFFSET) of a segment's first record."""
    size, ok, _ = M.check_record(mf.mm, 0, mf.file_size, check_crc=cfg.check_crc_on_recover,
                                 force_verify_prop_crc=cfg.force_verify_prop_crc)
    if not ok or size <= 0:
        return False, 0, 0
    (_, _, _, _, _, _, phy, sys_flag, _) = M.HEAD.unpack_from(mf.mm, 0)
    ts = M.I64.unpack_from(mf.mm, M.store_timestamp_pos(sys_flag))[0]
    return ts != 0, ts, phy


def choose_start_segment(files, cfg, *, normal: bool, dispatch_from_phy: int, min_timestamp: int,
                         index_msg_timestamp: int) -> int:
    """Index of the segment to start scanning from (FORMAT.md §9.2)."""
    if not files:
        return 0
    safe = cfg.message_index_enable and cfg.message_index_safe
    lowest = 1 if normal else 0
    for i in range(len(files) - 1, lowest - 1, -1):
        ok, ts, phy = _first_record_ok(files[i], cfg)
        if not ok or (safe and ts > index_msg_timestamp):
            continue
        if normal and phy <= dispatch_from_phy:
            return i
        if not normal and ts <= min_timestamp:
            return i
    return 0


def scan_valid(files, start_index: int, cfg) -> tuple[int, int, int, str]:
    """Scan from ``files[start_index]`` with CRC checks. Returns ``(E, last_valid_start, records,
    reason)``, reason being why the scan stopped at E."""
    records = 0
    last_valid = -1
    reason = "end of data"
    i = start_index
    pos = 0
    while i < len(files):
        mf = files[i]
        stop_here = False
        while True:
            starts, stop, stop_pos = M.walk_records(mf.mm, pos, mf.file_size, 65536)
            batch = M.decode_batch(mf.u8, starts)
            k = batch.first_invalid()
            if cfg.check_crc_on_recover and k:
                head = batch.take(k)
                if cfg.force_verify_prop_crc:
                    ok = np.array([M.check_record(mf.mm, int(s), mf.file_size, check_crc=True,
                                                  force_verify_prop_crc=True)[1] for s in head.starts])
                else:
                    ok = M.body_crc_ok(mf.mm, head)
                bad = np.flatnonzero(~ok)
                if bad.size:
                    k = int(bad[0])
                    reason = f"CRC mismatch at {mf.file_from_offset + int(starts[k])}"
                    stop_here = True
            if k:
                records += k
                last_valid = mf.file_from_offset + int(starts[k - 1])
                pos = int(starts[k - 1] + batch.total[k - 1])
            if stop_here:
                return mf.file_from_offset + pos, last_valid, records, reason
            if k < len(starts):
                reason = f"invalid record at {mf.file_from_offset + int(starts[k])}"
                return mf.file_from_offset + pos, last_valid, records, reason
            if stop == "limit" and len(starts) == 65536:
                continue
            if stop == "blank":
                if i + 1 < len(files):
                    i += 1
                    pos = 0
                    break
                return mf.file_from_offset + stop_pos, last_valid, records, "blank record ends the last segment"
            if stop == "end":
                return mf.file_from_offset + pos, last_valid, records, "end of data"
            if stop == "invalid":
                return mf.file_from_offset + pos, last_valid, records, f"invalid record header at {mf.file_from_offset + pos}"
            # "limit": the next record runs past the segment end, or the segment is exhausted
            return mf.file_from_offset + pos, last_valid, records, (
                "torn record at the end of the segment" if pos < mf.file_size else "end of segment")
    return (files[-1].file_from_offset + pos) if files else 0, last_valid, records, reason


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
            nz = np.flatnonzero(block)
            if nz.size:
                last_nz = pos + int(nz[-1])
            pos += block.size
            if pos - max(last_nz, start) > zero_window:
                break
        if last_nz >= 0:
            out.append((mf, start, last_nz + 1))
    return out


def save_cuts(store_dir: str, extents, reason: str, applied: bool) -> list[TailCut]:
    cuts = []
    rdir = os.path.join(store_dir, "recovery")
    for mf, pos, stop in extents:
        cut = TailCut(os.path.basename(mf.path), mf.file_from_offset + pos, stop - pos, reason)
        if applied:
            os.makedirs(rdir, exist_ok=True)
            n = 0
            while os.path.exists(os.path.join(rdir, f"{cut.segment}.{n}.cut")):
                n += 1
            path = os.path.join(rdir, f"{cut.segment}.{n}.cut")
            with open(path, "wb") as fh:
                fh.write(mf.mm[pos:stop])
                fh.flush()
                os.fsync(fh.fileno())
            cut.saved_to = path
            log.warning("recovery: cut %d bytes at commitlog offset %d (%s), saved to %s",
                        cut.length, cut.offset, reason, path)
        cuts.append(cut)
        reason = "after the end of valid data"
    return cuts


def now() -> float:
    return time.monotonic()
