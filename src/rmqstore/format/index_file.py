"""IndexFile codec (FORMAT.md §6.1).

Size ``40 + slots*4 + items*20``, big-endian::

    header (40 bytes)
      0   i64 beginTimestamp     8   i64 endTimestamp
      16  i64 beginPhyOffset     24  i64 endPhyOffset
      32  i32 hashSlotCount      36  i32 indexCount (next item number; starts at 1)
    slots at 40: i32 item number of the newest item in the slot (0 = empty)
    items at 40 + slots*4 + n*20, n >= 1 (item 0 is never written):
      0 i32 keyHash (>= 0)   4 i64 phyOffset   12 i32 timeDiff (seconds)   16 i32 prevIndex
"""
from __future__ import annotations

import struct

import numpy as np

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
assert HEADER.size == HEADER_SIZE
SLOT = struct.Struct(">i")
SLOT_SIZE = 4
ITEM = struct.Struct(">iqii")
ITEM_SIZE = 20
assert ITEM.size == ITEM_SIZE
ITEM_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
assert ITEM_DTYPE.itemsize == ITEM_SIZE

BEGIN_TS_POS, END_TS_POS, BEGIN_PHY_POS, END_PHY_POS, SLOT_COUNT_POS, INDEX_COUNT_POS = 0, 8, 16, 24, 32, 36


def file_size(slots: int, items: int) -> int:
    return HEADER_SIZE + slots * SLOT_SIZE + items * ITEM_SIZE


def slot_pos(slot: int) -> int:
    return HEADER_SIZE + slot * SLOT_SIZE


def item_pos(slots: int, n: int) -> int:
    return HEADER_SIZE + slots * SLOT_SIZE + n * ITEM_SIZE


def time_diff_seconds(store_ts, begin_ts):
    """``(store - begin) / 1000`` in whole seconds, 0 when begin <= 0, clamped to [0, 2**31-1].

    Java truncates toward zero where ``//`` floors, but the two differ only for negative
    differences, which are clamped to 0 anyway. Works on ints and numpy int64 arrays."""
    if isinstance(begin_ts, np.ndarray):
        d = np.clip((store_ts - begin_ts) // 1000, 0, 2**31 - 1)
        return np.where(np.asarray(begin_ts) <= 0, 0, d).astype(np.int32)
    if isinstance(store_ts, np.ndarray):  # (one begin time: np.clip's checks cost more than the work)
        if begin_ts <= 0:
            return np.zeros(store_ts.shape, dtype=np.int32)
        d = (store_ts - begin_ts) // 1000
        return np.minimum(np.maximum(d, 0, out=d), 2**31 - 1, out=d).astype(np.int32)
    if begin_ts <= 0:
        return 0
    return max(0, min((store_ts - begin_ts) // 1000, 2**31 - 1))


#: how many of the newest items :func:`infer_geometry` checks (all the used slots are checked)
GEOMETRY_CHECK_ITEMS = 1 << 16


def _last_nonzero(buf, size: int, chunk: int = 1 << 20) -> int:
    """Position of the last non-zero byte of ``buf[:size]``, -1 when all are zero."""
    view = np.frombuffer(buf, dtype=np.uint8, count=size)
    for end in range(size, 0, -chunk):
        part = view[max(0, end - chunk):end]
        nz = np.flatnonzero(part)
        if nz.size:
            return end - part.size + int(nz[-1])
    return -1


def geometry_fits(buf, slots: int, index_count: int) -> bool:
    """Whether the used part of an index file reads consistently with ``slots`` slots: every slot
    names an item written (< ``index_count``) whose key hash falls in that slot, and every checked
    item chains to an older item of its own slot."""
    if slots <= 0 or index_count < 2:
        return False
    slot_vals = np.frombuffer(buf, dtype=">i4", count=slots, offset=HEADER_SIZE)
    items = np.frombuffer(buf, dtype=ITEM_DTYPE, count=index_count, offset=item_pos(slots, 0))
    hashes = items["key_hash"].astype(np.int64)
    if slot_vals.min() < 0 or slot_vals.max() >= index_count or hashes[1:].min() < 0:
        return False
    used = np.flatnonzero(slot_vals)
    if used.size == 0 or not np.array_equal(hashes[slot_vals[used]] % slots, used):
        return False
    k = np.arange(max(1, index_count - GEOMETRY_CHECK_ITEMS), index_count)
    prev = items["prev_index"][k].astype(np.int64)
    if (prev < 0).any() or (prev >= k).any():
        return False
    chained = prev > 0
    return bool(np.array_equal(hashes[prev[chained]] % slots, hashes[k[chained]] % slots))


def infer_geometry(buf, size: int) -> tuple[int, int] | None:
    """``(slots, items)`` of an index file of ``size`` bytes from its contents, or None when they do
    not tell (no item written, or no geometry reads consistently).

    The file is preallocated with zeros and items are written in order, so the last used item
    (number ``indexCount - 1``) ends within 20 bytes after the last non-zero byte; with
    ``size = 40 + 4*slots + 20*items`` that leaves one candidate, checked by :func:`geometry_fits`."""
    if size < HEADER_SIZE:
        return None
    index_count = HEADER.unpack_from(buf, 0)[5]
    last = _last_nonzero(buf, size)
    if index_count < 2 or last < HEADER_SIZE:
        return None
    for end in range(last + 1, last + ITEM_SIZE + 1):  # the end of the last used item
        room = end - HEADER_SIZE - index_count * ITEM_SIZE  # = 4 * slots
        if room <= 0 or room % SLOT_SIZE or (size - end) % ITEM_SIZE:
            continue
        slots = room // SLOT_SIZE
        items = (size - HEADER_SIZE - room) // ITEM_SIZE
        if items >= index_count and geometry_fits(buf, slots, index_count):
            return slots, items
    return None
