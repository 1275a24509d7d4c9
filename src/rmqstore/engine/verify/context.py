"""What every check of verify shares: the store (as a :class:`~rmqstore.engine.contract.StoreParts`),
a consistent :class:`Snapshot` of it, the :class:`FindingLog`, progress, and what the commitlog
walk found (:class:`LogFacts`) for the checks that judge derived files against it."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...format import index_file as IF
from ...io import paths
from .findings import FindingLog


def by_segment(files, phys: np.ndarray):
    """Group phy offsets by commitlog segment: yields (segment, indexes into phys)."""
    if not files or phys.size == 0:
        return
    first, size = files[0].file_from_offset, files[0].file_size
    seg = np.where(phys >= first, (phys - first) // size, -1)
    ok = (seg >= 0) & (seg < len(files))
    for s in np.unique(seg[ok]).tolist():
        yield files[s], np.flatnonzero(ok & (seg == s))


def file_pos(files, phy: int) -> tuple[str | None, int]:
    """The segment path holding commitlog offset ``phy`` and the offset inside it (``None`` and
    ``phy`` when no segment holds it). ``files``: objects with ``file_from_offset``,
    ``file_size`` and ``path``."""
    if files:
        first, size = files[0].file_from_offset, files[0].file_size
        i = (phy - first) // size
        if 0 <= i < len(files):
            return files[i].path, phy - files[i].file_from_offset
    return None, phy


def work_bytes(store) -> int:
    """What a verify's progress counts up to: the commitlog's bytes, then every consume queue's
    written units, then every index file's items (``progress(done)`` covers every phase)."""
    cl = store.commit_log
    cqs = sum(mf.wrote_position for cq in list(store.consume_queues.values()) for mf in list(cq.queue.files))
    ix = sum(max(1, int(f.index_count)) * IF.ITEM_SIZE for f in list(store.index_service.files))
    return max(0, cl.confirm_offset - cl.min_offset) + cqs + ix


class Progress:
    """``progress(done)`` across the phases: ``add`` finishes a piece of work, ``advance`` reports a
    position inside the current one."""

    def __init__(self, callback: Callable[[int], None] | None = None):
        self.callback = callback
        self.done_before = 0

    def advance(self, within: int) -> None:
        if self.callback is not None:
            self.callback(self.done_before + within)

    def add(self, n: int) -> None:
        self.done_before += n
        self.advance(0)


@dataclass(frozen=True)
class Snapshot:
    """What verify judges against, taken together. ``limit``: the end of dispatched data (a
    writer, whose dispatch is paused while the snapshot is taken) or None (a reader: the whole
    log); ``cq_hi``: each queue's end; ``index_counts``: each index file's item count (a writer)
    or None; ``judge_lag``: consume queues and index behind the commitlog are damage (no
    recovery is due: a writer has dispatched everything; a reader of a crashed or live store has
    not)."""

    limit: int | None
    cq_hi: dict
    index_counts: dict | None
    judge_lag: bool

    @classmethod
    def take(cls, store) -> "Snapshot":
        judge_lag = not store.read_only or not os.path.exists(paths.abort_path(store.path))
        if store.read_only:
            return cls(None, {k: cq.max_offset for k, cq in store.consume_queues.items()}, None, judge_lag)
        with store.reput.lock, store.cq_lock:
            limit = store.reput.reput_from
            cq_hi = {k: cq.max_offset for k, cq in store.consume_queues.items()}
            with store.index_service.lock:
                counts = {f.path: f.index_count for f in store.index_service.files}
        return cls(limit, cq_hi, counts, judge_lag)

    def for_queues(self, keys) -> "Snapshot":
        """The same snapshot, judging only the queues ``keys``."""
        keys = set(keys)
        return Snapshot(self.limit, {k: hi for k, hi in self.cq_hi.items() if k in keys}, self.index_counts,
                        self.judge_lag)


@dataclass
class LogFacts:
    """What the commitlog walk found. ``end``: where valid records end; ``scan``: the walk's
    :class:`~rmqstore.engine.recovery.ScanResult` (None when the log has no segment);
    ``queue_last``: per queue, the last queue offset in the commitlog and its phy offset;
    ``first_beyond``: per queue, the first record (queue offset, phy) at or beyond the queue's
    end; ``expected_keys``: (phys, hashes) of every keyed record (the index must find them)."""

    end: int = 0
    scan: object = None
    queue_last: dict = field(default_factory=dict)
    first_beyond: dict = field(default_factory=dict)
    expected_keys: list = field(default_factory=list)


@dataclass
class VerifyContext:
    """One verify run over ``store``: its commitlog segments, the snapshot, the findings so far,
    progress, and a topic-name cache shared by the checks."""

    store: object
    snapshot: Snapshot
    found: FindingLog = field(default_factory=FindingLog)
    progress: Progress = field(default_factory=Progress)
    files: list = field(default_factory=list)
    topic_cache: dict = field(default_factory=dict)

    @classmethod
    def of(cls, store, progress: Callable[[int], None] | None = None,
           snapshot: Snapshot | None = None) -> "VerifyContext":
        """A context for ``store`` (its snapshot taken now unless given)."""
        files = list(store.commit_log.queue.files)
        return cls(store, snapshot if snapshot is not None else Snapshot.take(store), FindingLog(),
                   Progress(progress), files)
