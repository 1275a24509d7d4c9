"""The commitlog checks: every record's framing and CRC (the walk), and per batch of records the
queue offsets of each queue and the index keys each record must be found by (:class:`LogChecks`).

The walk is :func:`walk_commitlog`, the one place verify reads the commitlog in order."""
from __future__ import annotations

import numpy as np

from ...format import message as M
from .. import recovery as R
from ..dispatch import extract_dispatch_columns, queue_groups
from .context import LogFacts, VerifyContext, file_pos
from .findings import Finding, FindingLog


def gap_finding(files, qk, a: int, b: int, phy_a: int, phy_b: int) -> Finding:
    """A queue offset that jumps between two records of a queue in the commitlog (not repairable)."""
    path, pos = file_pos(files, phy_b)
    return Finding("cq_gap", path, pos, f"queue {qk[0]}/{qk[1]}: queue offset jumps from {a} (record at {phy_a}) "
                                        f"to {b} (record at {phy_b}) in the commitlog")


def corrupt_finding(files, span) -> Finding:
    """A damaged commitlog region the walk skipped (a :class:`~rmqstore.engine.recovery` span)."""
    path, pos = file_pos(files, span.offset)
    return Finding(span.kind, path, pos, f"{span.reason}: {span.length} bytes at commitlog offset {span.offset} "
                                         "(kept, never served)")


class LogChecks:
    """The checks made on every batch of commitlog records, on their own (no store needed): queue
    offsets run on without a gap per queue (``cq_gap`` findings), the first record at or beyond each
    queue's end (``cq_hi``), and the index keys each record must be found by. :func:`check_commitlog`
    runs them over the whole log; the Spark verify over one span per task (``files`` only name
    positions: objects with ``file_from_offset``, ``file_size`` and ``path``). Findings go to
    ``found`` (a new :class:`FindingLog` unless given)."""

    def __init__(self, files, cfg, delay_levels_ms, cq_hi: dict | None = None, found: FindingLog | None = None):
        self.files = files
        self.cfg = cfg
        self.delay_levels_ms = delay_levels_ms
        self.cq_hi: dict[tuple[str, int], int] = cq_hi if cq_hi is not None else {}
        self.found = found if found is not None else FindingLog()
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
            self._queue_offsets(batch, (topic, qid), grp)
        if self.cfg.message_index_enable and cols.item_rec.size:
            keep = (tx[cols.item_rec] != M.TX_ROLLBACK)
            self.expected_keys.append((batch.phy_offset[cols.item_rec[keep]].astype(np.int64),
                                       cols.item_hash[keep].astype(np.int64)))

    def _queue_offsets(self, batch: M.RecordBatch, qk: tuple[str, int], grp: np.ndarray) -> None:
        qo = batch.queue_offset[grp]
        prev = self.queue_last.get(qk)
        if prev is not None and int(qo[0]) != prev[0] + 1:
            self.record_gap(qk, prev[0], int(qo[0]), prev[1], int(batch.phy_offset[grp[0]]))
        for j in np.flatnonzero(np.diff(qo) != 1).tolist():
            self.record_gap(qk, int(qo[j]), int(qo[j + 1]), int(batch.phy_offset[grp[j]]),
                            int(batch.phy_offset[grp[j + 1]]))
        self.queue_last[qk] = (int(qo[-1]), int(batch.phy_offset[grp[-1]]))
        if qk not in self.first_beyond:
            beyond = np.flatnonzero(qo >= self.cq_hi.get(qk, 0))
            if beyond.size:
                j = int(beyond[0])
                self.first_beyond[qk] = (int(qo[j]), int(batch.phy_offset[grp[j]]))

    def record_gap(self, qk, a: int, b: int, phy_a: int, phy_b: int) -> None:
        self.found.add(gap_finding(self.files, qk, a, b, phy_a, phy_b))

    def facts(self, scan) -> LogFacts:
        """What these checks and the walk's result ``scan`` found, for the later checks."""
        return LogFacts(scan.end, scan, self.queue_last, self.first_beyond, self.expected_keys)


def walk_commitlog(files, start: int, cfg, limit: int | None, on_batch, progress=None):
    """The commitlog walk of verify (CRC checks, bad bytes skipped when an intact record follows):
    ``on_batch(mf, batch)`` for every batch of valid records from ``start`` up to ``limit``."""
    return R.scan_log(files, start, cfg, check_crc=True, limit_phy=limit, on_batch=on_batch, dispatchable=True,
                      progress=progress)


def check_commitlog(ctx: VerifyContext) -> LogFacts:
    """Walk the whole commitlog with :class:`LogChecks`; findings for damaged records and for valid
    records ending before the end of dispatched data."""
    store, files = ctx.store, ctx.files
    if not files:
        return LogFacts()
    cfg = store.cfg
    base = store.commit_log.min_offset
    limit = ctx.snapshot.limit
    checks = LogChecks(files, cfg, store.delay_levels_ms, ctx.snapshot.cq_hi, ctx.found)
    prog = (lambda phy: ctx.progress.advance(max(0, phy - base))) if ctx.progress.callback else None
    scan = walk_commitlog(files, base, cfg, limit, checks.on_batch, prog)
    ctx.progress.add(max(0, store.commit_log.confirm_offset - base))
    for s in scan.corrupt:
        ctx.found.add(corrupt_finding(files, s))
    if limit is not None and scan.end < limit:
        path, pos = file_pos(files, scan.end)
        kind = "record_crc" if "CRC" in scan.reason or "incomplete" in scan.reason else "record_invalid"
        ctx.found.add(Finding(kind, path, pos, f"{scan.reason}: the store holds data up to {limit} but valid records "
                                               f"end at {scan.end}"))
    return checks.facts(scan)
