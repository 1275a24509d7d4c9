"""Store verification: what ``MessageStore.verify(fix=False)`` checks, as :class:`Finding` objects.

A finding names a file and a byte offset *inside that file* (for a commitlog segment, whose name is
its first phy offset, the phy offset is ``int(name) + offset``), so ``path`` + ``offset`` always
locate the bytes. ``verify`` never raises for damage it finds; it returns the list (empty when the
store is sound). Kinds (:data:`KINDS`):

``record_crc``
    A commitlog record whose framing is intact but whose body CRC (or, with
    ``forceVerifyPropCRC``, properties CRC) fails, or whose end is zero-filled (a torn write).
``record_invalid``
    Bytes inside the valid data that do not form a record at all (bad magic, length or
    PHYSICALOFFSET); valid records follow them.
``cq_unit``
    A consume-queue unit that does not point at a complete record of its topic, queue id, queue
    offset and size, or whose tagsCode differs from the one the record's TAGS give.
``cq_gap``
    Queue offsets with no unit (records of the queue in the commitlog beyond the queue's last unit),
    or queue offsets that jump between consecutive records of a queue in the commitlog.
``index_item``
    An index item that points at no record, at a record without that key, with a time that does
    not match the record, or outside its hash chain; or a keyed record the index cannot find.
``checkpoint_ahead``
    A checkpoint value beyond the data: confirmPhyOffset past the last valid record,
    physicMsgTimestamp / logicsMsgTimestamp past the newest record's store time, indexMsgTimestamp
    past the newest index file.
``tail_garbage``
    Non-zero bytes after the end of valid data (what a recovery cuts).

``fix=True`` (a writer only) rebuilds from the commitlog the consume queues and the index that
findings name (:func:`rebuild_derived`, the same dispatch code as the writer), rewrites a checkpoint
that is ahead, and cuts tail garbage (saving it under ``recovery/`` as recovery does). Damaged
commitlog records cannot be rebuilt: they stay reported with ``fixed=False`` and reads refuse them.

Limits: at most :data:`MAX_PER_KIND` findings of a kind are listed (then one summary finding);
the index check holds the phy offsets and hashes of all index items and of all keys of the scanned
records in memory (16 bytes each).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import ReadOnlyStoreError, StoreIOError
from ..format import consume_queue as CQF
from ..format import index_file as IF
from ..format import message as M
from ..io.mapped_file import MappedFile
from . import recovery as R
from .checkpoint import StoreCheckpoint
from .consume_queue import ConsumeQueue
from .dispatch import dispatch_batch, extract_dispatch_columns, queue_groups
from .index import IndexFile, IndexService
from ..io import paths

log = logging.getLogger(__name__)

KINDS = ("record_crc", "record_invalid", "cq_unit", "cq_gap", "index_item", "checkpoint_ahead", "tail_garbage")
MAX_PER_KIND = 1000
_TX_NO_CQ = (M.TX_PREPARED, M.TX_ROLLBACK)


@dataclass(frozen=True)
class Finding:
    kind: str
    path: str | None
    offset: int | None
    detail: str
    fixed: bool = False


class _Findings:
    def __init__(self):
        self.items: list[Finding] = []
        self.counts: dict[str, int] = {}

    def add(self, kind: str, path: str | None, offset: int | None, detail: str) -> None:
        assert kind in KINDS, kind
        n = self.counts.get(kind, 0) + 1
        self.counts[kind] = n
        if n <= MAX_PER_KIND:
            self.items.append(Finding(kind, path, offset, detail))

    def result(self) -> list[Finding]:
        out = list(self.items)
        for kind, n in self.counts.items():
            if n > MAX_PER_KIND:
                out.append(Finding(kind, None, None, f"{n - MAX_PER_KIND} more {kind} findings not listed"))
        return out


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------

def _segments(files, phys: np.ndarray):
    """Group phy offsets by commitlog segment: yields (segment, indexes into phys)."""
    if not files or phys.size == 0:
        return
    first, size = files[0].file_from_offset, files[0].file_size
    seg = np.where(phys >= first, (phys - first) // size, -1)
    ok = (seg >= 0) & (seg < len(files))
    for s in np.unique(seg[ok]).tolist():
        yield files[s], np.flatnonzero(ok & (seg == s))


def file_pos(files, phy: int) -> tuple[str | None, int]:
    if files:
        first, size = files[0].file_from_offset, files[0].file_size
        i = (phy - first) // size
        if 0 <= i < len(files):
            return files[i].path, phy - files[i].file_from_offset
    return None, phy


# ------------------------------------------------------------------------------------------------
# The checks
# ------------------------------------------------------------------------------------------------

def work_bytes(store) -> int:
    """What a verify's progress counts up to: the commitlog's bytes, then every consume queue's
    written units, then every index file's items (``progress(done)`` covers every phase)."""
    cl = store.commit_log
    cqs = sum(mf.wrote_position for cq in list(store.consume_queues.values()) for mf in list(cq.queue.files))
    ix = sum(max(1, int(f.index_count)) * IF.ITEM_SIZE for f in list(store.index_service.files))
    return max(0, cl.confirm_offset - cl.min_offset) + cqs + ix


class LogChecks:
    """The checks made on every batch of commitlog records, on their own (no store needed): queue
    offsets run on without a gap per queue (``cq_gap`` findings), the first record at or beyond each
    queue's end (``cq_hi``), and the index keys each record must be found by. :class:`Verifier` runs
    them over the whole log; the Spark verify over one span per task (``files`` only name positions:
    objects with ``file_from_offset``, ``file_size`` and ``path``)."""

    def __init__(self, files, cfg, delay_levels_ms, cq_hi: dict | None = None):
        self.files = files
        self.cfg = cfg
        self.delay_levels_ms = delay_levels_ms
        self.cq_hi: dict[tuple[str, int], int] = cq_hi if cq_hi is not None else {}
        self.f = _Findings()
        self.topic_cache: dict[bytes, str] = {}
        # per (topic, queue id): last queue offset seen in the commitlog, and its phy offset
        self.queue_last: dict[tuple[str, int], tuple[int, int]] = {}
        # per queue: the first record (queue offset, phy offset) at or beyond the queue's end
        self.first_beyond: dict[tuple[str, int], tuple[int, int]] = {}
        self.expected_keys: list[tuple[np.ndarray, np.ndarray]] = []   # (phys, hashes) of keyed records

    def on_batch(self, mf, batch: M.RecordBatch) -> None:
        cols = extract_dispatch_columns(mf.u8, batch, self.delay_levels_ms, self.topic_cache)
        tx = batch.sys_flag & M.SYSFLAG_TX_MASK
        for topic, qid, grp in queue_groups(batch, cols):
            i0 = int(grp[0])
            qk = (topic, qid)
            qo = batch.queue_offset[grp]
            prev = self.queue_last.get(qk)
            expect_first = prev[0] + 1 if prev else None
            jumps = np.flatnonzero(np.diff(qo) != 1)
            if expect_first is not None and int(qo[0]) != expect_first:
                self.record_gap(qk, prev[0], int(qo[0]), prev[1], int(batch.phy_offset[i0]))
            for j in jumps.tolist():
                self.record_gap(qk, int(qo[j]), int(qo[j + 1]), int(batch.phy_offset[grp[j]]),
                                int(batch.phy_offset[grp[j + 1]]))
            self.queue_last[qk] = (int(qo[-1]), int(batch.phy_offset[grp[-1]]))
            if qk not in self.first_beyond:
                beyond = np.flatnonzero(qo >= self.cq_hi.get(qk, 0))
                if beyond.size:
                    j = int(beyond[0])
                    self.first_beyond[qk] = (int(qo[j]), int(batch.phy_offset[grp[j]]))
        if self.cfg.message_index_enable and cols.item_rec.size:
            keep = (tx[cols.item_rec] != M.TX_ROLLBACK)
            self.expected_keys.append((batch.phy_offset[cols.item_rec[keep]].astype(np.int64),
                                       cols.item_hash[keep].astype(np.int64)))

    def record_gap(self, qk, a: int, b: int, phy_a: int, phy_b: int) -> None:
        path, pos = file_pos(self.files, phy_b)
        self.f.add("cq_gap", path, pos, f"queue {qk[0]}/{qk[1]}: queue offset jumps from {a} (record at {phy_a}) "
                                        f"to {b} (record at {phy_b}) in the commitlog")


class Verifier(LogChecks):
    def __init__(self, store, progress: Callable[[int], None] | None):
        super().__init__(list(store.commit_log.queue.files), store.cfg, store.delay_levels_ms)
        self.store = store
        self._done_before = 0  # bytes of the phases already finished (progress counts across phases)
        self.cl = store.commit_log
        self.progress = progress
        self.rebuild_queues: set[tuple[str, int]] = set()
        self.rebuild_index = False
        self.scan: R.ScanResult | None = None
        self.data_end = 0
        # consume queues / index behind the commitlog are damage only when no recovery is due: a
        # writer has dispatched everything; a reader of a crashed or live store has not
        self.judge_lag = not store.read_only or not os.path.exists(paths.abort_path(store.path))
        # A consistent snapshot: for a writer, dispatch is paused while the end of dispatched data,
        # every queue's end and every index file's item count are taken together.
        if store.read_only:
            self.limit = None
            self.cq_hi = {k: cq.max_offset for k, cq in store.consume_queues.items()}
            self.index_counts = None
        else:
            with store.reput.lock, store.cq_lock:
                self.limit = store.reput.reput_from
                self.cq_hi = {k: cq.max_offset for k, cq in store.consume_queues.items()}
                with store.index_service.lock:
                    self.index_counts = {f.path: f.index_count for f in store.index_service.files}

    def _advance(self, within_phase: int) -> None:
        if self.progress is not None:
            self.progress(self._done_before + within_phase)

    # --- commitlog ---------------------------------------------------------------------------
    def check_commitlog(self) -> None:
        cl, files = self.cl, self.files
        if not files:
            return
        start = cl.min_offset
        limit = self.limit
        base = start
        prog = (lambda phy: self._advance(max(0, phy - base))) if self.progress else None
        scan = R.scan_log(files, start, self.cfg, check_crc=True, limit_phy=limit, on_batch=self.on_batch,
                          dispatchable=True, progress=prog)
        self.scan = scan
        self._done_before = max(0, self.cl.confirm_offset - base)
        self._advance(0)
        for s in scan.corrupt:
            path, pos = file_pos(files, s.offset)
            self.f.add(s.kind, path, pos, f"{s.reason}: {s.length} bytes at commitlog offset {s.offset} (kept, "
                                          "never served)")
        self.data_end = scan.end
        if limit is not None and scan.end < limit:
            path, pos = file_pos(files, scan.end)
            kind = "record_crc" if "CRC" in scan.reason or "incomplete" in scan.reason else "record_invalid"
            self.f.add(kind, path, pos, f"{scan.reason}: the store holds data up to {limit} but valid records end "
                                        f"at {scan.end}")

    # --- consume queues ----------------------------------------------------------------------
    def check_consume_queues(self) -> None:
        store, files = self.store, self.files
        end = self.data_end
        check_tail = self.judge_lag
        for key in sorted(self.cq_hi):
            cq = store.consume_queues.get(key)
            if cq is None:
                continue
            topic, qid = key
            lo, hi = cq.min_offset, self.cq_hi[key]
            for mf in list(cq.queue.files):
                self._done_before += mf.wrote_position
                self._advance(0)
                q_first = mf.file_from_offset // CQF.UNIT_SIZE
                n = mf.wrote_position // CQF.UNIT_SIZE
                a, b = max(lo, q_first), min(hi, q_first + n)
                if a >= b:
                    continue
                units = np.frombuffer(mf.mm, dtype=CQF.UNIT_DTYPE, count=b - a, offset=(a - q_first) * CQF.UNIT_SIZE)
                phys = units["phy_offset"].astype(np.int64)
                sizes = units["size"].astype(np.int64)
                tags = units["tags_code"].astype(np.int64)
                qs = np.arange(a, b, dtype=np.int64)
                ok = R.units_match(files, end, phys, sizes, qs, topic, qid)
                for j in np.flatnonzero(~ok).tolist():
                    self.rebuild_queues.add(key)
                    self.f.add("cq_unit", mf.path, int(qs[j] - q_first) * CQF.UNIT_SIZE,
                               f"unit {int(qs[j])} of {topic}/{qid} (phy {int(phys[j])}, size {int(sizes[j])}) does "
                               "not point at a complete record of this topic, queue and offset")
                good = np.flatnonzero(ok)
                if good.size:
                    self._check_tags(mf, q_first, key, qs[good], phys[good], tags[good])
        if check_tail:
            for key, (q, phy) in sorted(self.first_beyond.items()):
                last = self.queue_last[key][0]
                self.rebuild_queues.add(key)
                path, pos = file_pos(self.files, phy)
                where = (f"the consume queue ends at {self.cq_hi[key]}" if key in self.cq_hi
                         else "there is no consume queue")
                self.f.add("cq_gap", path, pos, f"queue {key[0]}/{key[1]}: the record at {phy} has queue offset {q} "
                                                f"(the commitlog holds offsets up to {last}) but {where}")

    def _check_tags(self, mf, q_first: int, key, qs, phys, tags) -> None:
        for seg, idx in _segments(self.files, phys):
            batch = M.decode_batch(seg.u8, phys[idx] - seg.file_from_offset)
            cols = extract_dispatch_columns(seg.u8, batch, self.store.delay_levels_ms, self.topic_cache)
            bad = np.flatnonzero(cols.tags_codes != tags[idx])
            for j in bad.tolist():
                q = int(qs[idx[j]])
                self.rebuild_queues.add(key)
                self.f.add("cq_unit", mf.path, (q - q_first) * CQF.UNIT_SIZE,
                           f"unit {q} of {key[0]}/{key[1]} has tagsCode {int(tags[idx[j]])}, its record's TAGS give "
                           f"{int(cols.tags_codes[j])}")

    # --- index -------------------------------------------------------------------------------
    def check_index(self) -> None:
        if not self.cfg.message_index_enable:
            return
        svc = self.store.index_service
        with svc.lock:
            ifiles = list(svc.files)
        all_phys, all_hashes = [], []
        for f in ifiles:
            self._done_before += max(1, int(f.index_count)) * IF.ITEM_SIZE
            self._advance(0)
            p, h = self.check_index_file(f)
            all_phys.append(p)
            all_hashes.append(h)
        if not self.expected_keys or not self.judge_lag:
            return
        ip = np.concatenate(all_phys) if all_phys else np.zeros(0, np.int64)
        ih = np.concatenate(all_hashes) if all_hashes else np.zeros(0, np.int64)
        order = np.lexsort((ih, ip))
        ip, ih = ip[order], ih[order]
        for phys, hashes in self.expected_keys:
            lo = np.searchsorted(ip, phys, "left")
            hi = np.searchsorted(ip, phys, "right")
            found = np.zeros(phys.size, dtype=bool)
            width = int((hi - lo).max(initial=0))
            for k in range(width):
                j = lo + k
                inside = j < hi
                found |= inside & (ih[np.minimum(j, ih.size - 1)] == hashes)
            for i in np.flatnonzero(~found).tolist():
                phy = int(phys[i])
                self.rebuild_index = True
                path, pos = file_pos(self.files, phy)
                self.f.add("index_item", path, pos, f"the record at {phy} has a key (hash {int(hashes[i])}) that no "
                                                    "index item finds")

    def check_index_file(self, f: IndexFile) -> tuple[np.ndarray, np.ndarray]:
        mm = f.mf.mm
        count = max(1, int(f.index_count))
        if self.index_counts is not None:
            count = max(1, min(count, int(self.index_counts.get(f.path, count))))
        n = count - 1
        empty = np.zeros(0, np.int64)
        if n <= 0:
            return empty, empty
        items = np.frombuffer(mm, dtype=IF.ITEM_DTYPE, count=n, offset=IF.item_pos(f.slot_num, 1))
        phys = items["phy_offset"].astype(np.int64)
        hashes = items["key_hash"].astype(np.int64)
        diffs = items["time_diff"].astype(np.int64)
        prevs = items["prev_index"].astype(np.int64)
        nums = np.arange(1, count, dtype=np.int64)
        item_pos = IF.item_pos(f.slot_num, 1) + (nums - 1) * IF.ITEM_SIZE
        min_phy = self.cl.min_offset
        live = phys >= min_phy
        if self.store.read_only:
            live &= phys < self.data_end  # a reader judges only items inside its view
        bad = np.zeros(n, dtype=bool)
        why = np.full(n, "", dtype=object)
        # chain structure: items of a slot, in item order, each pointing at the previous one
        slot_of = hashes % f.slot_num
        order = np.lexsort((nums, slot_of))
        s_sorted = slot_of[order]
        first = np.ones(n, dtype=bool)
        first[1:] = s_sorted[1:] != s_sorted[:-1]
        expect_prev = np.zeros(n, dtype=np.int64)
        expect_prev[~first] = nums[order][np.flatnonzero(~first) - 1]
        got_prev = prevs[order]
        chain_bad = got_prev != expect_prev  # the first item of a slot in a file ends its chain (0)
        cb = order[chain_bad]
        bad[cb] = True
        why[cb] = "its prevIndex breaks its hash chain"
        slots = np.frombuffer(mm, dtype=">i4", count=f.slot_num, offset=IF.HEADER_SIZE).astype(np.int64)
        last = np.ones(n, dtype=bool)
        last[:-1] = s_sorted[1:] != s_sorted[:-1]
        heads_ok = slots[s_sorted[last]] == nums[order][last]
        hb = order[last][~heads_ok]
        bad[hb] = True
        why[hb] = "its hash slot does not point at the newest item of the chain"
        # each item against its record
        rec_ok = np.zeros(n, dtype=bool)
        rec_ts = np.zeros(n, dtype=np.int64)
        for seg, idx in _segments(self.files, phys):
            rel = phys[idx] - seg.file_from_offset
            fits = rel + 91 <= seg.file_size
            idx, rel = idx[fits], rel[fits]
            if not idx.size:
                continue
            batch = M.decode_batch(seg.u8, rel)
            ok = batch.valid & (batch.phy_offset == phys[idx]) & (phys[idx] + batch.total <= self.data_end)
            sel = np.flatnonzero(ok)
            if sel.size:
                sub = R.take_idx(batch, sel)
                cols = extract_dispatch_columns(seg.u8, sub, self.store.delay_levels_ms, self.topic_cache)
                rec_hash_ok = np.zeros(sel.size, dtype=bool)
                want = hashes[idx[sel]]
                if cols.item_rec.size:
                    np.logical_or.at(rec_hash_ok, cols.item_rec, want[cols.item_rec] == cols.item_hash)
                ok[sel] = rec_hash_ok
                rec_ts[idx[sel]] = sub.store_timestamp
            rec_ok[idx] = ok
        nb = (live & ~rec_ok) | (phys < 0)  # (below the commitlog's start: deleted records, unless negative)
        bad[nb] = True
        why[nb] = "it does not point at a complete record holding its key"
        expect = IF.time_diff_seconds(rec_ts, np.int64(f.begin_ts)).astype(np.int64)
        time_bad = live & rec_ok & (nums > 1) & (diffs != expect)
        bad[time_bad] = True
        why[time_bad] = "its time differs from its record's store time"
        for i in np.flatnonzero(bad).tolist():
            self.rebuild_index = True
            self.f.add("index_item", f.path, int(item_pos[i]),
                       f"item {int(nums[i])} (hash {int(hashes[i])}, phy {int(phys[i])}): {why[i]}")
        keep = ~bad
        return phys[keep], hashes[keep]

    # --- checkpoint and tail -----------------------------------------------------------------
    def check_checkpoint(self) -> dict[str, int]:
        """Findings for values ahead of the data; returns the corrections a fix would write."""
        store = self.store
        path = paths.checkpoint_path(store.path)
        if not os.path.exists(path):
            return {}
        cp = StoreCheckpoint.read_file(path)
        fixes: dict[str, int] = {}
        scan = self.scan
        max_ts = scan.max_store_timestamp if scan else 0
        last_valid = scan.last_valid if scan else -1
        if scan is not None and cp.confirm_phy_offset > max(last_valid, 0):
            fixes["confirm_phy_offset"] = max(last_valid, 0)
            self.f.add("checkpoint_ahead", path, 32, f"confirmPhyOffset {cp.confirm_phy_offset} is past the last valid "
                                                     f"record at {last_valid}")
        for name, pos in (("physic_msg_timestamp", 0), ("logics_msg_timestamp", 8)):
            v = getattr(cp, name)
            if scan is not None and v > max_ts:
                fixes[name] = max_ts
                self.f.add("checkpoint_ahead", path, pos, f"{name} {v} is past the newest record's store time {max_ts}")
        with store.index_service.lock:
            ends = [f.end_ts for f in store.index_service.files]
        idx_max = max(ends, default=0)
        if cp.index_msg_timestamp > idx_max:
            fixes["index_msg_timestamp"] = idx_max
            self.f.add("checkpoint_ahead", path, 16, f"indexMsgTimestamp {cp.index_msg_timestamp} is past the newest "
                                                    f"index file's end time {idx_max}")
        return fixes

    def check_tail(self) -> list:
        files = self.files
        if not files:
            return []
        if self.store.read_only:
            end = self.data_end
        else:
            end = max(self.cl.confirm_offset, self.cl.queue.max_offset)
        ext = R.tail_extents(files, end, R.max_record_size(self.cfg) + 4096)
        for mf, a, b in ext:
            first = a + int(np.flatnonzero(mf.u8[a:b])[0])
            self.f.add("tail_garbage", mf.path, first, f"non-zero bytes in [{mf.file_from_offset + first}, "
                                                       f"{mf.file_from_offset + b}) after the end of valid data "
                                                       f"at {mf.file_from_offset + a}")
        return ext


def index_file_problems(store, f: IndexFile) -> list[str]:
    """What is wrong with one index file, judged as :func:`verify_store` judges items (each hash
    chain and slot head, each item against its record's keys and store time) plus items past the
    end of the data, its header (the first and last item's offsets) and the bytes after its last
    item (a count cut back by damage hides items there); empty when sound. For the open of a
    store whose index file changed since the last clean close."""
    v = Verifier(store, None)
    v.data_end = store.commit_log.confirm_offset
    v.check_index_file(f)
    out = [x.detail for x in v.f.result()]
    count = int(f.index_count)
    n = count - 1
    mm = f.mf.mm
    if n > 0 and not out:
        items = np.frombuffer(mm, dtype=IF.ITEM_DTYPE, count=n, offset=IF.item_pos(f.slot_num, 1))
        phys = items["phy_offset"].astype(np.int64)
        past = np.flatnonzero(phys >= v.data_end)  # (verify lets a reader's view lag: not here)
        if past.size:
            out.append(f"item {int(past[0]) + 1} points at {int(phys[past[0]])}, past the end of the data {v.data_end}")
        first, last = int(phys[0]), int(phys[-1])
        if (f.begin_phy, f.end_phy) != (first, last):
            out.append(f"its header says offsets [{f.begin_phy}, {f.end_phy}], its items [{first}, {last}]")
    if count < f.index_num:
        rest = np.frombuffer(mm, dtype=np.uint8, offset=IF.item_pos(f.slot_num, count))
        if rest.any():
            out.append(f"bytes after its last item ({count - 1}) are not zero: its item count was cut back")
    return out


def verify_store(store, fix: bool = False, progress: Callable[[int], None] | None = None) -> list[Finding]:
    """Run every check (see the module doc); with ``fix``, repair what the commitlog can rebuild."""
    if fix and store.read_only:
        raise ReadOnlyStoreError("verify(fix=True) needs the store opened for writing", path=store.path)
    if not store.read_only:
        store.wait_dispatched(timeout=120)
    else:
        store.refresh()
    t0 = time.monotonic()
    with store.maintenance_lock:
        v = Verifier(store, progress)
        lock = store.commit_log.put_lock if not store.read_only else _NoLock()
        v.check_commitlog()
        v.check_consume_queues()
        v.check_index()
        cp_fixes = v.check_checkpoint()
        with lock:
            ext = v.check_tail()
            findings = v.f.result()
            if not fix:
                log.info("%s: verify found %d problems in %.2fs", store.path, len(findings), time.monotonic() - t0)
                return findings
            fixed_kinds: set[str] = set()
            if ext:
                cuts = R.save_cuts(store.path, ext, "verify: bytes after the end of valid data", True)
                for mf, a, b in ext:
                    mf.zero_from(a, b)
                    mf.flush(0)
                log.warning("%s: verify cut %d tail extents: %s", store.path, len(cuts), [c.saved_to for c in cuts])
                fixed_kinds.add("tail_garbage")
        if cp_fixes:
            vals = dataclasses.replace(StoreCheckpoint.read_file(store.checkpoint.path), **cp_fixes)
            for k, val in cp_fixes.items():
                setattr(store.checkpoint.values, k, min(getattr(store.checkpoint.values, k), val))
            store.checkpoint.flush(vals)
            fixed_kinds.add("checkpoint_ahead")
        if v.rebuild_queues or v.rebuild_index:
            rebuild_derived(store, v.rebuild_queues, v.rebuild_index)
            fixed_kinds.update(("cq_unit", "index_item"))
        out = []
        for f in findings:
            fixed = f.kind in fixed_kinds or (f.kind == "cq_gap" and "jumps" not in f.detail and bool(v.rebuild_queues))
            out.append(dataclasses.replace(f, fixed=fixed) if fixed else f)
        log.warning("%s: verify fixed %d of %d problems", store.path, sum(f.fixed for f in out), len(out))
        return out


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ------------------------------------------------------------------------------------------------
# Rebuilding consume queues and the index in a live store
# ------------------------------------------------------------------------------------------------

class _Sink:
    def put_units(self, *args) -> None:
        pass


def build_derived(store, queues: set[tuple[str, int]] | None, index: bool, out_dir: str, end: int,
                  progress: Callable[[int], None] | None = None, start: int | None = None) -> None:
    """Write the named consume queues (every queue when ``queues`` is None) and, with ``index``,
    a whole index under ``out_dir`` (its ``consumequeue/`` and ``index/``) from the store's
    commitlog from ``start`` (default: its beginning) up to ``end``, with the dispatch code a writer
    uses; lost records keep their queue offsets (blank units fill their places). The store itself
    is not touched."""
    cfg = store.cfg
    cl = store.commit_log
    new_cqs: dict[tuple[str, int], ConsumeQueue] = {}
    sink = _Sink()

    def cq_for(topic: str, qid: int):
        key = (topic, qid)
        if queues is not None and key not in queues:
            return sink
        cq = new_cqs.get(key)
        if cq is None:
            cq = new_cqs[key] = ConsumeQueue(out_dir, topic, qid, cfg, read_only=False)
        return cq

    new_index = IndexService(out_dir, cfg, read_only=False, checkpoint=None) if index else None
    spans: list = []
    topic_cache: dict[bytes, str] = {}

    def on_batch(mf, batch) -> None:
        if spans:
            pad_gaps(store, mf, batch, spans, topic_cache, lambda k: new_cqs.get(k))
        dispatch_batch(mf.u8, batch, cq_for=cq_for, index_service=new_index, delay_levels_ms=store.delay_levels_ms,
                       topic_cache=topic_cache, build_index=index)

    def on_corrupt(span) -> None:
        if span.kind == "record_invalid":
            spans.append(span)

    try:
        R.scan_log(cl.queue.files, cl.min_offset if start is None else max(start, cl.min_offset), cfg,
                   check_crc=False, limit_phy=end, on_batch=on_batch, dispatchable=True, on_corrupt=on_corrupt,
                   progress=progress)
        for cq in new_cqs.values():
            cq.flush(0)
    finally:
        for cq in new_cqs.values():
            cq.close()
        if new_index is not None:
            new_index.close()


def rebuild_derived(store, queues: set[tuple[str, int]], index: bool,
                    progress: Callable[[int], None] | None = None) -> None:
    """Regenerate the named consume queues (and the whole index when ``index``) of a writer store
    from its commitlog (:func:`build_derived`), then swap them in. Dispatch is paused meanwhile;
    readers holding the old files keep valid mappings until they are retired."""
    tmp = os.path.join(store.path, ".verify-rebuild")
    shutil.rmtree(tmp, ignore_errors=True)
    with store.reput.lock:
        try:
            build_derived(store, queues, index, tmp, store.reput.reput_from, progress)
            _swap_queues(store, queues, tmp)
            if index:
                _swap_index(store, tmp)
        except OSError as e:
            raise StoreIOError(f"rebuild failed: {e}", path=tmp) from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def shadow_derived(store, queues: set[tuple[str, int]] | None, index: bool, out_dir: str,
                   index_from: int | None = None, progress: Callable[[int], None] | None = None
                   ) -> tuple[dict, object]:
    """A reader's stand-ins for derived files that are missing, damaged or behind: the named
    queues (every queue when None) and, with ``index``, the index are built under ``out_dir`` (a
    temporary directory the caller removes at close) from the commitlog and used instead of the
    store's own, which stay as they are. ``index_from``: the index is sound but ends there (its
    newest file lost): only the records after it are indexed, in files queried after the store's
    own. Returns the store's own objects they replaced (queue key -> its own queue or None, and
    the own index service or None) for verify and close."""
    cfg = store.cfg
    cl = store.commit_log
    try:
        if queues is None or queues or index:
            build_derived(store, queues, index, out_dir, cl.confirm_offset, progress)
        if index_from is not None and not index:
            build_derived(store, set(), True, os.path.join(out_dir, "tail"), cl.confirm_offset, progress,
                          start=index_from)
    except OSError as e:
        raise StoreIOError(f"building the reader's stand-in queues and index failed: {e}", path=out_dir) from e
    root = paths.consume_queue_dir(out_dir)
    built = {(t, int(q)) for t in (os.listdir(root) if os.path.isdir(root) else ())
             for q in os.listdir(os.path.join(root, t)) if q.isdigit()}
    own_queues: dict = {}
    for key in sorted(built if queues is None else queues & built):
        cq = ConsumeQueue(out_dir, key[0], key[1], cfg, read_only=True)
        cq.load()
        cq.recover()
        cq.correct_min_offset(cl.min_offset)
        own_queues[key] = store.consume_queues.get(key)
        store.consume_queues[key] = cq
        cl.topic_queue_table[key] = cq.max_offset
    own_index = None
    if index or index_from is not None:
        own_index = store.index_service
        svc = IndexService(out_dir if index else os.path.join(out_dir, "tail"), cfg, read_only=True, checkpoint=None)
        svc.load(True)
        if not index:
            svc.files = list(own_index.files) + svc.files  # the store's own files, then the tail's
        store.index_service = svc
    return own_queues, own_index


def shadow_queue_tails(store, queues: set[tuple[str, int]], out_dir: str, start: int) -> dict:
    """A reader's view of consume queues that are only behind the commitlog (records from
    ``start`` on were never dispatched: a crash): each keeps its own files but the last, which is
    copied into ``out_dir`` (one consume-queue file) and continued there with the records from
    ``start`` (work in proportion to the tail, not the store). Returns the store's own queues they
    replaced (key -> own queue or None)."""
    cfg = store.cfg
    cl = store.commit_log
    tails: dict[tuple[str, int], ConsumeQueue] = {}
    own_queues: dict = {}
    for key in sorted(queues):
        own = store.consume_queues.get(key)
        cq = ConsumeQueue(out_dir, key[0], key[1], cfg, read_only=False)
        if own is not None and own.queue.files:
            last = own.queue.files[-1]
            os.makedirs(cq.queue.directory, exist_ok=True)
            copy = os.path.join(cq.queue.directory, os.path.basename(last.path))
            with open(copy, "wb") as fh:
                fh.write(last.mm[:])
            mf = MappedFile(copy, last.file_size)
            mf.wrote_position = mf.flushed_position = last.wrote_position
            cq.queue.files = list(own.queue.files[:-1]) + [mf]
            cq.min_logic_offset = own.min_logic_offset
            cq.max_physic_offset = own.max_physic_offset
        tails[key] = cq
    sink = _Sink()
    topic_cache: dict[bytes, str] = {}

    def on_batch(mf, batch) -> None:
        dispatch_batch(mf.u8, batch, cq_for=lambda t, q: tails.get((t, q), sink), index_service=None,
                       delay_levels_ms=store.delay_levels_ms, topic_cache=topic_cache, build_index=False)

    try:
        R.scan_log(cl.queue.files, max(start, cl.min_offset), cfg, check_crc=False, limit_phy=cl.confirm_offset,
                   on_batch=on_batch, dispatchable=True)
    except OSError as e:
        raise StoreIOError(f"building the reader's consume-queue tails failed: {e}", path=out_dir) from e
    for key, cq in tails.items():
        cq.read_only = cq.queue.read_only = True  # a reader's view from here on
        own_queues[key] = store.consume_queues.get(key)
        store.consume_queues[key] = cq
        cl.topic_queue_table[key] = cq.max_offset
    return own_queues


def pad_gaps(store, mf, batch, spans, topic_cache, cq_of) -> None:
    cols = extract_dispatch_columns(mf.u8, batch, store.delay_levels_ms, topic_cache)
    tx = batch.sys_flag & M.SYSFLAG_TX_MASK
    seen = set()
    for i in np.flatnonzero((tx != M.TX_PREPARED) & (tx != M.TX_ROLLBACK)).tolist():
        key = (cols.topics[cols.topic_ids[i]], int(batch.queue_id[i]))
        if key in seen:
            continue
        seen.add(key)
        cq = cq_of(key)
        if cq is None or not cq.queue.files:
            continue
        q, have = int(batch.queue_offset[i]), cq.max_offset
        span = next((s for s in spans if cq.max_physic_offset <= s.offset < int(batch.phy_offset[i])), None)
        if q <= have or span is None:
            continue
        n = q - have
        cq.put_units(np.arange(have, q, dtype=np.int64), np.full(n, span.offset, dtype=np.int64),
                     np.full(n, min(span.length, 0x7FFFFFFE), dtype=np.int64), np.zeros(n, dtype=np.int64))


def _swap_queues(store, queues, tmp: str) -> None:
    cfg = store.cfg
    cl = store.commit_log
    with store.cq_lock:
        for topic, qid in sorted(queues):
            old = store.consume_queues.get((topic, qid))
            qdir = paths.consume_queue_dir(store.path, topic, qid)
            new_dir = paths.consume_queue_dir(tmp, topic, qid)
            if old is not None:
                for mf in list(old.queue.files):
                    store.retire(mf)
                old.queue.files = []
            if os.path.isdir(qdir):
                for name in os.listdir(qdir):
                    os.unlink(os.path.join(qdir, name))
            else:
                os.makedirs(qdir, exist_ok=True)
            if os.path.isdir(new_dir):
                for name in sorted(os.listdir(new_dir)):
                    os.rename(os.path.join(new_dir, name), os.path.join(qdir, name))
            cq = ConsumeQueue(store.path, topic, qid, cfg, read_only=False)
            cq.load()
            cq.recover()
            cq.correct_min_offset(cl.min_offset)
            store.consume_queues[(topic, qid)] = cq
            cl.topic_queue_table[(topic, qid)] = max(cl.topic_queue_table.get((topic, qid), 0), cq.max_offset)


def _swap_index(store, tmp: str) -> None:
    svc = store.index_service
    new_dir = paths.index_dir(tmp)
    with svc.lock:
        for f in list(svc.files):
            f.mf.unlink()
            store.retire(f)
        svc.files = []
        os.makedirs(svc.dir, exist_ok=True)
        for name in os.listdir(svc.dir):
            os.unlink(os.path.join(svc.dir, name))
        names = sorted(os.listdir(new_dir)) if os.path.isdir(new_dir) else []
        for name in names:
            os.rename(os.path.join(new_dir, name), os.path.join(svc.dir, name))
        for name in names:
            svc.files.append(IndexFile(os.path.join(svc.dir, name), store.cfg.max_hash_slot_num,
                                       store.cfg.max_index_num, read_only=False))
        if names:
            svc._last_name = max(getattr(svc, "_last_name", ""), names[-1])
        full = [f.end_ts for f in svc.files if f.is_write_full]
        store.checkpoint.values.index_msg_timestamp = max(full, default=0)
        store.checkpoint.flush()
