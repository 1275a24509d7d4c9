"""Index files against the commitlog at open: where the index stops covering the commitlog, and
the keys of a record split across two index files that a crash lost."""
from __future__ import annotations

import logging

import numpy as np

from ...format import index_file as IF
from ...format import message as M
from .. import dispatch as D
from ..contract import StoreParts
from .index_tail import store_ts_reader, truncate_index_file

log = logging.getLogger(__name__)


def index_end_of(store: StoreParts, f) -> int:
    """The commitlog offset after the last record index file ``f`` covers (its TOTALSIZE read
    from the segment: this runs before recovery has set the readable end)."""
    phy = f.end_phy
    mf = store.commit_log.queue.find(phy)
    pos = phy - mf.file_from_offset if mf is not None else -1
    if mf is None or pos + 4 > mf.file_size:
        return phy
    total = M.I32.unpack_from(mf.mm, pos)[0]
    return phy + total if total >= M.MIN_RECORD_SIZE else phy


def keyed_records_in(store: StoreParts, start: int, stop: int) -> bool:
    """Whether a record with KEYS or UNIQ_KEY starts in ``[start, stop)`` of the commitlog."""
    cache: dict = {}
    for mf, batch in D.iter_record_batches(store.commit_log.queue, start, stop):
        if D.extract_dispatch_columns(mf.u8, batch, store.delay_levels_ms, cache).item_hash.size:
            return True
    return False


def index_end(store: StoreParts, end: int) -> int:
    """Where the index stops covering the commitlog: the record after the newest index file's
    last item (``end`` when that lies outside the data)."""
    f = store.index_service.files[-1]
    if not store.commit_log.min_offset <= f.end_phy < end:
        return end
    return min(index_end_of(store, f), end)


def complete_split_record(store: StoreParts, redispatch: int) -> int:
    """The record whose keys fill the last full index file may continue in the next file; a
    crash can lose that continuation (or the file), and the re-dispatch would skip the record
    (its offset equals the index's end offset). Its missing keys are put back here and what
    follows it is re-indexed. Returns the (possibly earlier) re-dispatch start."""
    svc = store.index_service
    cl = store.commit_log
    files = svc.files
    full = [i for i, f in enumerate(files) if f.is_write_full]
    if not full:
        return redispatch
    i = full[-1]
    prev_f = files[i]
    nxt = files[i + 1] if i + 1 < len(files) else None
    p = prev_f.end_phy
    mf = cl.queue.find(p)
    if p < cl.min_offset or p >= cl.confirm_offset or mf is None:
        return redispatch
    batch = M.decode_batch(mf.u8, np.array([p - mf.file_from_offset], dtype=np.int64))
    if not batch.valid[0] or int(batch.phy_offset[0]) != p or int(batch.sys_flag[0]) & 0xC == 0xC:
        return redispatch
    missing = _missing_keys(store, mf, batch, (prev_f, nxt))
    if not missing:
        return redispatch
    ts = int(batch.store_timestamp[0])
    if nxt is not None:
        truncate_index_file(nxt, p + 1, store_ts_reader(cl.queue.files), (prev_f.end_phy, prev_f.end_ts))
    else:
        svc.ensure_file()
        nxt = svc.files[-1]
    n = len(missing)
    nxt.put_batch(np.array(missing, dtype=np.int64), np.full(n, p, dtype=np.int64), np.full(n, ts, dtype=np.int64))
    nxt.flush()
    log.warning("%s: index: %d key(s) of the record at %d were lost with a crash and are indexed again",
                store.path, n, p)
    return min(redispatch, p)


def _missing_keys(store: StoreParts, mf, batch, pair: tuple) -> list[int]:
    """Key hashes of the one record of ``batch`` that neither index file of ``pair`` (the last
    full one, and the next or None) holds for it."""
    prev_f, nxt = pair
    p = int(batch.phy_offset[0])
    cols = D.extract_dispatch_columns(mf.u8, batch, store.delay_levels_ms, {})
    want = sorted(cols.item_hash.tolist())
    have = _last_item_hashes(prev_f, p) + (_first_item_hashes(nxt, p) if nxt else [])
    missing = list(want)
    for h in have:
        if h in missing:
            missing.remove(h)
    return missing


def _last_item_hashes(f, phy: int) -> list[int]:
    """Key hashes of the last items of index file ``f`` while they are for the record at ``phy``."""
    phys, hashes = _items_of(f)
    same = phys == phy
    k = len(same) - (int(np.argmin(same[::-1])) if not same.all() else len(same))
    return hashes[k:].astype(np.int64).tolist()


def _first_item_hashes(f, phy: int) -> list[int]:
    """Key hashes of the first items of index file ``f`` while they are for the record at ``phy``."""
    phys, hashes = _items_of(f)
    same = phys == phy
    k = int(np.argmin(same)) if not same.all() else len(same)
    return hashes[:k].astype(np.int64).tolist()


def _items_of(f) -> tuple[np.ndarray, np.ndarray]:
    """(phy offsets, key hashes) of index file ``f``'s items (item 0, unused, left out)."""
    count = max(1, int(f.index_count))
    items = np.frombuffer(f.mf.mm, dtype=IF.ITEM_DTYPE, count=count - 1, offset=IF.item_pos(f.slot_num, 1))
    return items["phy_offset"].astype(np.int64), items["key_hash"]
