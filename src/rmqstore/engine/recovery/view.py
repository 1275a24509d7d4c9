"""A reader's view of a store it must not write: the commitlog segments' positions for the end of
valid data, each consume queue's view up to its last unit that matches its record, and corrupt
spans told apart from records a live writer was still writing. Used by a read-only recovery
(:func:`.apply.apply_read_view`) and by a read-only store's ``refresh``."""
from __future__ import annotations

import numpy as np

from ...format import consume_queue as CQF
from ..contract import StoreParts
from .queues import last_real_unit_end, validated_unit_end
from .records import record_ok_at


def set_read_positions(store: StoreParts, end: int) -> None:
    """Segment positions (in memory) for valid data ending at ``end``."""
    for mf in store.commit_log.queue.files:
        if mf.file_from_offset + mf.file_size <= end:
            mf.wrote_position = mf.flushed_position = mf.file_size
        elif mf.file_from_offset <= end:
            mf.wrote_position = mf.flushed_position = end - mf.file_from_offset
        else:
            mf.wrote_position = mf.flushed_position = 0


def validate_read_views(store: StoreParts, from_phy: int | None = None, cqs=None) -> None:
    """Each consume queue's view ends after its last unit that matches its record in the
    commitlog view (units with phy offsets from ``from_phy``, or from the current view end, are
    checked; earlier ones are trusted as a writer's recovery would)."""
    cl = store.commit_log
    files = cl.queue.files
    for cq in (cqs if cqs is not None else list(store.consume_queues.values())):
        if not cq.queue.files:
            continue
        if from_phy is not None:
            from_q = first_unit_at_or_after(cq, from_phy)
        else:
            from_q = view_end(cq)
        end_q = validated_unit_end(cq, files, cl.confirm_offset, from_q)
        for mf in cq.queue.files:
            pos = min(max(end_q * 20 - mf.file_from_offset, 0), mf.file_size)
            mf.wrote_position = mf.flushed_position = pos
        # files after the view (nothing valid in them yet) leave it until a later refresh,
        # so that the queue's max offset is the view's end
        qf = cq.queue.files
        while len(qf) > 1 and qf[-1].wrote_position == 0 and qf[-2].wrote_position < qf[-2].file_size:
            qf.pop().close()
        # and the end of its last record is the view's: a unit left out of it must not count (a reader
        # allows a record past the view as many queue offsets as records fit after this end)
        cq.max_physic_offset = last_real_unit_end(cq)


def really_corrupt(store: StoreParts, spans: list) -> list:
    """Read-only scans of a live store: a record seen half-written while valid records after
    it were already complete is re-read; if whole now, it was being written, not corrupt
    (the writer finished it before appending the next one)."""
    out = []
    for sp in spans:
        mf = store.commit_log.queue.find(sp.offset)
        if mf is not None and record_ok_at(mf, sp.offset - mf.file_from_offset, store.cfg):
            continue
        out.append(sp)
    return out


def view_end(cq) -> int:
    """Queue offset where a consume queue's view ends: in the first file not full (files mapped
    after it, empty so far, do not move it)."""
    for mf in cq.queue.files:
        if mf.wrote_position < mf.file_size:
            return (mf.file_from_offset + mf.wrote_position) // CQF.UNIT_SIZE
    return cq.max_offset


def first_unit_at_or_after(cq, phy: int) -> int:
    """Queue offset of the first unit (in the queue's written files) whose phy offset is >= ``phy``."""
    files = cq.queue.files
    for mf in reversed(files):
        n = mf.wrote_position // CQF.UNIT_SIZE
        if n == 0:
            continue
        p = np.frombuffer(mf.mm, dtype=CQF.UNIT_DTYPE, count=n)["phy_offset"].astype(np.int64)
        if int(p[0]) < phy or mf is files[0]:
            idx = np.flatnonzero(p >= phy)
            return mf.file_from_offset // CQF.UNIT_SIZE + (int(idx[0]) if idx.size else n)
    return files[0].file_from_offset // CQF.UNIT_SIZE if files else 0
