"""Index files after a crash: their tail beyond the recovery point is cut (and rebuilt by the
re-dispatch) instead of the whole file being deleted as upstream does (quirk 15.14)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...format import index_file as IF
from ...format import message as M


def truncate_index_file(f, phy_limit: int, store_ts_at: Callable[[int], int], prev_end: tuple[int, int],
                        cut_point: tuple[int, int, int] | None = None) -> int:
    """Cut an index file back to its items for records below ``phy_limit`` (the re-dispatch start).

    Items are in commitlog order, so the kept items are a prefix. Slots that point at a cut item
    (or past the header's item count: a crash between the slot writes and the header write) are
    set to the newest kept item of their chain, which is the ``prevIndex`` of the oldest cut item
    in the slot. Header counts and end offsets are recomputed from the kept items. ``prev_end`` is
    ``(endPhyOffset, endTimestamp)`` of the previous file (a file left empty starts from there).
    ``cut_point`` is :func:`index_cut_point`'s answer when the caller has it already. Returns the
    number of items cut."""
    mm = f.mf.mm
    slots_n, cap = f.slot_num, f.index_num
    new_count, count, upper = cut_point if cut_point is not None else index_cut_point(f, phy_limit)
    if new_count == count and upper == count:
        return 0
    slots = np.frombuffer(mm, dtype=">i4", count=slots_n, offset=IF.HEADER_SIZE)
    items = np.frombuffer(mm, dtype=IF.ITEM_DTYPE, count=cap, offset=IF.item_pos(slots_n, 0))
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


def index_cut_point(f, phy_limit: int) -> tuple[int, int, int]:
    """``(kept, count, upper)`` of an index file cut at ``phy_limit``: the item count it keeps
    (1: none, item 0 is unused), its item count, and the end of the items written (past the
    count when a crash fell between the slot writes and the header write)."""
    slots_n, cap = f.slot_num, f.index_num
    count = max(1, min(int(f.index_count), cap))
    slots = np.frombuffer(f.mf.mm, dtype=">i4", count=slots_n, offset=IF.HEADER_SIZE)
    upper = max(count, min(cap, int(slots.max(initial=0)) + 1))
    items = np.frombuffer(f.mf.mm, dtype=IF.ITEM_DTYPE, count=count, offset=IF.item_pos(slots_n, 0))
    cut_at = np.flatnonzero(items["phy_offset"][1:count].astype(np.int64) >= phy_limit)
    del slots, items
    return (1 + int(cut_at[0]) if cut_at.size else count), count, upper


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

