"""Derived files (consume queues, the index) built from the commitlog with the dispatch code a
writer uses: :func:`rebuild_derived` swaps them into a writer (what :func:`repair` and the open of a
store with lost derived files do); :func:`shadow_derived` and :func:`shadow_queue_tails` give a
reader stand-ins that leave the store's own files as they are."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Callable

from ...errors import StoreIOError
from ...io import paths
from ...io.mapped_file import MappedFile
from .. import recovery as R
from ..consume_queue import ConsumeQueue
from ..dispatch import DispatchTarget, dispatch_batch, pad_gaps
from ..index import IndexService


@dataclass(frozen=True)
class DerivedFiles:
    """Which derived files to build: the named consume queues (every queue when ``queues`` is
    None) and, with ``index``, a whole index."""

    queues: set | None
    index: bool


class _Sink:
    def put_units(self, *args) -> None:
        pass


def build_derived(store, what: DerivedFiles, out_dir: str, end: int,
                  progress: Callable[[int], None] | None = None, start: int | None = None) -> None:
    """Write ``what`` (:class:`DerivedFiles`) under ``out_dir`` (its ``consumequeue/`` and
    ``index/``) from the store's commitlog from ``start`` (default: its beginning) up to ``end``,
    with the dispatch code a writer uses; lost records keep their queue offsets (blank units fill
    their places). The store itself is not touched."""
    queues, index = what.queues, what.index
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
        dispatch_batch(mf.u8, batch, DispatchTarget(cq_for, new_index, store.delay_levels_ms, topic_cache,
                                                    build_index=index))

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
            build_derived(store, DerivedFiles(queues, index), tmp, store.reput.reput_from, progress)
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
            build_derived(store, DerivedFiles(queues, index), out_dir, cl.confirm_offset, progress)
        if index_from is not None and not index:
            build_derived(store, DerivedFiles(set(), True), os.path.join(out_dir, "tail"), cl.confirm_offset,
                          progress, start=index_from)
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
        dispatch_batch(mf.u8, batch, DispatchTarget(lambda t, q: tails.get((t, q), sink), None,
                                                    store.delay_levels_ms, topic_cache, build_index=False))

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
        svc.load(True)  # the files moved in (new files are named after them)
        full = [f.end_ts for f in svc.files if f.is_write_full]
        store.checkpoint.values.index_msg_timestamp = max(full, default=0)
        store.checkpoint.flush()
