"""Array helpers shared by the batch codecs and writers."""
from __future__ import annotations

import numpy as np


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for non-negative integer keys, several times faster:
    each key is packed with its position into one int64 (``key << bits | position``) and the
    packed values are sorted in place (equal keys keep their order because positions differ).
    Falls back to the stable argsort when the packed value would not fit in 63 bits."""
    n = int(keys.size)
    if n < 2:
        return np.arange(n, dtype=np.int64)
    k = keys.astype(np.int64, copy=False)
    lo, hi = int(k.min()), int(k.max())
    bits = (n - 1).bit_length()
    if lo < 0 or hi.bit_length() + bits > 62:
        return np.argsort(keys, kind="stable")
    packed = k << bits
    packed |= np.arange(n, dtype=np.int64)
    packed.sort()
    packed &= (1 << bits) - 1
    return packed


def range_positions(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The positions ``starts[i] + j`` for ``j < lens[i]``, range after range, in one int64 array
    (what ``np.repeat(starts - offsets, lens) + np.arange(total)`` gives, with ``offsets`` each
    range's place in the output). Built from one cumulative sum over jumps placed where each range
    begins: with a pure-Python thread spinning beside it, ``np.repeat`` held the GIL for its whole
    copy and ``cumsum`` (a ufunc loop) did not, and this runs in the dispatcher thread beside
    producers that need the GIL."""
    lens = np.asarray(lens, dtype=np.int64)
    keep = lens > 0
    if not keep.all():
        starts, lens = starts[keep], lens[keep]
    n = int(lens.size)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lens)
    total = int(offsets[-1])
    offsets -= lens
    shift = np.asarray(starts, dtype=np.int64) - offsets  # source minus output position, per range
    out = np.zeros(total, dtype=np.int64)
    out[offsets[0]] = shift[0]
    out[offsets[1:]] = np.diff(shift)
    np.cumsum(out, out=out)
    out += np.arange(total, dtype=np.int64)
    return out


def rows_at(u8: np.ndarray, offs: np.ndarray, width: int) -> np.ndarray:
    """The rows ``u8[o:o + width]`` for each ``o`` of ``offs``, as an ``(n, width)`` copy.

    Taken from a strided view whose row ``o`` starts at byte ``o``, so numpy copies ``width`` bytes
    per row: for rows of 48 bytes and more, about ten times faster than indexing through an
    ``offs[:, None] + arange(width)`` matrix. An offset whose row does not fit raises IndexError,
    as that indexing would."""
    if u8.size < width:
        return u8[np.asarray(offs)[:, None] + np.arange(width)]
    step = u8.strides[0]  # (the ndarray constructor checks the view against the buffer's size;
    # it costs a tenth of numpy's as_strided, a Python function, in the dispatcher's GIL-held time)
    return np.ndarray((u8.size - width + 1, width), np.uint8, u8, 0, (step, step))[offs]


def padded_rows(u8: np.ndarray, offs: np.ndarray, lens: np.ndarray, width: int, fill: int) -> np.ndarray:
    """:func:`rows_at` with the bytes of row i past ``lens[i]`` set to ``fill``. Every row must
    fit in ``u8`` even where ``lens[i] < width``."""
    rows = rows_at(u8, offs, width)
    if width and int(lens.min()) < width:
        np.copyto(rows, fill, where=np.arange(width) >= lens[:, None])
    return rows
