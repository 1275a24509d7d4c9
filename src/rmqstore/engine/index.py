"""IndexService: a store's index files, the on-disk hash index from ``topic#key`` to phy offsets.

Mirrors upstream ``IndexService`` (FORMAT.md §6): files rolled when full and named by local creation
time, a full file replaced when the next record arrives. One file is an
:class:`~rmqstore.engine.index_file.IndexFile` (re-exported here).
"""
from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np

from ..config import MessageStoreConfig
from ..errors import StoreIOError
from ..format import index_file as F
from ..format.hashes import abs_key_hash_many, index_key_hash, java_hash_many
from ..io import paths
from .index_file import SMALL_PUT, IndexFile, indexed

__all__ = ["IndexFile", "IndexService", "index_file_name"]

log = logging.getLogger(__name__)


def index_file_name(now_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as upstream names index files."""
    t = time.localtime(now_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{now_ms % 1000:03d}"


class IndexService:
    """All index files of a store (mirrors ``IndexService``)."""

    def __init__(self, store_dir: str, cfg: MessageStoreConfig, *, read_only: bool, checkpoint=None):
        self.dir = paths.index_dir(store_dir)
        self.cfg = cfg
        self.read_only = read_only
        self.checkpoint = checkpoint
        self.files: list[IndexFile] = []
        self.lock = threading.RLock()
        self._last_name = ""

    def load(self, last_exit_ok: bool) -> list[IndexFile]:
        """Map the index files; after a crash, return (not map) those newer than the checkpoint's
        indexMsgTimestamp, which upstream deletes; the caller decides."""
        dropped_info = []
        if not os.path.isdir(self.dir):
            return dropped_info
        size = F.file_size(self.cfg.max_hash_slot_num, self.cfg.max_index_num)
        for name in sorted(os.listdir(self.dir)):
            path = os.path.join(self.dir, name)
            if not os.path.isfile(path) or not name.isdigit():
                continue
            if os.path.getsize(path) != size:
                # damaged (the geometry is the files' common size: layout.infer_config): its keys are
                # indexed again from the commitlog (the store sees a hole, or an index behind)
                log.error("%s: index file is %d bytes, expected %d for maxHashSlotNum=%d maxIndexNum=%d: not used%s",
                          path, os.path.getsize(path), size, self.cfg.max_hash_slot_num, self.cfg.max_index_num,
                          "" if self.read_only else f" (moved to {name}.damaged)")
                if not self.read_only:
                    os.replace(path, path + ".damaged")
                continue
            f = IndexFile(path, self.cfg.max_hash_slot_num, self.cfg.max_index_num, read_only=self.read_only)
            if not last_exit_ok and self.checkpoint is not None and f.end_ts > self.checkpoint.values.index_msg_timestamp:
                dropped_info.append(f)
                continue
            self.files.append(f)
            self._last_name = max(self._last_name, name)
        return dropped_info

    # --- writing -----------------------------------------------------------------------------
    def _new_file(self) -> IndexFile:
        prev = self.files[-1] if self.files else None
        now = int(time.time() * 1000)
        name = index_file_name(now)
        while name <= self._last_name or os.path.exists(os.path.join(self.dir, name)):
            now += 1
            name = index_file_name(now)
        os.makedirs(self.dir, exist_ok=True)
        f = IndexFile.create(os.path.join(self.dir, name), self.cfg.max_hash_slot_num, self.cfg.max_index_num,
                             prev_end_phy=prev.end_phy if prev else 0, prev_end_ts=prev.end_ts if prev else 0)
        self._last_name = name
        self.files.append(f)
        if prev is not None:
            prev.flush()
            if prev.is_write_full and self.checkpoint is not None:
                self.checkpoint.values.index_msg_timestamp = prev.end_ts
                self.checkpoint.flush()
        return f

    def _current(self) -> IndexFile:
        if self.files and not self.files[-1].is_write_full:
            return self.files[-1]
        return self._new_file()

    def build_index(self, phys: np.ndarray, ts: np.ndarray, sys_flags: np.ndarray,
                    key_lists: list[list[str]]) -> None:
        """Index a batch of records from ``topic#key`` strings (``key_lists[i]`` for record i,
        UNIQ_KEY first, then each KEYS token). See :meth:`build_index_hashed`."""
        counts = np.fromiter((len(k) for k in key_lists), dtype=np.int64, count=len(key_lists))
        item_rec = np.repeat(np.arange(len(key_lists)), counts)
        strings = [s for ks in key_lists for s in ks]
        hashes = abs_key_hash_many(java_hash_many(strings)).astype(np.int64)
        self.build_index_hashed(phys, ts, sys_flags, item_rec, hashes)

    def build_index_hashed(self, phys: np.ndarray, ts: np.ndarray, sys_flags: np.ndarray,
                           item_rec: np.ndarray, item_hash: np.ndarray) -> None:
        """Index a batch of dispatched records in commitlog order (upstream ``buildIndex`` for each).

        Items are ``(item_rec, item_hash)`` sorted by record. A full file is replaced by a new one
        when the next record arrives, even one without keys, exactly as upstream."""
        n = phys.size
        if n == 0:
            return
        with self.lock:
            cur = self._current()
            end0 = cur.end_phy
            # a re-dispatched record that this index already holds is skipped; upstream's `<` test
            # would index the last one twice (quirk 15.4, fixed knowingly: only recovery re-dispatches)
            skip_eq = cur.index_count > 1 or end0 > 0
            if n <= SMALL_PUT and item_rec.size <= SMALL_PUT:
                phys_l = phys.tolist()
                self._build_small(cur, indexed(phys_l, sys_flags.tolist(), end0, skip_eq), phys_l, ts.tolist(),
                                  item_rec.tolist(), item_hash.tolist())
                return
            eligible = (phys > end0) | ((phys == end0) & (not skip_eq))
            eligible &= (sys_flags & 0xC) != 0xC
            keep = eligible[item_rec]
            rec_of = item_rec[keep]
            total = int(rec_of.size)
            if total == 0:
                return
            hashes = item_hash[keep]
            item_phys = phys[rec_of]
            item_ts = ts[rec_of]
            i = 0
            while i < total:
                if cur.is_write_full:
                    cur = self._new_file()
                i += cur.put_batch(hashes[i:], item_phys[i:], item_ts[i:])
            if cur.is_write_full and int(rec_of[-1]) < n - 1:
                self._new_file()

    def build_index_lists(self, phys: list[int], ts: list[int], sys_flags: list[int], item_rec: list[int],
                          item_hash: list[int]) -> None:
        """:meth:`build_index_hashed` with plain lists (a few records: no numpy round trips)."""
        if not phys:
            return
        with self.lock:
            cur = self._current()
            end0 = cur.end_phy
            ok = indexed(phys, sys_flags, end0, cur.index_count > 1 or end0 > 0)
            self._build_small(cur, ok, phys, ts, item_rec, item_hash)

    def _build_small(self, cur: IndexFile, ok: list, phys: list, ts: list, item_rec: list, item_hash: list) -> None:
        """:meth:`build_index_hashed` of a few records, without numpy (same items, same files); ``ok``:
        whether each record is indexed (:func:`~rmqstore.engine.index_file.indexed`)."""
        n = len(phys)
        if all(ok):  # (the usual round: every record is indexed)
            recs, hashes = item_rec, item_hash
        else:
            keep = [j for j, r in enumerate(item_rec) if ok[r]]
            hashes = [item_hash[j] for j in keep]
            recs = [item_rec[j] for j in keep]
        if not recs:
            return
        item_phys = [phys[r] for r in recs]
        item_ts = [ts[r] for r in recs]
        i, total = 0, len(recs)
        while i < total:
            if cur.is_write_full:
                cur = self._new_file()
            m = min(total - i, cur.capacity_left)
            cur.put_small(hashes[i:i + m], item_phys[i:i + m], item_ts[i:i + m])
            i += m
        if cur.is_write_full and recs[-1] < n - 1:
            self._new_file()

    def adopt(self, files: list) -> None:  # recovery: serve these (by name); new files are named after them
        with self.lock:
            self.files, self._last_name = files, max([self._last_name] + [f.name for f in files[-1:]])

    def ensure_file(self) -> None:
        """Upstream creates an index file for every dispatched record, keys or not."""
        with self.lock:
            self._current()

    # --- reading -----------------------------------------------------------------------------
    def query_offsets(self, topic: str, key: str, max_num: int, begin: int, end: int,
                      cap: bool = True) -> tuple[list[int], int, int]:
        """Upstream ``queryOffset``: ``(phy offsets newest first, lastUpdateTs, lastUpdatePhy)``.
        ``cap`` applies ``maxMsgsNumBatch`` as upstream does."""
        if cap:
            max_num = min(max_num, self.cfg.max_msgs_num_batch)
        out: list[int] = []
        last_ts = last_phy = 0
        key_hash = index_key_hash(topic, key)
        with self.lock:
            files = list(self.files)
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            if i == len(files) - 1:
                last_ts, last_phy = f.end_ts, f.end_phy
            if f.is_time_matched(begin, end):
                f.select_phy_offsets(out, key_hash, max_num, begin, end)
            if f.begin_ts < begin or len(out) >= max_num:
                break
        return out, last_ts, last_phy

    # --- maintenance -------------------------------------------------------------------------
    def flush(self) -> None:
        with self.lock:
            for f in self.files:
                f.flush()

    def delete_expired(self, min_phy: int) -> list[str]:
        """Upstream ``deleteExpiredFile``: drop leading files (never the last) ending below min_phy."""
        removed = []
        with self.lock:
            if not self.files or self.files[0].end_phy >= min_phy:
                return removed
            while len(self.files) > 1 and self.files[0].end_phy < min_phy:
                f = self.files.pop(0)
                removed.append(f.path)
                f.destroy()
        return removed

    def close(self) -> None:
        with self.lock:
            for f in self.files:
                if not self.read_only:
                    try:
                        f.flush()
                    except StoreIOError:
                        log.exception("index flush failed at close: %s", f.path)
                f.close()
            self.files = []
