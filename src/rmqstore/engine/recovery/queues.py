"""Consume-queue units against the commitlog: which units match their records, where a reader's
view of a queue ends, where a queue is cut after a recovery, and the units' offsets as the
recovery walk's hints (:class:`QueueHints`)."""
from __future__ import annotations

import numpy as np

from ...format import consume_queue as CQF
from ...format import message as M
from ..contract import StoreParts


def match_units(files, end: int, units: tuple[np.ndarray, np.ndarray, np.ndarray],
                queue: tuple[str, int]) -> np.ndarray:
    """Per consume-queue unit (``units``: their phy offsets, sizes and queue offsets, of the queue
    ``(topic, queueId)``): does it point at a record (below ``end``) of its size, topic, queue and
    queue offset, whose framing is intact? (Tags and CRC are not checked here.)"""
    phys, sizes, queue_offsets = units
    topic, queue_id = queue
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
        units = np.frombuffer(mf.mm, dtype=CQF.UNIT_DTYPE, count=n_units - lo, offset=lo * 20)
        written = np.flatnonzero((units["phy_offset"] != 0) | (units["size"] != 0))
        if not written.size:
            continue
        units = units[:int(written[-1]) + 1]
        n_units = lo + units.size
        qs = np.arange(q_first + lo, q_first + n_units, dtype=np.int64)
        ok = match_units(files, end, (units["phy_offset"].astype(np.int64), units["size"].astype(np.int64), qs),
                         (cq.topic, cq.queue_id))
        good = np.flatnonzero(ok)
        if good.size:
            out = int(qs[good[-1]]) + 1
    return out


def queue_cut_point(cq, phy_end: int) -> int | None:
    """Queue offset after a consume queue's last unit pointing below ``phy_end`` (the end of valid
    data, or the re-dispatch start after a crash), or None when no unit is at or past it. Unlike
    upstream's ``truncateDirtyLogicFiles`` an all-zero first unit of a file is not kept (that quirk
    leaves a unit pointing at offset 0 where the re-dispatch would have written the real one).
    Blank pre-fill units do not count as the last unit."""
    files = cq.queue.files
    if not files:
        return None
    end_q = cq.max_offset
    new_end = end_q
    for mf in reversed(files):
        n = mf.wrote_position // 20
        q0 = mf.file_from_offset // 20
        if n == 0:
            new_end = min(new_end, q0)
            continue
        phys = np.frombuffer(mf.mm, dtype=CQF.UNIT_DTYPE, count=n)["phy_offset"].astype(np.int64)
        keep = np.flatnonzero(phys < phy_end)
        k = int(keep[-1]) + 1 if keep.size else 0
        new_end = q0 + k
        if k > 0:
            break
    return new_end if new_end < end_q else None


def cut_queue(cq, new_end: int) -> None:
    """Cut a consume queue's files after queue offset ``new_end`` (:func:`queue_cut_point`); the
    bytes after the cut are zeroed so that no stale unit comes back at the next load."""
    cut = new_end * 20
    cq.queue.truncate_dirty_files(cut)
    for mf in cq.queue.files:
        if mf.file_from_offset <= cut < mf.file_from_offset + mf.file_size:
            mf.zero_from(cut - mf.file_from_offset)
            mf.flushed_position = min(mf.flushed_position, mf.wrote_position)
            mf.flush(0)
    cq.max_physic_offset = last_real_unit_end(cq)


def narrow_queue_view(cq, new_end: int) -> None:
    """A reader's consume queue, in memory: its view ends at queue offset ``new_end``
    (:func:`queue_cut_point`); no byte is written."""
    cut = new_end * 20
    keep_files = []
    for mf in cq.queue.files:
        if mf.file_from_offset > cut or (mf.file_from_offset == cut and mf is not cq.queue.files[0]):
            mf.close()
            continue
        mf.wrote_position = mf.flushed_position = min(mf.file_size, max(0, cut - mf.file_from_offset))
        keep_files.append(mf)
    cq.queue.files = keep_files
    cq.max_physic_offset = last_real_unit_end(cq)


def last_real_unit_end(cq) -> int:
    """``phy + size`` of the queue's last unit that is not a blank pre-fill unit (-1: none)."""
    for mf in reversed(cq.queue.files):
        n = mf.wrote_position // 20
        if n == 0:
            continue
        units = np.frombuffer(mf.mm, dtype=CQF.UNIT_DTYPE, count=n)
        real = np.flatnonzero(~((units["phy_offset"] == 0) & (units["size"] == 0x7FFFFFFF)))
        if real.size:
            u = units[int(real[-1])]
            return int(u["phy_offset"]) + int(u["size"])
    return -1


#: the most record starts taken from the consume queues (8 bytes each); the scan walks record by record past them
HINTS_MOST = 1 << 22


class QueueHints:
    """Where the consume queues (as loaded, before any cut) say records start from ``start`` on:
    the scan's hints (:class:`.scan.ScanOptions`), per commitlog segment. A hint that is wrong
    costs time, not correctness: the walk checks every one against the records' own sizes. At most
    ``most`` are kept (queue by queue: past that, the walk goes record by record where the
    queues not taken have records), and no more than one consume-queue file's units are read at
    once beside them."""

    def __init__(self, store: StoreParts, start: int, most: int = HINTS_MOST) -> None:
        runs, total = [], 0
        for cq in store.consume_queues.values():
            for qf in cq.queue.files:
                n = qf.wrote_position // 20
                if n and total < most:
                    phys = np.frombuffer(qf.mm, dtype=CQF.UNIT_DTYPE, count=n)["phy_offset"]
                    runs.append(phys[phys >= start][:most - total].astype(np.int64))
                    total += runs[-1].size
        self.phys = np.sort(np.concatenate(runs)) if runs else np.zeros(0, dtype=np.int64)
        self._segment: tuple = (None, None)

    def __call__(self, mf) -> np.ndarray:
        if self._segment[0] is not mf:
            base = mf.file_from_offset
            lo, hi = np.searchsorted(self.phys, [base, base + mf.file_size]).tolist()
            self._segment = (mf, self.phys[lo:hi] - base)
        return self._segment[1]
