"""The commitlog's tail after the end of valid data: where its non-zero bytes are, what a cut of
them is (:class:`TailCut`), and saving them under ``recovery/`` before they are cut."""
from __future__ import annotations

import logging
import os

import numpy as np

from ...errors import StoreIOError
from .report import TailCut

log = logging.getLogger(__name__)


def tail_extents(files, end: int, zero_window: int) -> list[tuple[object, int, int]]:
    """(segment, start pos, end pos of non-zero data) of the non-zero bytes at or after ``end``.

    Segments are zero-filled and written front to back, and no valid record holds a run of zeros
    longer than the largest record (``zero_window``), so each segment's scan stops once that many
    zero bytes follow the last non-zero one instead of reading a whole (sparse) segment.
    """
    out = []
    chunk = 1 << 20
    for mf in files:
        seg_start = mf.file_from_offset
        if seg_start + mf.file_size <= end:
            continue
        start = pos = max(0, end - seg_start)
        last_nz = -1
        u8 = mf.u8
        while pos < mf.file_size:
            block = u8[pos:pos + chunk]
            # ``!= 0`` takes a snapshot first: a writer in another process may be filling these very
            # pages (a read-only open of a live store), and flatnonzero on the live view counts and
            # then collects, failing when the count changed in between
            nz = np.flatnonzero(block != 0)
            if nz.size:
                last_nz = pos + int(nz[-1])
            pos += block.size
            if pos - max(last_nz, start) > zero_window:
                break
        if last_nz >= 0:
            out.append((mf, start, last_nz + 1))
    return out


def describe_cuts(extents, reason: str) -> list[TailCut]:
    """The cuts of the tail ``extents`` (:func:`tail_extents`): the first for ``reason`` (why the
    valid data ends), the others as lying after the end of valid data."""
    cuts = []
    for mf, pos, stop in extents:
        cuts.append(TailCut(os.path.basename(mf.path), mf.file_from_offset + pos, stop - pos, reason))
        reason = "after the end of valid data"
    return cuts


def save_cut_bytes(store_dir: str, extents, cuts: list[TailCut]) -> None:
    """Copy the bytes of each of ``extents`` (described by ``cuts``, whose ``saved_to`` is set) to
    ``recovery/<segment>.<n>.cut``, fsync'd, before they are cut."""
    rdir = os.path.join(store_dir, "recovery")
    for (mf, pos, stop), cut in zip(extents, cuts):
        try:
            os.makedirs(rdir, exist_ok=True)
            n = 0
            while os.path.exists(os.path.join(rdir, f"{cut.segment}.{n}.cut")):
                n += 1
            path = os.path.join(rdir, f"{cut.segment}.{n}.cut")
            with open(path, "wb") as fh:
                fh.write(mf.mm[pos:stop])
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as e:
            raise StoreIOError(f"cannot save the {stop - pos} bytes about to be cut: {e.strerror}",
                               path=rdir, offset=cut.offset) from e
        cut.saved_to = path
        log.warning("recovery: cut %d bytes at commitlog offset %d (%s), saved to %s",
                    cut.length, cut.offset, cut.reason, path)
