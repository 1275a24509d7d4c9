"""The checkpoint and the tail: checkpoint values ahead of the data (each finding carries the
:class:`LowerCheckpoint` that sets it right), and non-zero bytes after the end of valid data (each
carries a :class:`CutTail`)."""
from __future__ import annotations

import os

import numpy as np

from ...io import paths
from .. import recovery as R
from ..checkpoint import StoreCheckpoint
from .context import VerifyContext
from .findings import CutTail, Finding, LowerCheckpoint


def check_checkpoint(ctx: VerifyContext, scan) -> None:
    """Checkpoint values past the data the commitlog walk ``scan`` found (a
    :class:`~rmqstore.engine.recovery.ScanResult`, None when the log has no segment: only the
    index time is judged then) or past the newest index file."""
    store = ctx.store
    path = paths.checkpoint_path(store.path)
    if not os.path.exists(path):
        return
    cp = StoreCheckpoint.read_file(path)

    def ahead(name: str, pos: int, value: int, detail: str) -> None:
        ctx.found.add(Finding("checkpoint_ahead", path, pos, detail, repairs=(LowerCheckpoint(name, value),)))

    if scan is not None:
        max_ts, last_valid = scan.max_store_timestamp, scan.last_valid
        if cp.confirm_phy_offset > max(last_valid, 0):
            ahead("confirm_phy_offset", 32, max(last_valid, 0),
                  f"confirmPhyOffset {cp.confirm_phy_offset} is past the last valid record at {last_valid}")
        for name, pos in (("physic_msg_timestamp", 0), ("logics_msg_timestamp", 8)):
            v = getattr(cp, name)
            if v > max_ts:
                ahead(name, pos, max_ts, f"{name} {v} is past the newest record's store time {max_ts}")
    with store.index_service.lock:
        ends = [f.end_ts for f in store.index_service.files]
    idx_max = max(ends, default=0)
    if cp.index_msg_timestamp > idx_max:
        ahead("index_msg_timestamp", 16, idx_max, f"indexMsgTimestamp {cp.index_msg_timestamp} is past the newest "
                                                  f"index file's end time {idx_max}")


def tail_extents(store, files, data_end: int) -> list:
    """The extents ``(mapped file, start, end)`` of non-zero bytes after the end of valid data: a
    reader's ``data_end``, a writer's own end (confirmed or appended, whichever is further)."""
    if not files:
        return []
    if store.read_only:
        end = data_end
    else:
        end = max(store.commit_log.confirm_offset, store.commit_log.queue.max_offset)
    return R.tail_extents(files, end, R.max_record_size(store.cfg) + 4096)


def check_tail(ctx: VerifyContext, data_end: int) -> None:
    """Non-zero bytes after the end of valid data (a writer: call under the commit log's put lock)."""
    for mf, a, b in tail_extents(ctx.store, ctx.files, data_end):
        first = a + int(np.flatnonzero(mf.u8[a:b])[0])
        ctx.found.add(Finding("tail_garbage", mf.path, first,
                              f"non-zero bytes in [{mf.file_from_offset + first}, {mf.file_from_offset + b}) after "
                              f"the end of valid data at {mf.file_from_offset + a}",
                              repairs=(CutTail(mf.path, a, b),)))
