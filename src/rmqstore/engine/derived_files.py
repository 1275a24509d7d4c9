"""The derived-files keeper, beyond upstream: what an open does about consume queues and index files
that are lost, damaged or behind the commitlog, and the marks a clean close leaves for the next open.

* At open, before recovery (:meth:`DerivedFilesKeeper.note_before_recovery`): the index files'
  stats and item counts, the files changed since the last clean close, and whether the index is lost
  (missing, or a file missing in the middle); after recovery
  (:meth:`~DerivedFilesKeeper.note_after_recovery`): whether a changed index file is damaged.
* :meth:`~DerivedFilesKeeper.start` (a :class:`~.lifecycle.Service`, started after the reput and
  the flush service): a writer rebuilds lost queue units and a lost index from the commitlog in
  place; a reader with no live writer answers from temporary stand-ins built into a scratch
  directory, the store untouched.
* :meth:`~DerivedFilesKeeper.shutdown` notes the queue extents and index stats the close ends with;
  :meth:`~DerivedFilesKeeper.write_marks` writes them at a clean close (``config/rmqstore-queues.json``,
  ``config/rmqstore-index.json``: files RocketMQ's broker does not read);
  :meth:`~DerivedFilesKeeper.close` removes a reader's stand-ins.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from typing import Callable

import numpy as np

from ..format import message as M
from ..io import paths
from ..io.mapped_file import atomic_write_text
from . import recovery as R
from . import verify as V
from .contract import StoreParts
from .dispatch import extract_dispatch_columns, iter_record_batches

log = logging.getLogger("rmqstore.message_store")

#: every queue's max offset at the last clean close (rmqstore's own file; see write_marks)
QUEUE_EXTENTS_FILE = paths.QUEUE_EXTENTS_FILE
#: size and mtime of every index file at the last clean close; a file that differs at the next open
#: was changed by something else, and is checked against the commitlog
INDEX_STATS_FILE = paths.INDEX_STATS_FILE
#: seconds between two progress lines of a long rebuild from the commitlog
PROGRESS_EVERY_S = 5.0


class DerivedFilesKeeper:
    """Restores, stands in for and marks the derived files of one store (see the module)."""

    def __init__(self, store: StoreParts, stand_in: bool = True):
        self.store = store
        #: a reader may answer from stand-ins (``MessageStore.open(stand_in_derived=...)``)
        self.stand_in = stand_in
        #: what the open rebuilt or stood in for: "topic/queue" names and "index"
        self.restored: list[str] = []
        self.report: R.RecoveryReport | None = None
        self.index_lost = False
        self._live_writer = False
        self._changed: list = []
        self._extents_at_open: dict[str, int] = {}
        self._index_stats_at_open: dict[str, list[int]] = {}
        self._index_counts_at_open: dict[str, int] = {}
        self._at_close: tuple[dict[str, int], list[str], dict[str, int]] | None = None
        self._shadow_dir: str | None = None
        self._own: tuple[dict, object] | None = None

    @property
    def shadow_dir(self) -> str | None:
        """A reader's scratch directory of stand-ins (None: it answers from the store's own files)."""
        return self._shadow_dir

    @property
    def own_files(self) -> tuple[dict, object] | None:
        """While stand-ins answer: the store's own ``(queues, index service)`` they replace (a
        queue None: the store had none)."""
        return self._own

    # --- at open --------------------------------------------------------------------------------
    def note_before_recovery(self, last_exit_ok: bool, dropped_index: list, live_writer_pid: int | None) -> None:
        """What the index files are before recovery, whose re-dispatch may create a fresh one."""
        store = self.store
        self._live_writer = live_writer_pid is not None
        self._index_stats_at_open = self.index_stats()
        self._index_counts_at_open = self.index_counts()
        self._changed = self._index_files_changed(last_exit_ok, dropped_index)
        self.index_lost = (store.cfg.message_index_enable and not dropped_index and bool(store.commit_log.queue.files)
                           and (not store.index_service.files or self._index_has_a_hole()))

    def note_after_recovery(self, report: R.RecoveryReport) -> None:
        """Index files changed since the last clean close are checked now (beyond upstream)."""
        self.report = report
        if self._changed and not self.index_lost:
            self.index_lost = self._index_files_damaged(self._changed)

    def start(self) -> None:
        """A writer rebuilds what was lost (needs the reput running); a reader with no live writer
        stands in for what is lost or behind (unless :attr:`stand_in` is off)."""
        store = self.store
        if store.read_only:
            if not self._live_writer and self.stand_in:
                self._shadow_derived_files()
            return
        self._restore_derived_files()
        self._extents_at_open = self.queue_extents()

    def shutdown(self) -> None:
        """Note the extents and index stats the store closes with (the files are closed next)."""
        store = self.store
        self._at_close = (self.queue_extents(), [f.path for f in store.index_service.files], self.index_counts())

    def close(self) -> None:
        """Close the store's own queues and index a reader's stand-ins replaced; remove the stand-ins."""
        if self._own is not None:
            own_queues, own_index = self._own
            for cq in own_queues.values():
                if cq is not None:
                    cq.close()
            if own_index is not None:
                own_index.close()
        if self._shadow_dir is not None:
            shutil.rmtree(self._shadow_dir, ignore_errors=True)

    def write_marks(self) -> None:
        """A writer's clean close, before ``abort`` goes: the queue extents and index stats files
        (when they changed, or exist). Opening and closing a broker's store without writing leaves
        every file but the checkpoint as it was."""
        if self._at_close is None:
            return
        extents, index_paths, index_counts = self._at_close
        store_dir = self.store.path
        if extents != self._extents_at_open or os.path.exists(os.path.join(store_dir, QUEUE_EXTENTS_FILE)):
            self._write_json(QUEUE_EXTENTS_FILE, extents, "the queue extents")
        stats = self.index_stats(index_paths)
        # (a close that indexed nothing leaves a broker's store without the file: mtimes move
        # when a writer merely maps and flushes, the counts do not)
        if index_counts != self._index_counts_at_open or os.path.exists(os.path.join(store_dir, INDEX_STATS_FILE)):
            self._write_json(INDEX_STATS_FILE, stats, "the index file stats")

    @contextlib.contextmanager
    def own_files_in_place(self):
        """While stand-ins answer, put the store's own files back meanwhile (verify reports what
        is on disk); a no-op otherwise."""
        if self._own is None:
            yield
            return
        store = self.store
        own_queues, own_index = self._own
        with store.cq_lock:
            shadows = {k: store.consume_queues.get(k) for k in own_queues}
            for k, cq in own_queues.items():
                if cq is None:
                    store.consume_queues.pop(k, None)
                else:
                    store.consume_queues[k] = cq
            shadow_index = store.index_service
            if own_index is not None:
                store.index_service = own_index
        try:
            yield
        finally:
            with store.cq_lock:
                store.consume_queues.update(shadows)
                store.index_service = shadow_index

    # --- the facts --------------------------------------------------------------------------------
    def queue_extents(self) -> dict[str, int]:
        """Every queue's max offset, as "topic/queue" names."""
        return {f"{t}/{q}": cq.max_offset for (t, q), cq in sorted(self.store.consume_queues.items())}

    def index_counts(self) -> dict[str, int]:
        return {os.path.basename(f.path): f.index_count for f in self.store.index_service.files}

    def index_stats(self, index_paths: list[str] | None = None) -> dict[str, list[int]]:
        """``[size, mtime_ns]`` of each index file (those of the index service, or ``index_paths``)."""
        out = {}
        for p in [f.path for f in self.store.index_service.files] if index_paths is None else index_paths:
            try:
                st = os.stat(p)
            except OSError:
                continue
            out[os.path.basename(p)] = [st.st_size, st.st_mtime_ns]
        return out

    def rebuild_progress(self, what: str, every_s: float | None = None) -> Callable[[int], None]:
        """A progress callback for a long scan of the commitlog: one log line every ``every_s``
        seconds (:data:`PROGRESS_EVERY_S`; offset reached, share of the commitlog, rate); silent
        for a short one."""
        every_s = PROGRESS_EVERY_S if every_s is None else every_s
        store = self.store
        cl = store.commit_log
        lo, hi = cl.min_offset, max(cl.confirm_offset, cl.min_offset + 1)
        t0 = last = time.monotonic()

        def progress(phy: int) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= every_s:
                last = now
                done = max(0, phy - lo)
                log.warning("%s: %s derived files from the commitlog: %.0f%% (%d of %d MB, %.0f MB/s)", store.path,
                            what, 100 * done / (hi - lo), done >> 20, (hi - lo) >> 20, done / (now - t0) / 1e6)
        return progress

    def _write_json(self, name: str, table: dict, what: str) -> None:
        try:
            atomic_write_text(os.path.join(self.store.path, name), json.dumps(table, indent=0) + "\n")
        except OSError:
            log.exception("%s: %s could not be written (the next open checks less)", self.store.path, what)

    def _read_json(self, name: str) -> dict | None:
        try:
            with open(os.path.join(self.store.path, name), encoding="utf-8") as fh:
                table = json.load(fh)
        except (OSError, ValueError):
            return None
        return table if isinstance(table, dict) else None

    # --- the index --------------------------------------------------------------------------------
    def _index_files_changed(self, last_exit_ok: bool, dropped: list) -> list:
        """Index files whose size or mtime differ from :data:`INDEX_STATS_FILE` (the last clean
        close): something else changed them. Not those the recovery cuts back anyway, nor, after a
        crash or with a live writer, the newest of that close and later ones (a writer appends)."""
        table = self._read_json(INDEX_STATS_FILE)
        if table is None:
            return []
        files = [f for f in self.store.index_service.files if f not in dropped]
        if not last_exit_ok or self._live_writer:
            # a writer since that close appended to the then newest file and to files it created
            # (as their names grow): only the older ones must be as they were
            newest = max(table, default="")
            files = [f for f in files if os.path.basename(f.path) < newest]
        now = self._index_stats_at_open
        return [f for f in files if os.path.basename(f.path) in table
                and table[os.path.basename(f.path)] != now.get(os.path.basename(f.path))]

    def _index_files_damaged(self, changed: list) -> bool:
        """Index files changed since the last clean close are checked against the commitlog
        (:func:`~rmqstore.engine.verify.index_file_problems`); True when one is damaged (a writer
        then rebuilds the index, a reader answers from a scan)."""
        damaged = False
        for f in changed:
            problems = V.index_file_problems(self.store, f)
            if problems:
                log.error("%s: index file %s changed since the last clean close and is damaged (%d problem(s), "
                          "e.g. %s)", self.store.path, f.path, len(problems), problems[0])
                damaged = True
        return damaged

    def _index_has_a_hole(self) -> bool:
        """An index file is missing before the newest: keyed records lie between where one file ends
        and the next begins (or before the first file), which only the lost file could have held."""
        store = self.store
        files = store.index_service.files
        cl = store.commit_log
        spans = [(cl.min_offset, files[0].begin_phy)] if files[0].index_count > 1 else []
        spans += [(R.index_end_of(store, a), b.begin_phy) for a, b in zip(files, files[1:]) if b.index_count > 1]
        return any(R.keyed_records_in(store, a, b) for a, b in spans if a < b)

    # --- the queues -------------------------------------------------------------------------------
    def _queues_short_of_extents(self) -> set[tuple[str, int]]:
        """Queues holding fewer units than at the last clean close (their files were lost)."""
        table = self._read_json(QUEUE_EXTENTS_FILE) or {}
        out = set()
        for name, hi in table.items():
            topic, _, qid = str(name).rpartition("/")
            if not qid.isdigit() or not isinstance(hi, int) or hi <= 0:
                continue  # (a queue asked about but never written has nothing to lose)
            cq = self.store.consume_queues.get((topic, int(qid)))
            if cq is None or cq.max_offset < hi:
                out.add((topic, int(qid)))
        return out

    def queues_that_lost_units(self) -> set[tuple[str, int]]:
        """Queues with blank units for lost records or a file missing or short in the middle, one
        that starts past 0 although no commitlog segment was ever deleted (its first files are
        gone), one shorter than at the last clean close, or one that recovery cut back (a damaged
        unit) while the commitlog kept all its records."""
        cl = self.store.commit_log
        short = {k for k, cq in self.store.consume_queues.items()
                 if cq.gap_units or cq.cut_in_middle or cq.queue.gaps or (cl.min_offset == 0 and cq.min_offset > 0)}
        short |= self._queues_short_of_extents()
        rep = self.report
        if rep is not None and not rep.cuts:
            for name in rep.consume_queues_truncated:
                topic, _, qid = name.rpartition("/")
                short.add((topic, int(qid)))
        return short

    def undispatched_queues(self) -> tuple[int, set[tuple[str, int]]]:
        """Where the records after the last dispatched one start (up to the readable end), and the
        queues they belong to: a crash before dispatch, or consume queues that were never there."""
        store = self.store
        cl = store.commit_log
        last = max((cq.max_physic_offset for cq in store.consume_queues.values()), default=-1)
        start = cl.min_offset
        if last >= cl.min_offset:
            mf = cl.queue.find(last)
            total = M.I32.unpack_from(mf.mm, last - mf.file_from_offset)[0] if mf is not None else 0
            start = last + total if total >= M.MIN_RECORD_SIZE else last
        out: set[tuple[str, int]] = set()
        cache: dict = {}
        for mf, batch in iter_record_batches(cl.queue, start, cl.confirm_offset):
            cols = extract_dispatch_columns(mf.u8, batch, store.delay_levels_ms, cache)
            tx = batch.sys_flag & M.SYSFLAG_TX_MASK
            for i in np.flatnonzero((tx != M.TX_PREPARED) & (tx != M.TX_ROLLBACK)).tolist():
                out.add((cols.topics[cols.topic_ids[i]], int(batch.queue_id[i])))
        return start, out

    # --- restore, stand in ----------------------------------------------------------------------
    def _shadow_derived_files(self) -> None:
        """For a reader with no live writer: consume queues that lost units or are behind the
        commitlog (a crash before dispatch, or no ``consumequeue/`` at all) and an index that is
        missing or has a hole are built from the commitlog into a temporary directory and answer
        instead of the store's own (one warning line; the store is not touched; removed at close).
        Opening the store for writing once rebuilds them in place."""
        store = self.store
        cl = store.commit_log
        if cl.confirm_offset <= cl.min_offset:
            return
        lost = self.queues_that_lost_units()
        tail_from, behind = self.undispatched_queues()
        behind -= lost  # only behind: continued from the tail; lost units: rebuilt whole
        queues = lost | behind
        index_from = None
        if not self.index_lost and store.cfg.message_index_enable and store.index_service.files:
            idx_end = R.index_end(store, cl.confirm_offset)  # the index behind (its newest file lost)
            if idx_end < cl.confirm_offset and R.keyed_records_in(store, idx_end, cl.confirm_offset):
                index_from = idx_end
        if not queues and not self.index_lost and index_from is None:
            return
        self._shadow_dir = tempfile.mkdtemp(prefix="rmqstore-reader-")
        what = [f"{len(queues)} consume queue(s) missing units"] if queues else []
        what += ["the index is missing or has a hole"] if self.index_lost else []
        what += [f"the index ends at offset {index_from}"] if index_from is not None else []
        log.warning("%s: %s: answering from a scan of the commitlog (%d bytes) into temporary files in %s; "
                    "open the store for writing once to rebuild them in place", store.path, " and ".join(what),
                    cl.confirm_offset - cl.min_offset, self._shadow_dir)
        own_queues, own_index = V.shadow_derived(store, lost, self.index_lost, self._shadow_dir, index_from,
                                                 self.rebuild_progress("building temporary"))
        if behind:
            own_queues.update(V.shadow_queue_tails(store, behind, os.path.join(self._shadow_dir, "tails"), tail_from))
        self._own = (own_queues, own_index)
        self.restored = [f"{t}/{q}" for t, q in sorted(queues)] + \
            (["index"] if self.index_lost or index_from is not None else [])

    def _restore_derived_files(self) -> None:
        """A writer whose index files are gone, or whose recovery found a consume queue short of
        the records it re-dispatched (its files lost, or units missing), rebuilds them from the
        commitlog at open (the fix of ``verify``: every message keeps its queue offset and is
        findable by its keys again). Upstream keeps serving without them."""
        store = self.store
        cl = store.commit_log
        if cl.confirm_offset <= cl.min_offset:
            return
        short = self.queues_that_lost_units()
        if not self.index_lost and not short:
            return
        names = [f"{t}/{q}" for t, q in sorted(short)]
        what = ["the index files are missing"] if self.index_lost else []
        what += [f"consume queue(s) {', '.join(names)} lost units"] if short else []
        log.warning("%s: %s: rebuilding them from the commitlog (%d bytes)", store.path, "; ".join(what),
                    cl.confirm_offset - cl.min_offset)
        store.wait_dispatched()
        V.rebuild_derived(store, short, self.index_lost, self.rebuild_progress("rebuilding"))
        self.restored = names + (["index"] if self.index_lost else [])
        for cq in store.consume_queues.values():
            cq.gap_units, cq.cut_in_middle = 0, False
