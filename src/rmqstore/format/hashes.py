"""Java-compatible hashes and checksums, scalar and vectorised.

* :func:`java_hash` — ``java.lang.String#hashCode`` over UTF-16 code units (surrogate pairs count
  as two units), returned as a signed 32-bit int.
* :func:`java_hash_many` — the same for a list of strings at once with numpy.
* :func:`index_key_hash` — ``abs(hash("topic#key"))`` with ``Integer.MIN_VALUE`` mapped to 0
  (FORMAT.md §6.2, quirk 15.3).
* :func:`crc32` — zlib CRC-32 masked to 31 bits (FORMAT.md §0, quirk 15.8).
"""
from __future__ import annotations

import functools
import sys
import zlib
from operator import mul
from typing import Sequence

import numpy as np

from .arrays import range_positions, rows_at

_MASK32 = 0xFFFFFFFF
INT_MIN = -(1 << 31)


try:  # ISA-L's CRC-32 (SIMD): the same value as zlib's, 3-4 times faster on 1 KiB bodies here
    from isal.isal_zlib import crc32 as crc32_raw
except ImportError:  # pragma: no cover - a platform without isal wheels
    crc32_raw = zlib.crc32


def crc32(data) -> int:
    """CRC-32 (IEEE, as ``zlib.crc32``) masked with ``0x7FFFFFFF``."""
    return crc32_raw(data) & 0x7FFFFFFF


def _to_i32(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


#: ``_POW31_WEIGHTS[k]``: 31**(k-1), ..., 31, 1 mod 2**32, the weights of a run of k code units
_POW31_SPAN = 256
_POW31_WEIGHTS = [[pow(31, i, 1 << 32) for i in range(k - 1, -1, -1)] for k in range(_POW31_SPAN + 1)]
_POW31_SPAN_SHIFT = pow(31, _POW31_SPAN, 1 << 32)
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def java_hash(s: str) -> int:
    """``String.hashCode()`` of ``s``: signed i32 over its UTF-16 code units,
    ``sum(unit[i] * 31**(n-1-i)) mod 2**32``, as one C-level ``sum(map(mul, ...))`` over the
    units (the bytes of an ASCII string, else its UTF-16 code units) and their weights, per run
    of up to 256 units."""
    units = s.encode("ascii") if s.isascii() else \
        memoryview(s.encode(_UTF16_NATIVE, "surrogatepass")).cast("H")
    n = len(units)
    if n <= _POW31_SPAN:
        return _to_i32(sum(map(mul, units, _POW31_WEIGHTS[n])) & _MASK32)
    h = 0
    for lo in range(0, n, _POW31_SPAN):  # Horner over runs: h * 31**len(run) + the run's own sum
        run = units[lo:lo + _POW31_SPAN]
        shift = _POW31_SPAN_SHIFT if len(run) == _POW31_SPAN else pow(31, len(run), 1 << 32)
        h = (h * shift + sum(map(mul, run, _POW31_WEIGHTS[len(run)]))) & _MASK32
    return _to_i32(h)


@functools.lru_cache(maxsize=65536)
def java_hash_cached(s: str) -> int:
    """:func:`java_hash` memoised; for strings that repeat (tags, topics)."""
    return java_hash(s)


def abs_key_hash(h: int) -> int:
    """``Math.abs(h)``, with the one value that stays negative forced to 0."""
    return 0 if h == INT_MIN else abs(h)


#: :func:`index_key_hash` hashes a key's last this many characters each time and memoises the hash of
#: ``topic#`` and the rest: a producer's unique keys share their first 20 of 32 characters (host,
#: process, class loader), so a broker hashes 12 characters a key instead of topic and key
_TAIL = 12
_TAIL_SHIFT = pow(31, _TAIL, 1 << 32)
_TAIL_WEIGHTS = _POW31_WEIGHTS[_TAIL]


@functools.lru_cache(maxsize=16384)
def _head_hash(head: str) -> int:
    return java_hash(head) & _MASK32


def index_key_hash(topic: str, key: str) -> int:
    """Index key hash of ``topic#key`` (FORMAT.md §6.2). For a longer ASCII key, ``hash(head + tail)
    = hash(head) * 31**len(tail) + hash(tail)`` (mod 2**32), the head's hash memoised."""
    if len(key) > 2 * _TAIL and key.isascii():
        h = (_head_hash(f"{topic}#{key[:-_TAIL]}") * _TAIL_SHIFT
             + sum(map(mul, key[-_TAIL:].encode(), _TAIL_WEIGHTS))) & _MASK32
        return abs_key_hash(_to_i32(h))
    return abs_key_hash(java_hash(f"{topic}#{key}"))


_POW31 = np.ones(1, dtype=np.uint64)


def _pow31(n: int) -> np.ndarray:
    """31**i mod 2**32 for i in [0, n)."""
    global _POW31
    if _POW31.size < n:
        size = max(n, 2 * _POW31.size, 256)
        out = np.empty(size, dtype=np.uint64)
        p = 1
        for i in range(size):
            out[i] = p
            p = (p * 31) & _MASK32
        _POW31 = out
    return _POW31[:n]


def _poly_hash(units: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Java hash (uint64, < 2**32) of consecutive runs of 16-bit ``units`` with lengths ``lens``."""
    n = lens.size
    out = np.zeros(n, dtype=np.uint64)
    total = int(lens.sum())
    if total:
        ends = np.cumsum(lens)
        starts = ends - lens
        seg = np.repeat(np.arange(n), lens)
        exp = ends[seg] - 1 - np.arange(total)
        contrib = (units.astype(np.uint64) * _pow31(int(lens.max()))[exp]) & _MASK32
        nz = lens > 0
        out[nz] = np.add.reduceat(contrib, starts[nz]) & _MASK32
    return out


def java_hash_many(strings: Sequence[str]) -> np.ndarray:
    """Vectorised :func:`java_hash`: int32 array, one hash per string.

    ``hash(s) = sum(u[i] * 31**(n-1-i)) mod 2**32``; every term is below 2**48 and is reduced mod
    2**32 before the per-string sums, so nothing overflows uint64 for any realistic length.
    """
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    enc = [s.encode("utf-16-be", "surrogatepass") for s in strings]
    lens = np.fromiter((len(e) >> 1 for e in enc), dtype=np.int64, count=n)
    units = np.frombuffer(b"".join(enc), dtype=">u2")
    return _poly_hash(units, lens).astype(np.uint32).view(np.int32)


#: range widths hashed column-wise (Horner over a zero-padded matrix); longer ranges go byte-wise
_HORNER_WIDTHS = (8, 16, 32, 64)
#: a length shared by this many ranges is hashed as its own group (no padding to zero)
_EXACT_GROUP = 256


def _horner_ranges(padded: np.ndarray, ends: np.ndarray, lens: np.ndarray, width: int, check_ascii: bool
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """Java hash (and, if asked, ASCII mask) of ranges of at most ``width`` bytes ending at
    ``ends`` of ``padded`` (whose first ``width`` bytes are zero): each range with the bytes
    before it as one row of a ``(n, width)`` matrix, those bytes zeroed (a leading zero unit
    leaves a Java hash 0 unchanged), then Horner's ``h = 31 * h + unit`` unrolled: the matrix
    times the column weights ``31**(width-1-j)``, one integer ``dot`` in uint32, whose wrap-around
    is Java's int arithmetic (one numpy call instead of two per column, most of it without the GIL)."""
    units = rows_at(padded, ends - width, width)
    if int(lens.min()) < width:
        units[np.arange(width) < (width - lens)[:, None]] = 0
    h = units.dot(column_weights(width))
    return h.astype(np.uint64), (units.max(axis=1) < 0x80) if check_ascii else None


@functools.lru_cache(maxsize=None)
def column_weights(width: int) -> np.ndarray:
    """``31**(width-1-j) mod 2**32`` for column j of a ``width``-wide Horner matrix (uint32)."""
    return _pow31(width)[::-1].astype(np.uint32)


def java_hash_ranges(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Java hash of byte ranges of ``buf`` read as ASCII text: ``(uint64 hashes, ascii mask)``.

    For a range of ASCII bytes the UTF-16 units equal the bytes, so the hash is exact; ranges with a
    byte >= 0x80 are flagged and must be hashed from their decoded text by the caller. Ranges are
    hashed column-wise (:func:`_horner_ranges`): a common length as its own group, the rest in
    groups of similar length, and the few longer than 64 bytes byte-wise."""
    starts = np.asarray(starts, dtype=np.int64)
    lens = (ends - starts).astype(np.int64)
    out = np.zeros(lens.size, dtype=np.uint64)
    ascii_ok = np.ones(lens.size, dtype=bool)
    top = _HORNER_WIDTHS[-1]
    short = (lens > 0) & (lens <= top)
    if short.any():
        padded = np.concatenate([np.zeros(top, dtype=np.uint8), buf[:int((starts + lens).max())]])
        check = bool(padded.max() >= 0x80)
        counts = np.bincount(lens[short], minlength=top + 1)
        groups = [(w, lens == w) for w in np.flatnonzero(counts >= _EXACT_GROUP).tolist()]
        rest = short.copy()
        for _, sel in groups:
            rest &= ~sel
        lo = 0
        for w in _HORNER_WIDTHS:
            groups.append((w, rest & (lens > lo) & (lens <= w)))
            lo = w
        for w, mask in groups:
            sel = np.flatnonzero(mask)
            if sel.size:
                h, ok = _horner_ranges(padded, starts[sel] + lens[sel] + top, lens[sel], w, check)
                out[sel] = h
                if ok is not None:
                    ascii_ok[sel] = ok
    sel = np.flatnonzero(lens > top)
    if sel.size:
        out[sel], ascii_ok[sel] = _bytewise_ranges(buf, starts[sel], lens[sel])
    return out, ascii_ok


def _bytewise_ranges(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`java_hash_ranges` for ranges of any length (one term per byte; for long ranges)."""
    units = buf[range_positions(starts, lens)]
    ascii_ok = np.ones(lens.size, dtype=bool)
    nz = lens > 0
    ascii_ok[nz] = np.maximum.reduceat(units, (np.cumsum(lens) - lens)[nz]) < 0x80
    return _poly_hash(units, lens), ascii_ok


def combine_hash(prefix_hash: np.ndarray, suffix_hash: np.ndarray, suffix_len: np.ndarray) -> np.ndarray:
    """Java hash of ``prefix + suffix`` from the parts: ``h(p) * 31**len(s) + h(s)`` mod 2**32."""
    pw = _pow31(int(suffix_len.max()) + 1 if suffix_len.size else 1)[suffix_len]
    return ((prefix_hash.astype(np.uint64) * pw) + suffix_hash) & _MASK32


def to_int32(h: np.ndarray) -> np.ndarray:
    return h.astype(np.uint32).view(np.int32)


def abs_key_hash_many(h: np.ndarray) -> np.ndarray:
    """Vectorised :func:`abs_key_hash` on an int32 array."""
    h = h.astype(np.int64)
    return np.where(h == INT_MIN, 0, np.abs(h)).astype(np.int32)
