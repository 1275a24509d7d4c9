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
import zlib
from typing import Sequence

import numpy as np

_MASK32 = 0xFFFFFFFF
INT_MIN = -(1 << 31)


def crc32(data) -> int:
    """CRC-32 (IEEE, as ``zlib.crc32``) masked with ``0x7FFFFFFF``."""
    return zlib.crc32(data) & 0x7FFFFFFF


def _to_i32(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def java_hash(s: str) -> int:
    """``String.hashCode()`` of ``s``: signed i32 over its UTF-16 code units."""
    h = 0
    enc = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(enc), 2):
        h = (31 * h + ((enc[i] << 8) | enc[i + 1])) & _MASK32
    return _to_i32(h)


@functools.lru_cache(maxsize=65536)
def java_hash_cached(s: str) -> int:
    """:func:`java_hash` memoised; for strings that repeat (tags, topics)."""
    return java_hash(s)


def abs_key_hash(h: int) -> int:
    """``Math.abs(h)``, with the one value that stays negative forced to 0."""
    return 0 if h == INT_MIN else abs(h)


def index_key_hash(topic: str, key: str) -> int:
    """Index key hash of ``topic#key`` (FORMAT.md §6.2)."""
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


def java_hash_ranges(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Java hash of byte ranges of ``buf`` read as ASCII text: ``(uint64 hashes, ascii mask)``.

    For a range of ASCII bytes the UTF-16 units equal the bytes, so the hash is exact; ranges with a
    byte >= 0x80 are flagged and must be hashed from their decoded text by the caller."""
    lens = (ends - starts).astype(np.int64)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(lens.size, dtype=np.uint64), np.ones(lens.size, dtype=bool)
    seg = np.repeat(np.arange(lens.size), lens)
    within = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    units = buf[starts[seg] + within]
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
