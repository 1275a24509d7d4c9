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
    if isinstance(store_ts, np.ndarray) or isinstance(begin_ts, np.ndarray):
        d = np.clip((store_ts - begin_ts) // 1000, 0, 2**31 - 1)
        return np.where(np.asarray(begin_ts) <= 0, 0, d).astype(np.int32)
    if begin_ts <= 0:
        return 0
    return max(0, min((store_ts - begin_ts) // 1000, 2**31 - 1))
