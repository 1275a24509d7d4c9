"""The index checks: every item of every index file (its hash chain and slot head, its record's
keys and store time), and every keyed record of the commitlog found by some item. Each finding
carries a :class:`RebuildIndex`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...format import index_file as IF
from ...format import message as M
from ..dispatch import extract_dispatch_columns
from ..index import IndexFile
from .context import LogFacts, Snapshot, VerifyContext, by_segment, file_pos
from .findings import Finding, RebuildIndex

_FIX = (RebuildIndex(),)


def check_index(ctx: VerifyContext, facts: LogFacts) -> None:
    """Every index file's items, then (when lag is judged) every keyed record's item."""
    store = ctx.store
    if not store.cfg.message_index_enable:
        return
    svc = store.index_service
    with svc.lock:
        ifiles = list(svc.files)
    all_phys, all_hashes = [], []
    for f in ifiles:
        ctx.progress.add(max(1, int(f.index_count)) * IF.ITEM_SIZE)
        p, h = check_index_file(ctx, f, facts.end)
        all_phys.append(p)
        all_hashes.append(h)
    if not facts.expected_keys or not ctx.snapshot.judge_lag:
        return
    ip = np.concatenate(all_phys) if all_phys else np.zeros(0, np.int64)
    ih = np.concatenate(all_hashes) if all_hashes else np.zeros(0, np.int64)
    check_index_coverage(ctx, facts.expected_keys, ip, ih)


def missing_key_finding(files, phy: int, key_hash: int) -> Finding:
    """A keyed record no sound index item finds."""
    path, pos = file_pos(files, phy)
    return Finding("index_item", path, pos, f"the record at {phy} has a key (hash {key_hash}) that no index item finds",
                   repairs=_FIX)


def check_index_coverage(ctx: VerifyContext, expected_keys: list, ip: np.ndarray, ih: np.ndarray) -> None:
    """Every (phy, hash) of ``expected_keys`` among the sound items' (``ip``, ``ih``)."""
    order = np.lexsort((ih, ip))
    ip, ih = ip[order], ih[order]
    for phys, hashes in expected_keys:
        lo = np.searchsorted(ip, phys, "left")
        hi = np.searchsorted(ip, phys, "right")
        found = np.zeros(phys.size, dtype=bool)
        width = int((hi - lo).max(initial=0))
        for k in range(width):
            j = lo + k
            inside = j < hi
            found |= inside & (ih[np.minimum(j, ih.size - 1)] == hashes)
        for i in np.flatnonzero(~found).tolist():
            ctx.found.add(missing_key_finding(ctx.files, int(phys[i]), int(hashes[i])))


@dataclass
class IndexItems:
    """The items 1..count-1 of an index file, as columns, with each item's number and position."""

    nums: np.ndarray
    phys: np.ndarray
    hashes: np.ndarray
    diffs: np.ndarray
    prevs: np.ndarray
    pos: np.ndarray

    @classmethod
    def read(cls, f: IndexFile, count: int) -> "IndexItems":
        items = np.frombuffer(f.mf.mm, dtype=IF.ITEM_DTYPE, count=count - 1, offset=IF.item_pos(f.slot_num, 1))
        nums = np.arange(1, count, dtype=np.int64)
        return cls(nums, items["phy_offset"].astype(np.int64), items["key_hash"].astype(np.int64),
                   items["time_diff"].astype(np.int64), items["prev_index"].astype(np.int64),
                   IF.item_pos(f.slot_num, 1) + (nums - 1) * IF.ITEM_SIZE)


def item_count(f: IndexFile, snapshot: Snapshot) -> int:
    """The items verify judges in ``f`` (a writer's snapshot may hold fewer than the file now)."""
    count = max(1, int(f.index_count))
    if snapshot.index_counts is not None:
        count = max(1, min(count, int(snapshot.index_counts.get(f.path, count))))
    return count


def check_index_file(ctx: VerifyContext, f: IndexFile, data_end: int) -> tuple[np.ndarray, np.ndarray]:
    """Findings for the items of ``f`` (records judged up to ``data_end``); returns the phys and
    hashes of its sound items."""
    count = item_count(f, ctx.snapshot)
    if count - 1 <= 0:
        empty = np.zeros(0, np.int64)
        return empty, empty
    it = IndexItems.read(f, count)
    bad, why = chain_problems(f, it)
    store = ctx.store
    live = it.phys >= store.commit_log.min_offset
    if store.read_only:
        live &= it.phys < data_end  # a reader judges only items inside its view
    rec_ok, rec_ts = record_matches(ctx, it, data_end)
    nb = (live & ~rec_ok) | (it.phys < 0)  # (below the commitlog's start: deleted records, unless negative)
    bad[nb] = True
    why[nb] = "it does not point at a complete record holding its key"
    expect = IF.time_diff_seconds(rec_ts, np.int64(f.begin_ts)).astype(np.int64)
    time_bad = live & rec_ok & (it.nums > 1) & (it.diffs != expect)
    bad[time_bad] = True
    why[time_bad] = "its time differs from its record's store time"
    for i in np.flatnonzero(bad).tolist():
        ctx.found.add(Finding("index_item", f.path, int(it.pos[i]),
                              f"item {int(it.nums[i])} (hash {int(it.hashes[i])}, phy {int(it.phys[i])}): {why[i]}",
                              repairs=_FIX))
    keep = ~bad
    return it.phys[keep], it.hashes[keep]


def chain_problems(f: IndexFile, it: IndexItems) -> tuple[np.ndarray, np.ndarray]:
    """Items outside their hash chain: each item of a slot, in item order, points at the previous
    one (the first of a slot in a file ends its chain: 0), and the slot points at the newest.
    Returns (bad, why) per item."""
    n = it.nums.size
    bad = np.zeros(n, dtype=bool)
    why = np.full(n, "", dtype=object)
    slot_of = it.hashes % f.slot_num
    order = np.lexsort((it.nums, slot_of))
    s_sorted = slot_of[order]
    first = np.ones(n, dtype=bool)
    first[1:] = s_sorted[1:] != s_sorted[:-1]
    expect_prev = np.zeros(n, dtype=np.int64)
    expect_prev[~first] = it.nums[order][np.flatnonzero(~first) - 1]
    cb = order[it.prevs[order] != expect_prev]
    bad[cb] = True
    why[cb] = "its prevIndex breaks its hash chain"
    slots = np.frombuffer(f.mf.mm, dtype=">i4", count=f.slot_num, offset=IF.HEADER_SIZE).astype(np.int64)
    last = np.ones(n, dtype=bool)
    last[:-1] = s_sorted[1:] != s_sorted[:-1]
    heads_ok = slots[s_sorted[last]] == it.nums[order][last]
    hb = order[last][~heads_ok]
    bad[hb] = True
    why[hb] = "its hash slot does not point at the newest item of the chain"
    return bad, why


def record_matches(ctx: VerifyContext, it: IndexItems, data_end: int) -> tuple[np.ndarray, np.ndarray]:
    """Per item: whether it points at a complete record (ending by ``data_end``) holding a key of
    its hash, and that record's store time."""
    store, phys, hashes = ctx.store, it.phys, it.hashes
    rec_ok = np.zeros(phys.size, dtype=bool)
    rec_ts = np.zeros(phys.size, dtype=np.int64)
    for seg, idx in by_segment(ctx.files, phys):
        rel = phys[idx] - seg.file_from_offset
        fits = rel + 91 <= seg.file_size
        idx, rel = idx[fits], rel[fits]
        if not idx.size:
            continue
        batch = M.decode_batch(seg.u8, rel)
        ok = batch.valid & (batch.phy_offset == phys[idx]) & (phys[idx] + batch.total <= data_end)
        sel = np.flatnonzero(ok)
        if sel.size:
            sub = batch.select(sel)
            cols = extract_dispatch_columns(seg.u8, sub, store.delay_levels_ms, ctx.topic_cache)
            rec_hash_ok = np.zeros(sel.size, dtype=bool)
            want = hashes[idx[sel]]
            if cols.item_rec.size:
                np.logical_or.at(rec_hash_ok, cols.item_rec, want[cols.item_rec] == cols.item_hash)
            ok[sel] = rec_hash_ok
            rec_ts[idx[sel]] = sub.store_timestamp
        rec_ok[idx] = ok
    return rec_ok, rec_ts


def index_file_problems(store, f: IndexFile) -> list[str]:
    """What is wrong with one index file, judged as verify judges items (each hash chain and slot
    head, each item against its record's keys and store time) plus items past the end of the
    data, its header (the first and last item's offsets) and the bytes after its last item (a
    count cut back by damage hides items there); empty when sound. For the open of a store whose
    index file changed since the last clean close."""
    ctx = VerifyContext.of(store)
    data_end = store.commit_log.confirm_offset
    check_index_file(ctx, f, data_end)
    out = [x.detail for x in ctx.found.result()]
    count = int(f.index_count)
    mm = f.mf.mm
    if count - 1 > 0 and not out:
        items = np.frombuffer(mm, dtype=IF.ITEM_DTYPE, count=count - 1, offset=IF.item_pos(f.slot_num, 1))
        phys = items["phy_offset"].astype(np.int64)
        past = np.flatnonzero(phys >= data_end)  # (verify lets a reader's view lag: not here)
        if past.size:
            out.append(f"item {int(past[0]) + 1} points at {int(phys[past[0]])}, past the end of the data {data_end}")
        first, last = int(phys[0]), int(phys[-1])
        if (f.begin_phy, f.end_phy) != (first, last):
            out.append(f"its header says offsets [{f.begin_phy}, {f.end_phy}], its items [{first}, {last}]")
    if count < f.index_num:
        rest = np.frombuffer(mm, dtype=np.uint8, offset=IF.item_pos(f.slot_num, count))
        if rest.any():
            out.append(f"bytes after its last item ({count - 1}) are not zero: its item count was cut back")
    return out
