"""The commitlog as a driver plans it: segment files from their names and sizes alone, and spans
(``[start, end)`` inside one segment) grouped into Spark tasks, evenly or for dynamic balancing.
No byte of a record is read here (:func:`estimate_data_end` reads a few pages to weigh work)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import CorruptRecordError, StoreNotFoundError
from ..io import paths
from . import fs as RFS

COMMITLOG = paths.COMMITLOG


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


