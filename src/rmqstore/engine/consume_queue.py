"""ConsumeQueue: per topic/queue array of 20-byte units (mirrors ``ConsumeQueue``, SimpleCQ).

A consumer's logical offset q is unit ``q`` at byte ``q*20`` of the file sequence. Writes follow
upstream ``putMessagePositionInfo`` exactly (duplicate rule, pre-fill of a queue that starts at
q != 0, gaps appended at the current end: FORMAT.md §5.3); batches of consecutive units are written
with one numpy copy.
"""
from __future__ import annotations

import logging
import os
from typing import Callable

import numpy as np

from ..config import MessageStoreConfig
from ..format import consume_queue as F
from ..io.mapped_file_queue import MappedFileQueue
from ..io import paths

log = logging.getLogger(__name__)

UNIT = F.UNIT_SIZE


class ConsumeQueue:
    def __init__(self, store_dir: str, topic: str, queue_id: int, cfg: MessageStoreConfig, *, read_only: bool):
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = cfg.cq_file_size
        self.read_only = read_only
        self.queue = MappedFileQueue(paths.consume_queue_dir(store_dir, topic, queue_id),
                                     self.file_size, read_only=read_only)
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self._first_created = False
        self.last_store_timestamp = 0
        #: queue offsets filled with blank units because their records never reached this queue
        #: (damaged, or the queue lost files): the store rebuilds such a queue at its next open
        self.gap_units = 0
        #: :meth:`recover` cut the queue before valid units (a damaged unit in the middle)
        self.cut_in_middle = False

    # --- loading and recovery ----------------------------------------------------------------
    def load(self) -> None:
        self.queue.load()

    def recover(self) -> int:
        """Upstream ``recover``: scan from the third-to-last file (or the file after the last
        stand-in, :meth:`MappedFile.stand_in_for`) while units are valid (``phy >= 0 and size > 0``),
        then cut after the last valid unit. Returns the logic end."""
        files = self.queue.files
        if not files:
            return 0
        index = max(0, len(files) - 3)
        # never from a stand-in for a lost or short file (its zeros are a known gap, not the end)
        stand_ins = [i for i, mf in enumerate(files) if getattr(mf, "stand_in", "")]
        if stand_ins and stand_ins[-1] + 1 < len(files):
            index = max(index, stand_ins[-1] + 1)
        process = files[index].file_from_offset
        while True:
            mf = files[index]
            units = F.decode_units(mf.mm)
            valid = (units["phy_offset"] >= 0) & (units["size"] > 0)
            bad = np.flatnonzero(~valid)
            n = int(bad[0]) if bad.size else units.size
            if n:
                last = units[n - 1]
                self.max_physic_offset = int(last["phy_offset"]) + int(last["size"])
            process = mf.file_from_offset + n * UNIT
            if n * UNIT == self.file_size and index + 1 < len(files):
                index += 1
                continue
            # valid units after the cut, or later files: damage in the middle, not a torn tail
            self.cut_in_middle = bool(valid[n:].any()) or index + 1 < len(files)
            break
        self._set_end(process)
        return process

    def _set_end(self, logic_end: int) -> None:
        if self.read_only:
            keep = []
            for mf in self.queue.files:
                if mf.file_from_offset + self.file_size <= logic_end:
                    mf.wrote_position = mf.flushed_position = self.file_size
                    keep.append(mf)
                elif mf.file_from_offset <= logic_end:
                    mf.wrote_position = mf.flushed_position = logic_end - mf.file_from_offset
                    keep.append(mf)
                else:
                    mf.close()
            self.queue.files = keep
        else:
            self.queue.truncate_dirty_files(logic_end)

    def truncate_dirty(self, phy_end: int) -> None:
        """Upstream ``truncateDirtyLogicFiles`` (FORMAT.md §5.4)."""
        self.max_physic_offset = phy_end
        files = self.queue.files
        while files:
            mf = files[-1]
            units = F.decode_units(mf.mm)
            if units.size == 0 or int(units[0]["phy_offset"]) >= phy_end:
                if self.read_only:
                    files.pop().close()
                else:
                    self._drop_last()
                continue
            phy = units["phy_offset"].astype(np.int64)
            size = units["size"].astype(np.int64)
            ok = (phy >= 0) & (size > 0) & (phy < phy_end)
            ok[0] = True  # upstream keeps the first unit on the offset test alone (quirk 15.6)
            bad = np.flatnonzero(~ok)
            n = int(bad[0]) if bad.size else units.size
            self.max_physic_offset = int(phy[n - 1] + size[n - 1])
            mf.wrote_position = n * UNIT
            mf.flushed_position = min(mf.flushed_position, n * UNIT)
            if not self.read_only and n * UNIT < self.file_size:
                mf.zero_from(n * UNIT)
            break

    def _drop_last(self) -> None:
        mf = self.queue.files.pop()
        mf.destroy()

    # --- offsets -----------------------------------------------------------------------------
    @property
    def max_logic_offset(self) -> int:
        return self.queue.max_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset // UNIT

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // UNIT

    def roll_next_file(self, q: int) -> int:
        per = self.file_size // UNIT
        return q + per - q % per

    # --- writing -----------------------------------------------------------------------------
    def put_units(self, queue_offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> None:
        """Append units for records in commitlog order (``putMessagePositionInfo`` for each)."""
        if queue_offsets.size == 1:  # a broker's usual dispatch: one unit, no numpy round trips
            self.put_unit(int(queue_offsets[0]), int(phys[0]), int(sizes[0]), int(tags[0]))
            return
        keep = (phys + sizes) > self.max_physic_offset
        if not keep.all():
            queue_offsets, phys, sizes, tags = queue_offsets[keep], phys[keep], sizes[keep], tags[keep]
        i, n = 0, queue_offsets.size
        while i < n:
            q0 = int(queue_offsets[i])
            mf = self._file_for(q0)
            current = mf.file_from_offset + mf.wrote_position
            room = (self.file_size - mf.wrote_position) // UNIT
            k = min(room, n - i)
            run = queue_offsets[i:i + k]
            if q0 * UNIT == current and (k == 1 or bool((run[1:] - run[:-1] == 1).all())):
                # in order, in one copy: a reader in another process validates units one by one
                # (recovery.validated_unit_end) and takes a missing unit before written ones for damage
                self._append_units(mf, phys[i:i + k], sizes[i:i + k], tags[i:i + k])
                i += k
            else:
                self._put_one(mf, q0, int(phys[i]), int(sizes[i]), int(tags[i]))
                i += 1

    def put_run(self, q0: int, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> None:
        """:meth:`put_units` for records with consecutive queue offsets from ``q0`` (a producer's
        batch, in commitlog order): the same bytes, without an offsets array to build and check.
        Units already present, or not right after the queue's last one, go through :meth:`put_units`."""
        n = int(phys.size)
        if n == 1 or int(phys[0]) + int(sizes[0]) <= self.max_physic_offset:
            self.put_units(np.arange(q0, q0 + n, dtype=np.int64), phys, sizes, tags)
            return
        i = 0
        while i < n:
            mf = self._file_for(q0 + i)
            if (q0 + i) * UNIT != mf.file_from_offset + mf.wrote_position:
                self.put_units(np.arange(q0 + i, q0 + n, dtype=np.int64), phys[i:], sizes[i:], tags[i:])
                return
            k = min((self.file_size - mf.wrote_position) // UNIT, n - i)
            self._append_units(mf, phys[i:i + k], sizes[i:i + k], tags[i:i + k])
            i += k

    def _append_units(self, mf, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> None:
        """Append the units of records whose queue offsets follow ``mf``'s last unit, in one copy."""
        mf.append(F.encode_units(phys, sizes, tags), publish_last=False)
        self.max_physic_offset = int(phys[-1]) + int(sizes[-1])

    def put_unit(self, q: int, phy: int, size: int, tag: int) -> None:
        """:meth:`put_units` for one unit, with plain ints."""
        if phy + size <= self.max_physic_offset:
            return
        mf = self._file_for(q)
        if q * UNIT == mf.file_from_offset + mf.wrote_position and mf.wrote_position + UNIT <= self.file_size:
            mf.append(F.UNIT.pack(phy, size, tag), publish_last=False)
            self.max_physic_offset = phy + size
        else:
            self._put_one(mf, q, phy, size, tag)

    def _file_for(self, q: int):
        expect = q * UNIT
        was_empty = not self.queue.files
        mf = self.queue.get_last_mapped_file(expect)
        if was_empty:
            self._first_created = True
        if self._first_created and len(self.queue.files) == 1 and q != 0 and mf.wrote_position == 0:
            self.min_logic_offset = expect
            fill = expect % self.file_size
            if fill:
                mf.append(F.BLANK_UNIT * (fill // UNIT), publish_last=False)
            mf.flushed_position = 0
        return mf

    def _put_one(self, mf, q: int, phy: int, size: int, tags: int) -> None:
        expect = q * UNIT
        if q != 0:
            current = mf.file_from_offset + mf.wrote_position
            if expect < current:
                return  # already present
            if current < expect < mf.file_from_offset + mf.file_size:
                # units were lost (records the dispatcher stepped over as damaged): upstream logs
                # "[BUG] logic queue order maybe wrong" and appends at the current end, so every later
                # unit sits at the wrong offset (quirk 15.6). Fixed knowingly: the gap is filled with
                # blank units (reads report them as skipped), later messages keep their queue offsets.
                gap = (expect - current) // UNIT
                log.warning("%s: queue offsets %d..%d have no record (damaged or lost); filled with blank units",
                            mf.path, current // UNIT, expect // UNIT - 1)
                mf.append(F.BLANK_UNIT * gap, publish_last=False)
                self.gap_units += gap
        self.max_physic_offset = phy + size
        mf.append(F.UNIT.pack(phy, size, tags), publish_last=False)

    def flush(self, least_pages: int = 0) -> None:
        self.queue.flush(least_pages)

    # --- reading -----------------------------------------------------------------------------
    def _unit_at(self, q: int):
        """``(mapped file, position in it)`` of unit ``q``, or None before the queue's first unit or
        past its files (whether the unit is written yet is the caller's check)."""
        pos = q * UNIT
        if q < 0 or pos < self.min_logic_offset:
            return None
        mf = self.queue.find(pos)
        return None if mf is None else (mf, pos - mf.file_from_offset)

    def get_unit(self, q: int) -> tuple[int, int, int] | None:
        """``(phy_offset, size, tags_code)`` of unit ``q`` or None."""
        at = self._unit_at(q)
        if at is None or at[1] + UNIT > at[0].wrote_position:
            return None
        return F.UNIT.unpack_from(at[0].mm, at[1])

    def repair_unit(self, q: int, phy: int, size: int, tags: int) -> bool:
        """Rewrite unit ``q`` (a writer, inside the written part, never a stand-in): a unit found
        damaged in place, whose record was located by a walk of the commitlog. True when written."""
        pos = q * UNIT
        mf = self.queue.find(pos)
        if self.read_only or mf is None or mf.read_only or getattr(mf, "stand_in", ""):
            return False
        p = pos - mf.file_from_offset
        if q < 0 or p + UNIT > mf.wrote_position:
            return False
        mf.write_at(p, F.UNIT.pack(phy, size, tags), publish_last=False)
        return True

    def iterate_from(self, q: int, limit: int | None = None) -> np.ndarray | None:
        """Units from ``q`` to the end of the written part of the one file holding it, at most
        ``limit`` of them (a copy)."""
        at = self._unit_at(q)
        if at is None or at[1] >= at[0].wrote_position:
            return None
        mf, p = at
        count = (mf.wrote_position - p) // UNIT
        if limit is not None:
            count = min(count, limit)
        return np.frombuffer(mf.mm, dtype=F.UNIT_DTYPE, count=count, offset=p).copy()

    def correct_min_offset(self, min_phy: int) -> None:
        """Upstream ``correctMinOffset`` (FORMAT.md §5.5)."""
        if self.min_logic_offset >= self.max_logic_offset:
            return
        last_mf = self.queue.last
        if last_mf is None or last_mf.wrote_position < UNIT:
            return
        last_phy = F.UNIT.unpack_from(last_mf.mm, last_mf.wrote_position - UNIT)[0]
        if last_phy < min_phy:
            self.min_logic_offset = last_mf.file_from_offset + last_mf.wrote_position
            return
        first = self.queue.first
        start = self.min_logic_offset - first.file_from_offset
        intact = start >= 0
        if not intact:
            start = 0
        if start >= first.wrote_position:
            return
        if intact and F.UNIT.unpack_from(first.mm, start)[0] >= min_phy:
            return
        units = np.frombuffer(first.mm, dtype=F.UNIT_DTYPE, count=first.wrote_position // UNIT)
        phys = units["phy_offset"].astype(np.int64)
        k0 = start // UNIT
        idx = np.flatnonzero(phys[k0:] >= min_phy)
        if idx.size:
            self.min_logic_offset = first.file_from_offset + (k0 + int(idx[0])) * UNIT
        else:
            self.min_logic_offset = first.file_from_offset + first.wrote_position

    def offset_in_queue_by_time(self, ts: int, boundary: str, store_time: Callable[[int, int], int],
                                commitlog_min_offset: int) -> int:
        """Upstream ``getOffsetInQueueByTime`` before the store's clamp (FORMAT.md §5.7)."""
        files = self.queue.files
        if not files:
            return 0
        lower = boundary == "lower"
        mf = _file_for_time(files, ts, store_time, lower)
        if mf is None:
            return 0
        low = max(0, self.min_logic_offset - mf.file_from_offset)
        rng = mf.wrote_position
        if rng < UNIT or low >= rng:
            return mf.file_from_offset // UNIT if lower else 0
        units = np.frombuffer(mf.mm, dtype=F.UNIT_DTYPE, count=rng // UNIT)

        def t_at(pos: int) -> int:
            u = units[pos // UNIT]
            return store_time(int(u["phy_offset"]), int(u["size"]))

        ceiling = rng - UNIT
        floor = low
        if t_at(ceiling) < ts:
            return (mf.file_from_offset + (ceiling + UNIT if lower else ceiling)) // UNIT
        if t_at(floor) > ts:
            return mf.file_from_offset // UNIT if lower else 0
        try:
            found, left, right = _bisect_time(units, low, ceiling, ts, store_time, commitlog_min_offset)
        except _NoStoreTime:
            return 0
        if found is None:
            pos = right if lower else left
        elif lower:
            pos = found
            while pos - UNIT >= floor and t_at(pos - UNIT) == ts:
                pos -= UNIT
        else:
            pos = found
            while pos + UNIT <= ceiling and t_at(pos + UNIT) == ts:
                pos += UNIT
        return (mf.file_from_offset + pos) // UNIT

    def close(self) -> None:
        self.queue.close()

    def destroy(self) -> None:
        self.queue.destroy()
        self.max_physic_offset = -1
        self.min_logic_offset = 0


def load_consume_queues(store_dir: str, cfg: MessageStoreConfig, read_only: bool, queues: dict) -> None:
    """Load every queue directory under ``consumequeue/`` that ``queues`` (``(topic, queueId) ->
    ConsumeQueue``) does not hold yet, in name order (an open's load and a reader's refresh)."""
    root = paths.consume_queue_dir(store_dir)
    if not os.path.isdir(root):
        return
    for topic in sorted(os.listdir(root)):
        tdir = os.path.join(root, topic)
        if not os.path.isdir(tdir):
            continue
        for q in sorted(os.listdir(tdir)):
            if not q.isdigit() or (topic, int(q)) in queues:
                continue
            cq = ConsumeQueue(store_dir, topic, int(q), cfg, read_only=read_only)
            cq.load()
            queues[(topic, int(q))] = cq


def _file_for_time(files: list, ts: int, store_time: Callable[[int, int], int], lower: bool):
    """The file upstream searches for ``ts``: lower, the first whose last unit's message is stored at
    or after ``ts`` (else the last file); upper, the last whose first unit's message is stored at
    or before ``ts`` (None if there is none)."""
    if lower:
        for mf in files[:-1]:
            n = mf.wrote_position // UNIT
            if n == 0:
                continue
            phy, size, _ = F.UNIT.unpack_from(mf.mm, (n - 1) * UNIT)
            if store_time(phy, size) >= ts:
                return mf
        return files[-1]
    for mf in reversed(files):
        if mf.wrote_position < UNIT:
            continue
        phy, size, _ = F.UNIT.unpack_from(mf.mm, 0)
        if store_time(phy, size) <= ts:
            return mf
    return None


class _NoStoreTime(LookupError):
    """A unit's message has no store time (``store_time`` answered < 0)."""


def _bisect_time(units: np.ndarray, low: int, high: int, ts: int, store_time: Callable[[int, int], int],
                 commitlog_min_offset: int) -> tuple[int | None, int, int]:
    """Upstream's binary search of a file's units (byte positions ``[low, high]``) for a message stored
    at ``ts``: ``(found, left, right)``, the position of one stored at ``ts`` (None if none is) and
    the last positions probed below and above it (-1 if none was). Units whose message lies before
    ``commitlog_min_offset`` count as earlier. Raises :class:`_NoStoreTime`."""
    left = right = -1
    while high >= low:
        mid = ((low + high) // (2 * UNIT)) * UNIT
        u = units[mid // UNIT]
        if int(u["phy_offset"]) < commitlog_min_offset:
            low = mid + UNIT
            left = mid
            continue
        t = store_time(int(u["phy_offset"]), int(u["size"]))
        if t < 0:
            raise _NoStoreTime(mid)
        if t == ts:
            return mid, left, right
        if t > ts:
            high = mid - UNIT
            right = mid
        else:
            low = mid + UNIT
            left = mid
    return None, left, right
