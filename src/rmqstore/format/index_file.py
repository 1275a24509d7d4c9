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
#: bytes of an index file looked at in one step by :func:`infer_geometry` (views of the buffer, no copies)
SCAN_CHUNK = 1 << 20


def _last_nonzero(read, size: int, chunk: int) -> int:
    """Position of the last non-zero byte of the first ``size`` bytes, -1 when all are zero: read
    from the end backwards, ``chunk`` bytes at a time."""
    for end in range(size, 0, -chunk):
        start = max(0, end - chunk)
        nz = np.flatnonzero(np.frombuffer(read(start, end - start), dtype=np.uint8))
        if nz.size:
            return start + int(nz[-1])
    return -1


def _slot_owners(read, slots: int, index_count: int, chunk: int):
    """The slot naming each item (-1: none) from the slot table, read ``chunk`` bytes at a time;
    None when a slot names no item written (< 0 or >= ``index_count``), when two slots name one
    item (its key hash can fall in one slot only) or when no slot is used."""
    per = max(1, chunk // SLOT_SIZE)
    owner = np.full(index_count, -1, dtype=np.int32 if slots < 2**31 else np.int64)
    used = 0
    for a in range(0, slots, per):
        n = min(per, slots - a)
        vals = np.frombuffer(read(slot_pos(a), n * SLOT_SIZE), dtype=">i4")
        if vals.size != n or vals.min() < 0 or vals.max() >= index_count:
            return None
        nz = np.flatnonzero(vals)
        owner[vals[nz]] = nz + a
        used += nz.size
    return owner if used and np.count_nonzero(owner >= 0) == used else None  # fewer: an item named twice


def _key_hashes(read, slots: int, owner, want, chunk: int):
    """The key hashes of the items numbered ``want`` (sorted, unique), reading every item written
    ``chunk`` bytes at a time; None when an item's key hash is negative (item 0 aside) or does not
    fall in the slot that names it (``owner``)."""
    per = max(1, chunk // ITEM_SIZE)
    out = np.zeros(want.size, dtype=np.int64)
    for a in range(0, owner.size, per):
        n = min(per, owner.size - a)
        h = np.frombuffer(read(item_pos(slots, a), n * ITEM_SIZE), dtype=ITEM_DTYPE)["key_hash"]
        body = h[1:] if a == 0 else h
        if h.size != n or (body.size and body.min() < 0):
            return None
        mine = owner[a:a + n]
        if not ((h.astype(np.int64) % slots == mine) | (mine < 0)).all():
            return None
        lo, hi = np.searchsorted(want, [a, a + n])
        out[lo:hi] = h[want[lo:hi] - a]
    return out


def fits(read, slots: int, index_count: int, chunk: int = SCAN_CHUNK) -> bool:
    """:func:`geometry_fits` through ``read(pos, n)`` (the bytes ``[pos, pos + n)`` of the file):
    the slots and the items written are read ``chunk`` bytes at a time, the newest
    :data:`GEOMETRY_CHECK_ITEMS` items at once; what is kept is the slot naming each item (4 bytes
    an item) and the items the newest items chain to."""
    if slots <= 0 or index_count < 2:
        return False
    owner = _slot_owners(read, slots, index_count, chunk)
    if owner is None:
        return False
    first = max(1, index_count - GEOMETRY_CHECK_ITEMS)
    k = np.arange(first, index_count)
    newest = np.frombuffer(read(item_pos(slots, first), k.size * ITEM_SIZE), dtype=ITEM_DTYPE)
    if newest.size != k.size:
        return False
    prev = newest["prev_index"].astype(np.int64)
    if (prev < 0).any() or (prev >= k).any():
        return False
    chained = prev > 0
    want = np.unique(prev[chained])
    hashes = _key_hashes(read, slots, owner, want, chunk)
    if hashes is None:
        return False
    mine = newest["key_hash"][chained].astype(np.int64)
    return bool(np.array_equal(hashes[np.searchsorted(want, prev[chained])] % slots, mine % slots))


def geometry_fits(buf, slots: int, index_count: int) -> bool:
    """Whether the used part of an index file reads consistently with ``slots`` slots: every slot
    names an item written (< ``index_count``) whose key hash falls in that slot, every item written
    has a key hash >= 0, and every checked item chains to an older item of its own slot."""
    with memoryview(buf) as view:
        return fits(lambda pos, n: view[pos:pos + n], slots, index_count)


def geometry_of(read, size: int, chunk: int = SCAN_CHUNK) -> tuple[int, int] | None:
    """``(slots, items)`` of an index file of ``size`` bytes read through ``read(pos, n)``, or None
    when its contents do not tell (no item written, or no geometry reads consistently).

    The file is preallocated with zeros and items are written in order, so the last used item
    (number ``indexCount - 1``) ends within 20 bytes after the last non-zero byte, found reading
    backwards from the end ``chunk`` bytes at a time; with ``size = 40 + 4*slots + 20*items`` that
    leaves one candidate, checked by :func:`fits`. The one rule for local files
    (:func:`infer_geometry`) and remote ones (``rmqstore.spark.fs``)."""
    if size < HEADER_SIZE:
        return None
    head = read(0, HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        return None
    index_count = HEADER.unpack_from(head, 0)[5]
    last = _last_nonzero(read, size, chunk)
    if index_count < 2 or last < HEADER_SIZE:
        return None
    for end in range(last + 1, last + ITEM_SIZE + 1):  # the end of the last used item
        room = end - HEADER_SIZE - index_count * ITEM_SIZE  # = 4 * slots
        if room <= 0 or room % SLOT_SIZE or (size - end) % ITEM_SIZE:
            continue
        slots = room // SLOT_SIZE
        items = (size - HEADER_SIZE - room) // ITEM_SIZE
        if items >= index_count and fits(read, slots, index_count, chunk):
            return slots, items
    return None


def infer_geometry(buf, size: int) -> tuple[int, int] | None:
    """``(slots, items)`` of an index file of ``size`` bytes held in ``buf`` (a mapping, bytes), or
    None when they do not tell: :func:`geometry_of` over views of ``buf``."""
    with memoryview(buf) as view:
        return geometry_of(lambda pos, n: view[pos:pos + n], size)
