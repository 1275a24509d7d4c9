"""IndexFile: one on-disk hash index file from ``topic#key`` to phy offsets.

Mirrors upstream ``IndexFile`` + ``IndexHeader`` byte for byte (FORMAT.md §6): item 0 unused,
capacity ``maxIndexNum - 1``, timeDiff in seconds against the header's beginTimestamp (which the
first item of a successor file sees as the *previous* file's end time: quirk 15.2), slots holding
the newest item of their chain.

Writes are vectorised: a batch of keys goes into a file with one numpy scatter for the items; each
item's ``prevIndex`` is the previous item of the same slot in the batch, or the slot's old value.
:class:`~rmqstore.engine.index.IndexService` holds a store's files.
"""
from __future__ import annotations

import logging
import os
import struct

import numpy as np

from ..errors import CorruptRecordError
from ..format import index_file as F
from ..format.arrays import stable_argsort
from ..io.mapped_file import MappedFile

log = logging.getLogger(__name__)

#: batches up to this many items are put item by item (see :meth:`IndexFile.put_small`)
SMALL_PUT = 16
_ITEM = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")


def link_chains(slot_of: np.ndarray, nums: np.ndarray, old: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Chain items into their slots: item ``nums[i]`` (increasing) goes to slot ``slot_of[i]``,
    whose newest item before these was ``old[i]`` (0 = empty). Returns each item's prevIndex, the
    slots touched with their new newest item, and how many of those slots were empty."""
    m = int(slot_of.size)
    order = stable_argsort(slot_of)  # by slot, item order inside a slot
    s_sorted = slot_of[order]
    n_sorted = nums[order]
    first = np.empty(m, dtype=bool)  # the oldest item of its slot in this batch
    first[0] = True
    np.not_equal(s_sorted[1:], s_sorted[:-1], out=first[1:])
    last = np.empty(m, dtype=bool)  # the newest
    last[-1] = True
    last[:-1] = first[1:]
    prev_sorted = np.empty(m, dtype=np.int64)
    prev_sorted[1:] = n_sorted[:-1]
    heads_before = old[order[first]]
    prev_sorted[first] = heads_before
    prev = np.empty(m, dtype=np.int64)
    prev[order] = prev_sorted
    return prev, s_sorted[last], n_sorted[last], int(np.count_nonzero(heads_before == 0))


def _items_bytes(hashes: np.ndarray, phys: np.ndarray, diffs: np.ndarray, prevs: np.ndarray) -> bytes:
    """Consecutive 20-byte index items."""
    items = np.empty(hashes.size, dtype=F.ITEM_DTYPE)
    items["key_hash"] = hashes
    items["phy_offset"] = phys
    items["time_diff"] = diffs
    items["prev_index"] = prevs
    return items.tobytes()


def indexed(phys: list, sys_flags: list, end0: int, skip_eq: bool) -> list[bool]:
    """Whether each record is indexed (upstream ``buildIndex``): it lies after the index's end
    ``end0`` (at it too unless ``skip_eq``) and is not a rolled-back transaction message (PREPARED
    records are indexed, as upstream)."""
    return [(p > end0 or (p == end0 and not skip_eq)) and (f & 0xC) != 0xC for p, f in zip(phys, sys_flags)]


class IndexFile:
    """One index file (mirrors ``IndexFile`` + ``IndexHeader``)."""

    def __init__(self, path: str, slots: int, items: int, *, read_only: bool):
        """Open the index file ``path`` (``slots`` slots, ``items`` items); :meth:`create` makes a new one."""
        self._map(path, slots, items, read_only=read_only, create=False)
        (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count,
         self.index_count) = F.HEADER.unpack_from(self.mf.mm, 0)
        if self.index_count <= 0:
            self.index_count = 1
        if self.index_count > items:
            raise CorruptRecordError(f"index header says indexCount {self.index_count} > maxIndexNum {items}",
                                     path=path, offset=F.INDEX_COUNT_POS)
        self._view()

    @classmethod
    def create(cls, path: str, slots: int, items: int, *, prev_end_phy: int = 0, prev_end_ts: int = 0) -> IndexFile:
        """A new, empty index file ``path``; a successor starts where its predecessor ended
        (``prev_end_phy``/``prev_end_ts``; 0: no predecessor)."""
        self = cls.__new__(cls)
        self._map(path, slots, items, read_only=False, create=True)
        self.begin_ts = self.end_ts = self.begin_phy = self.end_phy = 0
        self.slot_count = 0
        self.index_count = 1
        if prev_end_phy > 0:
            self.begin_phy = self.end_phy = prev_end_phy
        if prev_end_ts > 0:
            self.begin_ts = self.end_ts = prev_end_ts
        # keys land in random slots: fault the whole slot table in now, with the GIL released
        self.mf.populate(0, F.item_pos(slots, 0))
        # upstream setters write through; indexCount stays 0 on disk until the first put/flush
        self.mf.pwrite(0, F.HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, 0, 0))
        self._view()
        return self

    def _map(self, path: str, slots: int, items: int, *, read_only: bool, create: bool) -> None:
        self.path, self.slot_num, self.index_num, self.read_only = path, slots, items, read_only
        self.mf = MappedFile(path, F.file_size(slots, items), read_only=read_only, create=create)

    def _view(self) -> None:
        mm, slots = self.mf.mm, self.slot_num
        self._slots = np.frombuffer(mm, dtype=">i4", count=slots, offset=F.HEADER_SIZE)
        self._items = np.frombuffer(mm, dtype=F.ITEM_DTYPE, count=self.index_num, offset=F.item_pos(slots, 0))

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def capacity_left(self) -> int:
        return max(0, self.index_num - self.index_count)

    def write_header(self) -> None:
        # through the file, not the mapping: after a flush the header page is write-protected
        # again, and the next write fault (a journal handle) can take milliseconds with the GIL held
        self.mf.pwrite(0, F.HEADER.pack(self.begin_ts, self.end_ts, self.begin_phy, self.end_phy,
                                        self.slot_count, self.index_count))

    def put_batch(self, hashes: np.ndarray, phys: np.ndarray, ts: np.ndarray) -> int:
        """Put as many items as fit (``putKey`` for each, in order); returns how many were put."""
        m = min(int(hashes.size), self.capacity_left)
        if m <= 0:
            return 0
        if m <= SMALL_PUT:
            return self.put_small(hashes[:m].tolist(), phys[:m].tolist(), ts[:m].tolist())
        hashes, phys, ts = hashes[:m].astype(np.int64), phys[:m].astype(np.int64), ts[:m].astype(np.int64)
        count = self.index_count
        nums = count + np.arange(m, dtype=np.int64)
        slot_of = hashes % self.slot_num
        diffs = np.empty(m, dtype=np.int32)
        if count <= 1:
            diffs[0] = F.time_diff_seconds(int(ts[0]), self.begin_ts)
            if m > 1:
                diffs[1:] = F.time_diff_seconds(ts[1:], int(ts[0]))
            self.begin_phy, self.begin_ts = int(phys[0]), int(ts[0])
        else:
            diffs[:] = F.time_diff_seconds(ts, self.begin_ts)
        old = self._slots[slot_of].astype(np.int64)
        old = np.where((old <= 0) | (old > count), 0, old)
        prev, head_slots, heads, new_slots = link_chains(slot_of, nums, old)
        self.mf.write_at(F.item_pos(self.slot_num, count), _items_bytes(hashes, phys, diffs, prev))
        self._write_slots(head_slots, heads)
        self.slot_count += new_slots
        self.index_count = count + m
        self.end_phy, self.end_ts = int(phys[-1]), int(ts[-1])
        self.write_header()
        return m

    def put_small(self, hashes: list[int], phys: list[int], ts: list[int]) -> int:
        """:meth:`put_batch` item by item (``putKey``): the same bytes, without numpy's fixed cost."""
        count = self.index_count
        m = len(hashes)
        if count <= 1:
            diffs = [F.time_diff_seconds(ts[0], self.begin_ts)] + [F.time_diff_seconds(t, ts[0]) for t in ts[1:]]
            self.begin_phy, self.begin_ts = phys[0], ts[0]
        else:
            diffs = [F.time_diff_seconds(t, self.begin_ts) for t in ts]
        slots, slot_num, pack = self._slots, self.slot_num, _ITEM.pack
        heads: dict[int, int] = {}
        items = []
        new_slots = 0
        for j in range(m):
            h = hashes[j]
            slot = h % slot_num
            prev = heads.get(slot)
            if prev is None:
                prev = int(slots[slot])
                if prev <= 0 or prev > count:
                    prev = 0
                    new_slots += 1
            heads[slot] = count + j
            items.append(pack(h, phys[j], diffs[j], prev))
        self.mf.write_at(F.item_pos(slot_num, count), b"".join(items))
        mm, pack_slot = self.mf.mm, _SLOT.pack_into
        for slot, head in heads.items():
            pack_slot(mm, F.HEADER_SIZE + 4 * slot, head)
        self.slot_count += new_slots
        self.index_count = count + m
        self.end_phy, self.end_ts = phys[-1], ts[-1]
        self.write_header()
        return m

    def _write_slots(self, slots: np.ndarray, heads: np.ndarray) -> None:
        view = np.frombuffer(self.mf.mm, dtype=">i4", count=self.slot_num, offset=F.HEADER_SIZE)
        view[slots] = heads
        del view

    def put_shard(self, hashes: np.ndarray, phys: np.ndarray, ts: np.ndarray, shard: int, shards: int
                  ) -> tuple[int, int]:
        """Of ``put_batch(hashes, phys, ts)`` on this fresh file, write shard ``shard`` of
        ``shards``: the items of one run of ranks (each item's prevIndex is the newest earlier item
        of its slot, found without the other shards) and the entries of one run of slots (the
        newest item of each). Shards write disjoint bytes, so different processes can write them
        into the same file at once; together they write what one ``put_batch`` writes, the header
        aside (:meth:`finish_shards`). Returns the items written and the slots given an entry."""
        n = int(hashes.size)
        if self.index_count > 1 or n > self.capacity_left:
            raise ValueError(f"put_shard needs a fresh file with room for {n} items ({self.path})")
        if not 0 <= shard < shards:
            raise ValueError(f"shard {shard} of {shards}")
        a, b = shard * n // shards, (shard + 1) * n // shards
        lo, hi = shard * self.slot_num // shards, (shard + 1) * self.slot_num // shards
        slot_of = hashes.astype(np.int64) % self.slot_num
        nums = np.arange(1, n + 1, dtype=np.int64)
        if a < b:
            head = np.zeros(self.slot_num, dtype=np.int64)  # newest item of each slot before rank a
            np.maximum.at(head, slot_of[:a], nums[:a])
            prev, _, _, _ = link_chains(slot_of[a:b], nums[a:b], head[slot_of[a:b]])
            ts = ts.astype(np.int64)
            diffs = F.time_diff_seconds(ts[a:b], int(ts[0]))
            if a == 0:  # the file's first item is timed against the predecessor's end (quirk 15.2)
                diffs[0] = F.time_diff_seconds(int(ts[0]), self.begin_ts)
            self.mf.write_at(F.item_pos(self.slot_num, a + 1), _items_bytes(hashes[a:b], phys[a:b], diffs, prev))
        mine = (slot_of >= lo) & (slot_of < hi)
        heads = np.zeros(hi - lo, dtype=np.int64)
        np.maximum.at(heads, slot_of[mine] - lo, nums[mine])
        if hi > lo:
            self.mf.write_at(F.slot_pos(lo), heads.astype(">i4").tobytes())
        return b - a, int(np.count_nonzero(heads))

    def finish_shards(self, n: int, first: tuple[int, int], last: tuple[int, int], slot_count: int) -> None:
        """The header after the shards of ``n`` items: ``first``/``last`` are the ``(phy, ts)`` of
        the first and last item, ``slot_count`` the sum of the shards' new slots."""
        self.begin_phy, self.begin_ts = first
        self.end_phy, self.end_ts = last
        self.slot_count = slot_count
        self.index_count = n + 1
        self.write_header()

    def put_key(self, key_hash: int, phy: int, ts: int) -> bool:
        """Scalar ``putKey`` (kept for tests that compare with the batch form)."""
        return self.put_batch(np.array([key_hash]), np.array([phy]), np.array([ts])) == 1

    def is_time_matched(self, begin: int, end: int) -> bool:
        fb, fe = self.begin_ts, self.end_ts
        return (begin < fb and end > fe) or (fb <= begin <= fe) or (fb <= end <= fe)

    def select_phy_offsets(self, out: list[int], key_hash: int, max_num: int, begin: int, end: int) -> None:
        """Upstream ``selectPhyOffset``: follow the slot's chain, newest first (hash match only)."""
        count = self.index_count
        if count <= 1:
            return
        mm = self.mf.mm
        slot = key_hash % self.slot_num
        n = F.SLOT.unpack_from(mm, F.slot_pos(slot))[0]
        base = F.item_pos(self.slot_num, 0)
        # a put in progress (another process, or another thread) writes its items, then the
        # slots, then the header: step back over items the count does not cover yet
        while count <= n < self.index_num:
            p = F.ITEM.unpack_from(mm, base + n * F.ITEM_SIZE)[3]
            n = p if 0 <= p < n else 0
        if n <= 0 or n > count:
            return
        unpack = F.ITEM.unpack_from
        begin_ts = self.begin_ts
        while len(out) < max_num:
            h, phy, diff, prev = unpack(mm, base + n * F.ITEM_SIZE)
            if diff < 0:
                break
            t = begin_ts + diff * 1000
            if h == key_hash and begin <= t <= end:
                out.append(phy)
            if prev <= 0 or prev >= n or t < begin:  # items only link back: a damaged forward link ends the walk
                break
            n = prev

    def flush(self) -> None:
        """Write the header and fdatasync the file."""
        if self.read_only:
            return
        self.write_header()
        self.flush_data()

    def flush_data(self) -> None:
        """fdatasync the file, header left as it is on disk (a shard writer: the header is not its own)."""
        if self.read_only:
            return
        self.mf.wrote_position = self.mf.file_size
        self.mf.flush(0)

    def close(self) -> None:
        self._slots = None
        self._items = None
        self.mf.close()

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
