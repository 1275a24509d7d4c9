"""Spark verify: the findings of ``MessageStore.verify`` (:mod:`rmqstore.engine.verify`), computed
in parallel by the verifier's own public checks.

The store's verifier walks the commitlog once from its start. Here the walk is cut into byte ranges
(spans): each task runs the same walk (:func:`rmqstore.engine.verify.walk_commitlog`, CRC checks,
bad bytes skipped when an intact record follows) with the same per-batch checks
(:class:`~rmqstore.engine.verify.LogChecks`) from the first record of its span to the first position
past its end, and reports what it found and where it crossed the span end. The driver follows the
chain from span to span; a span whose start does not line up with where the previous one crossed
(a span boundary inside a damaged region) is scanned again from the right position. Consume queues
(a group of queues per task) and index files (a group of files per task) are checked by
:func:`~rmqstore.engine.verify.check_consume_queues` and
:func:`~rmqstore.engine.verify.check_index_file` over a read-only store opened in the task (a
:class:`~rmqstore.engine.verify.VerifyContext` with the driver's :class:`~rmqstore.engine.verify.LogFacts`);
the check that every key of every record is in the index is a Spark anti-join; the checkpoint and
the tail after the end of valid data are one small task (:func:`~rmqstore.engine.verify.check_checkpoint`,
:func:`~rmqstore.engine.verify.check_tail`).
"""
from __future__ import annotations

import contextlib

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import ByteType, IntegerType, LongType, StringType, StructField, StructType

from ..format import message as M
from . import scan as S
from .tasks import SpecReader, SpecSource, cfg_from_json, open_fs

FINDING, QUEUE_EDGE, KEY, GOOD_ITEM, SPAN = 0, 1, 2, 3, 4

VERIFY_SCHEMA = StructType([
    StructField("row", ByteType(), False),
    StructField("span", IntegerType(), True),
    StructField("kind", StringType(), True),      # finding
    StructField("path", StringType(), True),
    StructField("offset", LongType(), True),
    StructField("detail", StringType(), True),
    StructField("topic", StringType(), True),     # queue edge: first/last queue offset of a queue in a span
    StructField("queueId", IntegerType(), True),
    StructField("q1", LongType(), True),
    StructField("phy1", LongType(), True),
    StructField("q2", LongType(), True),
    StructField("phy2", LongType(), True),
    StructField("phy", LongType(), True),         # key / good index item
    StructField("hash", IntegerType(), True),
    StructField("info", StringType(), True),      # span summary (JSON)
])


@dataclass(frozen=True)
class SegmentName:
    """What the verifier's checks need to name a commitlog position: a segment's start, size and path."""

    file_from_offset: int
    file_size: int
    path: str


def light_files(store_dir: str, segments: list[int], seg_size: int) -> list[SegmentName]:
    """The segments, to name positions by (nothing is mapped)."""
    return [SegmentName(s, seg_size, S.segment_path(store_dir, s)) for s in segments]


def log_checks(cfg, files):
    """The verifier's per-batch commitlog checks (:class:`rmqstore.engine.verify.LogChecks`) for a span."""
    from ..engine.verify import LogChecks

    return LogChecks(files, cfg, cfg.delay_levels_ms)


def corrupt_finding(c, files):
    """The verifier's finding for a damaged commitlog region (same path, offset and text)."""
    from ..engine.verify import corrupt_finding as finding

    return finding(files, c)


# ================================================================================================
# The source: one task per span group / queue group / index-file group / checkpoint+tail
# ================================================================================================

class TaskPartition(InputPartition):
    def __init__(self, index: int, task: dict):
        super().__init__(index)
        self.index, self.task = index, task


class VerifyReader(SpecReader):
    """spec: ``store``, ``cfg``, ``segments`` and ``tasks`` (each a dict with ``mode``)."""

    def partitions(self):
        return [TaskPartition(i, t) for i, t in enumerate(self.spec["tasks"])]

    def read(self, partition):
        from pyspark.sql.pandas.types import to_arrow_schema

        spec, task = self.spec, partition.task
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        cfg = cfg_from_json(spec["cfg"])
        open_fs(spec)
        rows = {"log": _log_rows, "queues": _queue_rows, "index": _index_rows, "misc": _misc_rows}[task["mode"]](
            spec["store"], cfg, spec["segments"], task)
        batch: list[dict] = []
        for r in rows:
            batch.append(r)
            if len(batch) >= 4096:
                yield pa.RecordBatch.from_pylist(batch, schema=arrow_schema)
                batch = []
        if batch:
            yield pa.RecordBatch.from_pylist(batch, schema=arrow_schema)


def _finding_row(f, span: int | None = None) -> dict:
    return {"row": FINDING, "span": span, "kind": f.kind, "path": f.path, "offset": f.offset, "detail": f.detail}


# --- commitlog spans ------------------------------------------------------------------------------

def _log_rows(store_dir: str, cfg, segments: list[int], task: dict):
    for span_id, seg0, a, b, start in task["spans"]:
        yield from _scan_span(store_dir, cfg, segments, span_id, S.Span(seg0, a, b), start)


def _scan_span(store_dir: str, cfg, segments: list[int], span_id: int, span: S.Span, start: int | None):
    """Scan one span like the verifier scans the log; rows: findings, queue edges, keys, summary."""
    from ..engine import recovery as R
    from ..engine.verify import walk_commitlog

    seg_size = cfg.mapped_file_size_commit_log
    light = light_files(store_dir, segments, seg_size)
    info = {"span": span_id, "seg": span.seg, "start": span.start, "end": span.end, "first": None, "cross": None,
            "stop": None, "reason": "", "records": 0, "last_valid": -1, "max_ts": 0}
    if start is None:
        start = _span_start(store_dir, seg_size, span)
    if start is None:
        yield {"row": SPAN, "span": span_id, "info": json.dumps(info)}
        return
    info["first"] = start
    limit = span.end + R.max_record_size(cfg) + 8
    files = _span_files(store_dir, seg_size, segments, span, limit)
    scan = _SpanScan(log_checks(cfg, light), span.end)
    try:
        res = walk_commitlog(files, start, cfg, limit, scan.on_batch)  # the verifier's walk
        scan.count(res, info)
    finally:
        for mf in files:
            mf.close()
    yield from scan.rows(span_id, res, light, info)


def _span_start(store_dir: str, seg_size: int, span: S.Span) -> int | None:
    """Where the scan of a span starts: its segment's start, or the first record (or closing
    blank) in the span; None when there is none."""
    if span.start == span.seg:
        return span.seg
    window = (span.start - span.seg, min(seg_size, span.end - span.seg + 8))
    with S.Segment(store_dir, span.seg, seg_size, window) as seg:
        p = _framing_start(seg, span.start - seg.start, span.end - seg.start)
    return None if p is None else span.seg + p


def _span_files(store_dir: str, seg_size: int, segments: list[int], span: S.Span, limit: int) -> list:
    """The segments a span's scan reads up to ``limit``, mapped over the part it reads."""
    i = segments.index(span.seg)
    j = i
    while j + 1 < len(segments) and segments[j + 1] < limit:
        j += 1
    files = [S.open_segment(store_dir, s, seg_size, (max(0, span.start - s), min(seg_size, limit - s)))
             for s in segments[i:j + 2]]
    for mf in files:
        mf.wrote_position = mf.flushed_position = seg_size
    return files


class VerifySource(SpecSource):
    NAME, SCHEMA, READER = "rmqstore_verify", VERIFY_SCHEMA, VerifyReader


class _SpanScan:
    """What one span's scan gathers: the verifier's :class:`LogChecks` over the records that start
    before the span's ``end``, each queue's first record in the span (its edge), the positions where
    the scan crossed the end, and the batches (for the counters)."""

    def __init__(self, checks, end: int):
        from .columns import TopicDecoder

        self.checks, self.end = checks, end
        self.topics = TopicDecoder()
        self.firsts: dict[tuple[str, int], tuple[int, int]] = {}
        self.crossing: list[int] = []
        self.kept: list[tuple[object, M.RecordBatch]] = []

    def on_batch(self, mf, batch) -> None:
        abs_starts = batch.starts + mf.file_from_offset
        beyond = abs_starts[abs_starts >= self.end]
        if beyond.size:
            self.crossing.append(int(beyond[0]))
        k = int(np.searchsorted(abs_starts, self.end))
        if k == 0:
            return
        if k < len(batch):
            batch = batch.take(k)
        codes = self.topics.codes(mf.mm, batch)
        tx = batch.sys_flag & M.SYSFLAG_TX_MASK
        for r in np.flatnonzero((tx != M.TX_PREPARED) & (tx != M.TX_ROLLBACK)).tolist():
            key = (self.topics.names[int(codes[r])], int(batch.queue_id[r]))
            if key not in self.firsts:
                self.firsts[key] = (int(batch.queue_offset[r]), int(batch.phy_offset[r]))
        self.checks.on_batch(mf, batch)
        self.kept.append((mf, batch))

    def count(self, res, info: dict) -> None:
        """The verifier's counters, for the valid records of this span only (``res``: the scan's result)."""
        bad = {c.offset for c in res.corrupt}
        for mf, batch in self.kept:
            abs_starts = batch.starts + mf.file_from_offset
            good = ~np.isin(abs_starts, np.fromiter(bad, dtype=np.int64, count=len(bad)))
            if good.any():
                info["records"] += int(good.sum())
                info["last_valid"] = max(info["last_valid"], int(abs_starts[good][-1]))
                info["max_ts"] = max(info["max_ts"], int(batch.store_timestamp[good].max()))

    def rows(self, span_id: int, res, light: list, info: dict):
        """Findings, queue edges, keys and the span summary (where the chain crosses the end)."""
        crossing, b, checks = self.crossing, self.end, self.checks
        for c in res.corrupt:
            if c.offset < b:
                yield _finding_row(corrupt_finding(c, light), span_id)
                crossing.append(c.offset + c.length)
            else:
                crossing.append(c.offset)
        for f in checks.found.items:  # queue offset jumps inside the span
            yield _finding_row(f, span_id)
        if res.reason != "limit":
            info["stop"], info["reason"] = res.end, res.reason
        crossing.append(res.end)
        past = [c for c in crossing if c >= b]
        info["cross"] = min(past) if past else None
        for (t, q), (qo, phy) in self.firsts.items():
            last_qo, last_phy = checks.queue_last[(t, q)]
            yield {"row": QUEUE_EDGE, "span": span_id, "topic": t, "queueId": q, "q1": qo, "phy1": phy,
                   "q2": last_qo, "phy2": last_phy}
        for phys, hashes in checks.expected_keys:
            for p, h in zip(phys.tolist(), hashes.tolist()):
                yield {"row": KEY, "span": span_id, "phy": p, "hash": h}
        yield {"row": SPAN, "span": span_id, "info": json.dumps(info)}


def _framing_start(seg: S.Segment, a: int, b: int) -> int | None:
    """First position in [a, b) where a record with intact framing (the verifier's chain: length
    formula, PHYSICALOFFSET = position) or the closing blank starts; None if none."""
    p = seg.find_record_start(a, b)
    blank = seg.mm.find(M.BLANK.pack(0, M.BLANK_MAGIC)[4:], a + 4, min(b + 8, seg.size))
    while blank >= 0:
        q = blank - 4
        if q >= b or (p is not None and q >= p):
            break
        if q >= a and M.BLANK.unpack_from(seg.mm, q)[0] == seg.size - q:
            return q
        blank = seg.mm.find(M.BLANK.pack(0, M.BLANK_MAGIC)[4:], blank + 1, min(b + 8, seg.size))
    return p


# --- consume queues, index files, checkpoint and tail (a read-only store per task) ----------------

@contextlib.contextmanager
def _checks(store_dir: str, cfg, queues=None):
    """A read-only store for one task and a verify context over it (the verifier's own checks
    judge its files: no stand-ins), judging only ``queues`` when given; closed after."""
    from ..engine.verify import Snapshot, VerifyContext
    from ..message_store import MessageStore

    st = MessageStore.open(store_dir, cfg, read_only=True, stand_in_derived=False)  # judge the files themselves
    try:
        snap = Snapshot.take(st)
        yield st, VerifyContext.of(st, snapshot=snap if queues is None else snap.for_queues(queues))
    finally:
        st.close()


def _queue_rows(store_dir: str, cfg, segments, task: dict):
    from ..engine import verify as V

    with _checks(store_dir, cfg, [(t, q) for t, q in task["queues"]]) as (_, ctx):
        facts = V.LogFacts(end=task["end"], queue_last={(t, q): (qo, phy) for t, q, qo, phy in task["queue_last"]})
        V.check_consume_queues(ctx, facts)
        yield from map(_finding_row, ctx.found.items)


def _index_rows(store_dir: str, cfg, segments, task: dict):
    from ..engine import verify as V

    with _checks(store_dir, cfg) as (st, ctx):
        names = set(task["files"])
        for f in st.index_service.files:
            if f.name not in names:
                continue
            phys, hashes = V.check_index_file(ctx, f, task["end"])
            for p, h in zip(phys.tolist(), hashes.tolist()):
                yield {"row": GOOD_ITEM, "phy": p, "hash": h}
        yield from map(_finding_row, ctx.found.items)


def _misc_rows(store_dir: str, cfg, segments, task: dict):
    from ..engine import recovery as R
    from ..engine import verify as V

    with _checks(store_dir, cfg) as (st, ctx):
        V.check_checkpoint(ctx, R.ScanResult(end=task["end"], last_valid=task["last_valid"], records=task["records"],
                                             reason=task["reason"], max_store_timestamp=task["max_ts"]))
        V.check_tail(ctx, task["end"])
        yield from map(_finding_row, ctx.found.items)
        yield {"row": SPAN, "info": json.dumps({"judge_lag": bool(ctx.snapshot.judge_lag),
                                                "index_files": len(st.index_service.files)})}


# ================================================================================================
# Driver side: following the chain of spans
# ================================================================================================

@dataclass
class Chain:
    end: int
    reason: str
    spans: list[int]          # spans on the chain, in order
    records: int
    last_valid: int
    max_ts: int
    rescan: dict[int, int]    # span -> position it must be scanned from (when it does not line up)


def follow(segments: list[int], seg_size: int, infos: dict[int, dict]) -> Chain:
    """Follow the chain from the first segment's start through the span summaries."""
    spans = sorted(infos.values(), key=lambda x: x["start"])
    used, rescan = [], {}
    records, last_valid, max_ts = 0, -1, 0
    pos = segments[0] if segments else 0
    end, reason = pos, "end of data"
    k = 0
    while k < len(spans):
        sp = spans[k]
        if pos >= sp["end"]:
            k += 1
            continue
        if pos < sp["start"]:  # nothing in between: cannot happen with spans covering the log
            break
        if sp["first"] != pos:
            rescan[sp["span"]] = pos
            break
        used.append(sp["span"])
        records += sp["records"]
        last_valid = max(last_valid, sp["last_valid"])
        max_ts = max(max_ts, sp["max_ts"])
        if sp["stop"] is not None and (sp["cross"] is None or sp["stop"] <= sp["cross"]):
            end, reason = sp["stop"], sp["reason"]
            return Chain(end, reason, used, records, last_valid, max_ts, rescan)
        if sp["cross"] is None:
            end, reason = sp["end"], "end of data"
            return Chain(end, reason, used, records, last_valid, max_ts, rescan)
        pos = sp["cross"]
        end = pos
        k += 1
    return Chain(end, reason, used, records, last_valid, max_ts, rescan)
