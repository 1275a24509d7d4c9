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
import struct
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import CorruptRecordError, StoreNotFoundError
from ..format import cursor as C
from ..format import message as M
from ..format.hashes import crc32
from ..io.mapped_file import MappedFile
from . import fs as RFS
from ..io import paths

COMMITLOG = paths.COMMITLOG
DEFAULT_SPLIT_SIZE = 64 << 20
DEFAULT_BATCH_RECORDS = 4096
#: A batch is also cut when its records exceed this many bytes (bodies can be 4 MiB each).
DEFAULT_BATCH_BYTES = 32 << 20
#: bytes read past a span's end in a remote segment: a record starting in the span may end there
#: (RocketMQ's default maxMessageSize is 4 MiB, plus properties and header)
REMOTE_TAIL = 5 << 20

_TOTAL_MAGIC = struct.Struct(">ii")

# what is found at a position of the chain (SpanSummary.stop_kind / head_kind): the cursor's Stop
RECORD, BLANK, END, INVALID, CRC, TORN, SEGMENT_END = (C.Stop.RECORD, C.Stop.BLANK, C.Stop.END, C.Stop.INVALID,
                                                       C.Stop.CORRUPT, C.Stop.TORN, C.Stop.SEGMENT_END)


# ------------------------------------------------------------------------------------------------
# Layout (driver side: file names and sizes only)
# ------------------------------------------------------------------------------------------------

def segment_path(store_dir: str, seg_start: int) -> str:
    if RFS.is_remote(store_dir):
        return RFS.join(store_dir, COMMITLOG, f"{seg_start:020d}")
    return os.path.join(store_dir, COMMITLOG, f"{seg_start:020d}")


def list_segments(store_dir: str, seg_size: int) -> list[int]:
    """Start offsets of the commitlog segments, from the file names and sizes alone.

    Mirrors the store's load rules: a zero-length *last* file is ignored; a segment missing or
    short in the middle is a gap (:func:`segment_gaps` names them; a short one is read for what is
    left of it), not a refusal; a file larger than ``seg_size`` or named off the segment grid is
    another geometry, a :class:`CorruptRecordError`."""
    return [start for start, _ in _segment_files(store_dir, seg_size)]


def segment_gaps(store_dir: str, seg_size: int) -> list[str]:
    """What is lost to missing or short segments before the last (one line each; empty when none)."""
    files = _segment_files(store_dir, seg_size)
    out = []
    for (start, size), nxt in zip(files, files[1:] + [None]):
        if size < seg_size and nxt is not None:
            out.append(f"segment {segment_path(store_dir, start)} is short ({size} of {seg_size} bytes)")
        if nxt is not None and nxt[0] > start + seg_size:
            out.append(f"segments for offsets [{start + seg_size}, {nxt[0]}) are missing")
    return out


def _segment_files(store_dir: str, seg_size: int) -> list[tuple[int, int]]:
    if RFS.is_remote(store_dir):
        sizes = dict(RFS.list_files(store_dir, RFS.settings_for(store_dir), COMMITLOG))
        d = RFS.join(store_dir, COMMITLOG)
    else:
        if not os.path.isdir(store_dir):
            raise StoreNotFoundError("store directory does not exist", path=store_dir)
        d = os.path.join(store_dir, COMMITLOG)
        if not os.path.isdir(d):
            return []
        sizes = None
    names = sorted(n for n in (sizes if sizes is not None else os.listdir(d)) if n.isdigit() and len(n) == 20)
    out: list[tuple[int, int]] = []
    for i, name in enumerate(names):
        path = f"{d}/{name}" if sizes is not None else os.path.join(d, name)
        size = sizes[name] if sizes is not None else os.path.getsize(path)
        if size == 0 and i == len(names) - 1:
            continue
        if size > seg_size:
            raise CorruptRecordError(f"segment is {size} bytes but the commitlog segment size is {seg_size} "
                                     "(mappedFileSizeCommitLog)", path=path)
        start = int(name)
        if out and (start <= out[-1][0] or (start - out[-1][0]) % seg_size):
            raise CorruptRecordError(f"segment does not follow the one at {out[-1][0]} on the grid of "
                                     f"{seg_size}-byte segments", path=path)
        out.append((start, size))
    return out


@dataclass(frozen=True)
class Span:
    """``[start, end)`` inside the segment starting at ``seg`` (absolute commitlog offsets)."""

    seg: int
    start: int
    end: int


def plan_spans(segments: list[int], seg_size: int, split_size: int, lo: int | None = None,
               hi: int | None = None) -> list[Span]:
    """Spans covering ``[lo, hi)`` (default: every segment). Boundaries sit at
    ``segment start + k * split_size`` (clipped to ``lo``/``hi``), never across a segment."""
    out: list[Span] = []
    for seg in segments:
        a = seg if lo is None else max(seg, lo)
        b = seg + seg_size if hi is None else min(seg + seg_size, hi)
        p = a
        while p < b:
            q = min(seg + ((p - seg) // split_size + 1) * split_size, b)
            out.append(Span(seg, p, q))
            p = q
    return out


def group_spans(spans: list[Span], split_size: int) -> list[list[Span]]:
    """Consecutive spans packed into groups of at most ``split_size`` bytes (one Spark partition
    each): a span is at most ``split_size`` bytes, so small segments share a partition."""
    groups: list[list[Span]] = []
    size = 0
    for sp in spans:
        n = sp.end - sp.start
        if groups and size + n <= split_size:
            groups[-1].append(sp)
            size += n
        else:
            groups.append([sp])
            size = n
    return groups


_PAGE = 4096


def estimate_data_end(store_dir: str, seg_start: int, seg_size: int) -> int:
    """Where the written data of a segment seems to end (absolute offset): the start of the first
    4 KiB page that is all zeros, found by a binary search that takes the pages after the data for
    the segment's zero-filled tail. For weighting work only (a page of zeros inside the data makes
    it wrong, never the result of a job): about ``log2(seg_size / 4096)`` reads of one page."""
    pages = -(-seg_size // _PAGE)
    try:
        fd = os.open(segment_path(store_dir, seg_start), os.O_RDONLY)
    except OSError:
        return seg_start + seg_size
    try:
        lo, hi = 0, pages  # pages before lo hold data; the page at hi (if any) is zero
        while lo < hi:
            mid = (lo + hi) // 2
            if os.pread(fd, _PAGE, mid * _PAGE).count(0) == min(_PAGE, seg_size - mid * _PAGE):
                hi = mid
            else:
                lo = mid + 1
    finally:
        os.close(fd)
    return seg_start + min(seg_size, lo * _PAGE)


def plan_balanced(segments: list[int], seg_size: int, split_size: int, tasks: int,
                  data_end: int | None = None) -> list[list[Span]]:
    """Spans grouped into ``tasks`` groups (one Spark task each) of near-equal bytes of data.

    The data, from the first segment's start to ``data_end`` (default: the end of the last
    segment), is cut into ``tasks`` equal runs; each run is cut into spans at segment boundaries
    and every ``split_size`` bytes from a segment's start (no span crosses a segment or exceeds
    ``split_size``). The last group also covers everything after ``data_end``. Groups hold
    consecutive spans, in commitlog order; empty groups are dropped."""
    if not segments:
        return []
    lo, hi = segments[0], segments[-1] + seg_size
    end = hi if data_end is None else max(lo, min(hi, data_end))
    tasks = max(1, tasks)
    cuts = [lo + (end - lo) * i // tasks for i in range(tasks)] + [hi]
    groups = [plan_spans(segments, seg_size, split_size, a, b) for a, b in zip(cuts, cuts[1:]) if a < b]
    return [g for g in groups if g]


def cut_tails(groups: list[list[Span]], piece: int, data_end: int | None = None,
              tail_fraction: float = 0.5) -> list[list[Span]]:
    """Each group with the last ``tail_fraction`` of its data cut into spans of at most ``piece``
    bytes (the rest as it was), for dynamic balancing: a task works through its own group front to
    back, then takes the unclaimed spans of other groups from their back end (see
    :func:`claim_order`). Big spans first keep the per-span cost low; small spans where the tasks
    meet mean that when one task runs slower (a busy core on a shared machine), the others take
    over its last spans and all finish within about one small span of each other.

    Data is measured up to ``data_end`` (default: everything); the part of a group after it (the
    zero-filled rest of the last segment) is left as planned. Every byte stays in exactly one span,
    in the same order, and no span grows."""
    if piece <= 0:
        raise ValueError(f"piece must be positive, got {piece}")
    out: list[list[Span]] = []
    for g in groups:
        a = g[0].start
        b = g[-1].end if data_end is None else max(a, min(g[-1].end, data_end))
        mid = b - int((b - a) * tail_fraction)
        spans: list[Span] = []
        for sp in g:
            lo, hi = max(sp.start, mid), min(sp.end, b)
            if lo >= hi:  # wholly before the tail, or after the data
                spans.append(sp)
                continue
            if sp.start < lo:
                spans.append(Span(sp.seg, sp.start, lo))
            p = lo
            while p < hi:
                q = min(p + piece, hi)
                spans.append(Span(sp.seg, p, q))
                p = q
            if hi < sp.end:
                spans.append(Span(sp.seg, hi, sp.end))
        out.append(spans)
    return out


def claim_order(sizes: list[int], home: int) -> list[tuple[int, int]]:
    """The order in which the task of group ``home`` tries to claim spans, as ``(group, index)``,
    given how many spans each group holds (``sizes``): its own group front to back, then every
    other group (``home + 1``, ``home + 2``, ... wrapping around) back to front. An owner and a
    thief thus start at opposite ends of a group and meet where the small spans are
    (:func:`cut_tails`); a span that is already claimed is skipped, not waited for."""
    order = [(home, i) for i in range(sizes[home])]
    for k in range(1, len(sizes)):
        g = (home + k) % len(sizes)
        order += [(g, i) for i in range(sizes[g] - 1, -1, -1)]
    return order


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

    def find_record_start(self, pos: int, limit: int) -> int:
        """First ``p`` in ``[pos, limit)`` where :meth:`is_record_at` holds, or -1."""
        p = C.find_record_start(self.mm, self.u8, self.size, self.start, pos, limit)
        return -1 if p is None else p

    def kind_at(self, p: int) -> str:
        """What the chain finds at ``p``: a record header, a blank, the zero end of data, or junk."""
        return C.kind_at(self.mm, self.size, p)


# ------------------------------------------------------------------------------------------------
# CRC checks of a batch
# ------------------------------------------------------------------------------------------------

def complete(seg: Segment, batch: M.RecordBatch) -> np.ndarray:
    """Per record: not torn (:func:`rmqstore.format.cursor.complete`)."""
    return C.complete(seg.u8, batch)


def crc_ok(seg: Segment, batch: M.RecordBatch, prop_crc: bool) -> np.ndarray:
    """Per record: complete and its body CRC (or, with ``prop_crc``, the ``__CRC32#`` property)
    holds, as recovery checks it."""
    whole = C.complete(seg.u8, batch)
    if not whole.any():
        return whole
    if whole.all():
        return C.crc_ok(seg.mm, batch, prop_crc)
    out = whole.copy()
    idx = np.flatnonzero(whole)
    out[idx] = C.crc_ok(seg.mm, C.take(batch, idx), prop_crc)
    return out


take = C.take


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
        if p < 0:
            return
        s.first = seg.start + p
        while 0 <= p < b:
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
            ok = crc_ok(seg, take(batch, np.arange(lo, k)), o.prop_crc)
            bad = np.flatnonzero(~ok)
            if bad.size:
                k = lo + int(bad[0])
                whole = bool(complete(seg, take(batch, np.array([k])))[0])
                kind, detail = CRC, ("record is incomplete (its end is zero-filled)" if not whole else
                                     "properties CRC mismatch" if o.prop_crc else "body CRC mismatch")
        return batch, k, kind, detail

    def _after_run(self, p: int) -> int:
        """Where the scan goes on after a run of good records ending at ``p`` (-1: it ends)."""
        seg, b = self.seg, self.b
        if p >= b:
            self.stop(p, seg.kind_at(p))
            return -1
        kind = seg.kind_at(p)
        if kind == RECORD:
            return p
        if kind in (BLANK, SEGMENT_END):
            self.stop(p, kind)
            return -1
        if kind == END:
            self.stop(p, END)
        else:
            self.brk(p, kind, "record runs past the segment end" if kind == TORN else
                     f"invalid record: {M.check_record(seg.mm, p, seg.size, check_crc=False)[2]}")
        if not self.o.salvage:
            return -1
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


# ------------------------------------------------------------------------------------------------
# The safe end of a live store (streaming)
# ------------------------------------------------------------------------------------------------

#: A tail record (nothing written after it yet) is admitted once it has been seen unchanged for this long.
TAIL_SETTLE_SECONDS = 0.05


@dataclass
class TailState:
    """What the stream reader saw at the end of the live segment last time (driver memory)."""

    seg: int = -1
    walked_to: int = -1           # a record boundary (absolute) known complete
    tail_pos: int = -1            # start of the unconfirmed tail record
    tail_digest: int = -1
    tail_seen: float = 0.0


def _sealed(store_dir: str, segments: list[int], i: int, seg_size: int) -> bool:
    """Segment ``i`` is complete when the next segment already holds its first record (the store
    only writes there after the blank that closes segment ``i``)."""
    if i + 1 >= len(segments):
        return False
    with Segment(store_dir, segments[i + 1], seg_size) as nxt:
        return nxt.is_record_at(0)


def _walk_live(seg: Segment, p: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Record starts and sizes from ``p`` while the framing holds, and why the walk stopped."""
    starts_all, totals_all = [], []
    for step in C.walk(seg.mm, seg.u8, p, seg.size, 65536):
        starts_all.append(step.batch.starts)
        totals_all.append(step.batch.total)
    return np.concatenate(starts_all), np.concatenate(totals_all), step.halt.stop


def end_after_records(store_dir: str, seg_size: int, start: int, end: int, n: int) -> int:
    """The offset after the first ``n`` records that start in ``[start, end)`` (``end`` when there are
    fewer): a micro-batch of at most ``n`` messages (``maxOffsetsPerTrigger``). Headers only."""
    count = 0
    cur = start
    for seg0 in list_segments(store_dir, seg_size):
        if seg0 + seg_size <= cur:
            continue
        if seg0 >= end:
            break
        with Segment(store_dir, seg0, seg_size) as seg:
            p = seg.find_record_start(max(cur, seg0) - seg0, min(end - seg0, seg_size))
            while 0 <= p < end - seg0:
                starts, _ = C.walk_starts(seg.mm, p, seg.size, 65536)
                starts = starts[:int(np.searchsorted(starts, end - seg0))]
                if not starts.size:
                    break
                if count + starts.size > n:
                    return seg0 + int(starts[n - count])
                count += int(starts.size)
                last = int(starts[-1])
                p = last + _TOTAL_MAGIC.unpack_from(seg.mm, last)[0]
                if seg.kind_at(p) != RECORD:
                    break
        cur = seg0 + seg_size
    return end


def safe_end(store_dir: str, seg_size: int, start: int, max_bytes: int | None, state: TailState,
             prop_crc: bool = False, now: float | None = None) -> int:
    """An offset ``end >= start`` such that every record starting in ``[start, end)`` is completely
    written, for a store that another process may be appending to right now.

    A segment whose successor already holds a record is complete, and so is every record of the
    live segment that is followed by another record header or a blank. The last record (nothing
    after it yet) is admitted once its CRC holds and its bytes stayed the same for
    :data:`TAIL_SETTLE_SECONDS` between two calls, which covers writers that copy a record in more
    than one piece. ``max_bytes`` caps ``end - start``. Only headers (and the one tail record) are
    read; ``state`` remembers how far the live segment was walked."""
    now = time.monotonic() if now is None else now
    segments = list_segments(store_dir, seg_size)
    if not segments:
        return start
    cap = None if max_bytes is None else start + max(1, max_bytes)
    cur = max(start, segments[0])
    i = (cur - segments[0]) // seg_size
    while i < len(segments):
        if cap is not None and cur >= cap:
            return cap
        seg0 = segments[i]
        if _sealed(store_dir, segments, i, seg_size):
            cur = seg0 + seg_size
            i += 1
            continue
        with Segment(store_dir, seg0, seg_size) as seg:
            if state.seg == seg0 and state.walked_to >= cur:
                p = state.walked_to - seg0
            else:
                p = 0 if cur == seg0 else seg.find_record_start(cur - seg0, seg_size)
                if p < 0:
                    return cur
                state.seg, state.walked_to = seg0, seg0 + p
            starts, totals, why = _walk_live(seg, p)
            if why == BLANK:  # the writer moved on to the next segment
                state.walked_to = seg0 + seg_size
                cur = seg0 + seg_size
                i += 1
                continue
            end_rel = p
            if starts.size:
                last, last_total = int(starts[-1]), int(totals[-1])
                end_rel = last
                state.walked_to = seg0 + last
                digest = crc32(memoryview(seg.mm)[last:last + last_total])
                same = state.tail_pos == seg0 + last and state.tail_digest == digest
                if same and now - state.tail_seen >= TAIL_SETTLE_SECONDS:
                    tb = M.decode_batch(seg.u8, np.array([last], dtype=np.int64))
                    if bool(crc_ok(seg, tb, prop_crc)[0]):
                        end_rel = last + last_total
                        state.walked_to = seg0 + end_rel
                        state.tail_pos = -1
                elif not same:
                    state.tail_pos, state.tail_digest, state.tail_seen = seg0 + last, digest, now
            end = max(cur, seg0 + end_rel)
            return end if cap is None else min(end, cap)
    return cur if cap is None else min(cur, cap)
