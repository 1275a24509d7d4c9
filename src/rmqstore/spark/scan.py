"""Reading a byte range of the commitlog, the unit of work of every Spark task.

A *span* is ``[start, end)`` inside one commitlog segment; the records that belong to it are the
ones whose first byte lies in it, so every record belongs to exactly one span whatever the span
boundaries are. A task does not need the bytes before its span: it resynchronises on the first
position ``p >= start`` where the magic code is V1/V2, ``PHYSICALOFFSET == segment start + p`` and
the framing (length formula) holds, then follows TOTALSIZE as the store does. The last record of a
span may end past ``end``; the next span finds the record after it the same way.

Only the segment's mmap is touched (read-only), records are decoded in batches of a few thousand
through the commitlog cursor (:mod:`rmqstore.format.cursor`: the walk, the resynchronisation rule
and the record checks that recovery, verify and dispatch use too), and nothing here imports
pyspark, so the code is shared by the data source, the jobs, the tests and the benchmark.

Besides the records, a scan reports where its run of consecutive records (the *chain*) stops and
why (:class:`SpanSummary`); the driver stitches the summaries of all spans into the end of valid
data without reading a byte itself (:func:`stitch_chain`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..format import cursor as C
from ..format import message as M
from ..io.mapped_file import MappedFile
from . import fs as RFS
from .spans import (Span, claim_order, cut_tails, estimate_data_end, group_spans,  # noqa: F401 (re-exported:
                    list_segments, plan_balanced, plan_spans, segment_gaps, segment_path)  # scan keeps its names)
from ..io import paths

COMMITLOG = paths.COMMITLOG
DEFAULT_SPLIT_SIZE = 64 << 20
DEFAULT_BATCH_RECORDS = 4096
#: A batch is also cut when its records exceed this many bytes (bodies can be 4 MiB each).
DEFAULT_BATCH_BYTES = 32 << 20
#: bytes read past a span's end in a remote segment: a record starting in the span may end there
#: (RocketMQ's default maxMessageSize is 4 MiB, plus properties and header)
REMOTE_TAIL = 5 << 20


# what is found at a position of the chain (SpanSummary.stop_kind / head_kind): the cursor's Stop
RECORD, BLANK, END, INVALID, CRC, TORN, SEGMENT_END = (C.Stop.RECORD, C.Stop.BLANK, C.Stop.END, C.Stop.INVALID,
                                                       C.Stop.CORRUPT, C.Stop.TORN, C.Stop.SEGMENT_END)


# ------------------------------------------------------------------------------------------------
# One segment, mapped read-only
# ------------------------------------------------------------------------------------------------

def open_segment(store_dir: str, seg_start: int, seg_size: int, window: tuple[int, int] | None = None) -> MappedFile:
    """A commitlog segment as a read-only :class:`MappedFile`: mapped when local (a short one, as the
    store does, by a stand-in holding what is left of it); when remote, the bytes of ``window``
    (relative; default all) read into an anonymous segment-sized mapping (:func:`.fs.remote_mapping`)."""
    if RFS.is_remote(store_dir):
        lo, hi = window if window is not None else (0, seg_size)
        return RFS.remote_mapping(store_dir, f"{COMMITLOG}/{seg_start:020d}", seg_size, lo, hi)
    path = segment_path(store_dir, seg_start)
    if os.path.getsize(path) < seg_size:  # short (damaged): what is left of it, zeros after
        return MappedFile.stand_in_for(path, seg_size, "short")
    return MappedFile(path, seg_size, read_only=True)


class Segment:
    """A commitlog segment mapped read-only; ``mm`` for ``struct``, ``u8`` for numpy."""

    def __init__(self, store_dir: str, seg_start: int, seg_size: int, window: tuple[int, int] | None = None):
        self.start = seg_start
        self.size = seg_size
        self.mf = open_segment(store_dir, seg_start, seg_size, window)
        self.mm = self.mf.mm
        self.u8 = self.mf.u8
        self.path = self.mf.path

    def close(self) -> None:
        self.u8 = None
        self.mf.close()

    def __enter__(self) -> "Segment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- positions (relative to the segment start) ----------------------------------------------
    def is_record_at(self, p: int) -> bool:
        """A record that resynchronisation accepts starts at ``p`` (:func:`rmqstore.format.cursor.is_record_at`)."""
        return C.is_record_at(self.mm, self.u8, self.size, self.start, p)

    def find_record_start(self, pos: int, limit: int) -> int | None:
        """First ``p`` in ``[pos, limit)`` where :meth:`is_record_at` holds, or None."""
        return C.find_record_start(self.mm, self.u8, self.size, self.start, pos, limit)

    def kind_at(self, p: int) -> str:
        """What the chain finds at ``p``: a record header, a blank, the zero end of data, or junk."""
        return C.kind_at(self.mm, self.size, p)


# ------------------------------------------------------------------------------------------------
# Scanning a span
# ------------------------------------------------------------------------------------------------

@dataclass
class SpanSummary:
    """How the records of a span hang together (absolute offsets).

    ``first``: the first record start found at or after ``start`` (None: no record in the span).
    ``chain_end``/``stop_kind``: where the run of consecutive valid records from ``first`` stops
    and what is there (``record`` when the run simply continues into the next span).
    ``head_kind``: what is at ``start`` itself. ``breaks``: every place inside the span where a run
    stopped on something other than the end of data, as ``(offset, kind, detail)``.
    """

    span: Span
    first: int | None = None
    chain_end: int | None = None
    stop_kind: str | None = None
    stop_detail: str = ""
    head_kind: str = ""
    breaks: list[tuple[int, str, str]] = field(default_factory=list)
    records: int = 0
    bytes: int = 0

    def to_dict(self) -> dict:
        return {"seg": self.span.seg, "start": self.span.start, "end": self.span.end, "first": self.first,
                "chain_end": self.chain_end, "stop_kind": self.stop_kind, "stop_detail": self.stop_detail,
                "head_kind": self.head_kind, "breaks": [list(b) for b in self.breaks], "records": self.records,
                "bytes": self.bytes}

    @classmethod
    def from_dict(cls, d: dict) -> "SpanSummary":
        return cls(Span(d["seg"], d["start"], d["end"]), d["first"], d["chain_end"], d["stop_kind"],
                   d["stop_detail"], d["head_kind"], [tuple(b) for b in d["breaks"]], d["records"], d["bytes"])


def _walk_limit(s: SpanSummary, p: int, b: int, batch_records: int) -> int:
    """How many records the next walk from ``p`` may follow: ``batch_records``, or fewer when the
    records seen so far in the span (their mean size) say the span's end ``b`` comes sooner.

    The walk follows TOTALSIZE one record at a time in Python, and the records past ``b`` are
    thrown away, so walking a whole batch from near the end of a span would cost up to a batch of
    wasted steps in every span (small spans, as dynamic balancing uses, pay it often). An
    estimate that falls short only makes one more, smaller batch: the scan goes on from where the
    walk stopped, and batch boundaries never change what a scan yields."""
    if s.records < 64:  # no mean yet: a record takes at least 91 bytes
        return max(16, min(batch_records, (b - p) // 91 + 2))
    mean = s.bytes / s.records
    return max(16, min(batch_records, int((b - p) / mean * 1.25) + 16))


@dataclass(frozen=True)
class ScanOptions:
    """How a span is scanned: ``check_crc`` verifies every record's CRC (the body CRC, or the
    ``__CRC32#`` property with ``prop_crc``) and a mismatch breaks the run like an invalid record;
    ``salvage`` goes on past a break (resynchronising); batches hold at most ``batch_records``
    records and ``batch_bytes`` bytes."""

    check_crc: bool = False
    prop_crc: bool = False
    salvage: bool = True
    batch_records: int = DEFAULT_BATCH_RECORDS
    batch_bytes: int = DEFAULT_BATCH_BYTES


def scan_span(seg: Segment, span: Span, summary: SpanSummary | None = None, opts: ScanOptions | None = None, **kw):
    """Yield :class:`~rmqstore.format.message.RecordBatch` es (positions relative to the segment)
    of the valid records that start in ``span``, in commitlog order, filling ``summary``.

    Options (:class:`ScanOptions`, or its fields as keywords): with ``check_crc`` every record's CRC
    is verified. Without it, the last record before the end of data is still checked, so a torn tail
    (a header on disk without all of its bytes) is never returned. After a break the scan
    resynchronises and goes on, noting the break in the summary (``salvage``), or stops there (only
    the run of records from ``first``)."""
    yield from _SpanScan(seg, span, summary if summary is not None else SpanSummary(span),
                         opts if opts is not None else ScanOptions(**kw)).run()


class _SpanScan:
    """One :func:`scan_span`: the cursor over the span, the chain it follows, the breaks it notes."""

    def __init__(self, seg: Segment, span: Span, summary: SpanSummary, opts: ScanOptions):
        self.seg, self.s, self.o = seg, summary, opts
        self.a, self.b = span.start - seg.start, span.end - seg.start
        self.in_chain = True  # still on the run of records that started at `first`

    def stop(self, pos: int, kind: str, detail: str = "") -> None:
        if self.in_chain:
            s = self.s
            s.chain_end, s.stop_kind, s.stop_detail = self.seg.start + pos, kind, detail
            self.in_chain = False

    def brk(self, pos: int, kind: str, detail: str) -> None:
        self.s.breaks.append((self.seg.start + pos, kind, detail))
        self.stop(pos, kind, detail)

    def run(self):
        seg, s, b = self.seg, self.s, self.b
        s.head_kind = seg.kind_at(self.a)
        p = seg.find_record_start(self.a, b)
        if p is None:
            return
        s.first = seg.start + p
        while p is not None and p < b:
            batch, k, kind, detail = self._next_batch(p)
            if k:
                out = batch.take(k) if k < len(batch) else batch
                s.records += k
                s.bytes += int(out.total.sum())
                yield out
                p = int(out.starts[-1] + out.total[-1])
            if k < len(batch):
                self.brk(int(batch.starts[k]), kind, detail)
                if not self.o.salvage:
                    return
                p = seg.find_record_start(int(batch.starts[k]) + 1, b)
                continue
            p = self._after_run(p)

    def _next_batch(self, p: int):
        """The next batch from ``p`` (records starting in the span, at most the options' size), how
        many of its records are good, and what the first bad one is."""
        seg, o = self.seg, self.o
        starts, halt = C.walk_starts(seg.mm, p, seg.size, _walk_limit(self.s, p, self.b, o.batch_records))
        starts = starts[:int(np.searchsorted(starts, self.b))]  # only records that start in the span
        batch = M.decode_batch(seg.u8, starts)
        if len(batch) > 1 and o.batch_bytes:
            cut = max(1, int(np.searchsorted(np.cumsum(batch.total), o.batch_bytes, side="right")))
            if cut < len(batch):
                batch = batch.take(cut)
        step = C.check_framing(seg.mm, seg.u8, batch, halt, None)
        k = len(step.batch)
        kind, detail = INVALID, step.halt.reason if k < len(batch) else ""
        after = int(batch.starts[k - 1] + batch.total[k - 1]) if k else p
        after_kind = seg.kind_at(after) if k == len(batch) else INVALID
        if k and (o.check_crc or after_kind in (END, INVALID, TORN)):
            lo = 0 if o.check_crc else k - 1  # every record, or just the tail record
            ok = C.intact(seg.mm, seg.u8, batch.select(np.arange(lo, k)), o.prop_crc)
            bad = np.flatnonzero(~ok)
            if bad.size:
                k = lo + int(bad[0])
                whole = bool(C.complete(seg.u8, batch.select(np.array([k])))[0])
                kind, detail = CRC, ("record is incomplete (its end is zero-filled)" if not whole else
                                     "properties CRC mismatch" if o.prop_crc else "body CRC mismatch")
        return batch, k, kind, detail

    def _after_run(self, p: int) -> int | None:
        """Where the scan goes on after a run of good records ending at ``p`` (None: it ends)."""
        seg, b = self.seg, self.b
        if p >= b:
            self.stop(p, seg.kind_at(p))
            return None
        kind = seg.kind_at(p)
        if kind == RECORD:
            return p
        if kind in (BLANK, SEGMENT_END):
            self.stop(p, kind)
            return None
        if kind == END:
            self.stop(p, END)
        else:
            self.brk(p, kind, "record runs past the segment end" if kind == TORN else
                     f"invalid record: {M.check_record(seg.mm, p, seg.size, check_crc=False)[2]}")
        if not self.o.salvage:
            return None
        return seg.find_record_start(p + 1, b)  # salvage whatever follows (normally nothing)


def iter_span_batches(store_dir: str, seg_size: int, span: Span, summary: SpanSummary | None = None, **kw):
    """:func:`scan_span` that opens and closes the segment itself; yields ``(segment, batch)``. A
    remote segment is read from the span's start to :data:`REMOTE_TAIL` bytes past its end (the last
    record may run past the span)."""
    window = (span.start - span.seg, min(seg_size, span.end - span.seg + REMOTE_TAIL))
    seg = Segment(store_dir, span.seg, seg_size, window)
    try:
        for batch in scan_span(seg, span, summary, **kw):
            yield seg, batch
    finally:
        seg.close()


# ------------------------------------------------------------------------------------------------
# Stitching summaries into the end of valid data (driver side, no I/O)
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChainEnd:
    """End of valid data ``offset`` (the store's recovery end E) and why the chain stopped there."""

    offset: int
    kind: str
    detail: str = ""
    segment: int | None = None


def stitch_chain(segments: list[int], seg_size: int, summaries: list[SpanSummary]) -> ChainEnd:
    """Follow the chain of records from the first segment's start across the span summaries.

    Same rules as the store's recovery scan: a blank record jumps to the next segment (or ends the
    data in the last one), a zero header ends the data, an invalid record (or, when the scan
    checked CRCs, a CRC mismatch) ends the valid data at its start."""
    if not segments:
        return ChainEnd(0, END)
    by_seg: dict[int, list[SpanSummary]] = {}
    for sm in summaries:
        by_seg.setdefault(sm.span.seg, []).append(sm)
    for v in by_seg.values():
        v.sort(key=lambda x: x.span.start)
    for si, seg in enumerate(segments):
        spans = by_seg.get(seg, [])
        cur = seg
        while True:
            sm = next((x for x in spans if x.span.start <= cur < x.span.end), None)
            if sm is None:
                if cur >= seg + seg_size:
                    return ChainEnd(seg + seg_size, SEGMENT_END, "", seg)
                raise ValueError(f"no span summary covers commitlog offset {cur}")
            if sm.first != cur:
                kind = sm.head_kind if cur == sm.span.start else INVALID
                if kind == BLANK:
                    break
                if kind == RECORD:
                    kind = INVALID
                detail = "" if kind == END else "record at this offset is not valid"
                return ChainEnd(cur, kind, detail, seg)
            cur = sm.chain_end
            if sm.stop_kind == RECORD:
                continue
            if sm.stop_kind == BLANK:
                break
            if sm.stop_kind == SEGMENT_END:
                return ChainEnd(cur, SEGMENT_END, "", seg)
            return ChainEnd(cur, sm.stop_kind, sm.stop_detail, seg)
        # blank: next segment, or the blank ends the data in the last one
        if si == len(segments) - 1:
            return ChainEnd(cur, BLANK, "", seg)
    return ChainEnd(segments[-1] + seg_size, SEGMENT_END, "", segments[-1])
