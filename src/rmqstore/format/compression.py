"""Compressed bodies and the other sysFlag bits (``MessageSysFlag``, FORMAT.md §2.3).

RocketMQ's producers compress a body larger than ``compressMsgBodyOverHowmuch`` (4 KiB) and mark it
in the record's SYSFLAG: bit 0 says *compressed*, bits 8–10 say with what::

    bit      10 9 8   7     6      5        4        3 2           1           0
             type     batch unwrap storeV6  bornV6   transaction   multi-tags  compressed
    type: 1 LZ4, 2 ZSTD, 3 ZLIB; 0 (older producers) means ZLIB

The stored body is the compressor's output, framed as RocketMQ's Java compressors write it
(``common/compression/``): LZ4 as an LZ4 *frame* (lz4-java's ``LZ4FrameOutputStream``), ZSTD as a
zstd frame (``ZstdOutputStream``), ZLIB as a zlib stream (``DeflaterOutputStream`` over a
``Deflater``: 2-byte header, deflate data, Adler-32). The body CRC covers the stored (compressed)
bytes. :func:`decompress` gives the producer's bytes back; the output is bounded, so a damaged or
hostile record cannot exhaust memory. The ``lz4`` and ``zstandard`` packages are imported only when
a body needs them.
"""
from __future__ import annotations

import zlib

from ..errors import CorruptRecordError

COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700

LZ4, ZSTD, ZLIB = "lz4", "zstd", "zlib"
#: bits 8-10 -> compressor (``CompressionType.findByValue``: 0 is ZLIB for older producers)
_TYPES = {0: ZLIB, 1: LZ4, 2: ZSTD, 3: ZLIB}
TYPE_BITS = {LZ4: 1 << 8, ZSTD: 2 << 8, ZLIB: 3 << 8}
_TRANSACTION = {0x0: "not", 0x4: "prepared", 0x8: "commit", 0xC: "rollback"}
#: largest body :func:`decompress` produces (RocketMQ's maxMessageSize is 4 MiB before compression)
MAX_DECOMPRESSED = 256 * 1024 * 1024


class CompressionError(CorruptRecordError):
    """A body marked compressed does not decompress (damaged bytes, an unknown compression type,
    or output past the limit)."""


def compression_of(sys_flag: int) -> str | None:
    """``"lz4"``, ``"zstd"``, ``"zlib"``, or None when the body is not compressed."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    t = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    kind = _TYPES.get(t)
    if kind is None:
        raise CompressionError(f"unknown compression type {t} in sysFlag {sys_flag:#x} (RocketMQ knows 1-3)")
    return kind


def describe_sys_flag(sys_flag: int) -> dict:
    """Every bit of a SYSFLAG by name (what ``print`` and ``browse`` show)."""
    try:
        compression = compression_of(sys_flag)
    except CompressionError:
        compression = f"unknown type {(sys_flag & COMPRESSION_TYPE_MASK) >> 8}"
    return {"compression": compression, "multi_tags": bool(sys_flag & MULTI_TAGS_FLAG),
            "transaction": _TRANSACTION[sys_flag & TRANSACTION_MASK],
            "born_host": "v6" if sys_flag & BORNHOST_V6_FLAG else "v4",
            "store_host": "v6" if sys_flag & STOREHOST_V6_FLAG else "v4",
            "inner_batch": bool(sys_flag & INNER_BATCH_FLAG), "need_unwrap": bool(sys_flag & NEED_UNWRAP_FLAG)}


def decompress(body: bytes, sys_flag: int, limit: int = MAX_DECOMPRESSED) -> bytes:
    """The producer's bytes of a stored body (``body`` itself when it is not compressed)."""
    kind = compression_of(sys_flag)
    if kind is None:
        return body
    try:
        if kind == ZLIB:
            d = zlib.decompressobj()
            out = d.decompress(body, limit + 1)
            complete = d.eof
        elif kind == LZ4:
            lz4_frame = _package("lz4.frame", "lz4")
            d = lz4_frame.LZ4FrameDecompressor()
            out = d.decompress(body, max_length=limit + 1)
            complete = d.eof
        else:
            out, complete = _zstd(body, limit)
    except (zlib.error, RuntimeError, ValueError, OSError) as e:
        raise CompressionError(f"body marked {kind} does not decompress: {e}") from e
    except Exception as e:  # zstandard.ZstdError and lz4's errors have no common base
        raise CompressionError(f"body marked {kind} does not decompress: {type(e).__name__}: {e}") from e
    if len(out) > limit:
        raise CompressionError(f"body marked {kind} decompresses past {limit} bytes")
    if not complete:
        raise CompressionError(f"body marked {kind} is truncated (the stream does not end)")
    return out


def _zstd(body: bytes, limit: int) -> tuple[bytes, bool]:
    """Decompress a zstd frame in 1 KiB steps, so that output past ``limit`` stops it early (1 KiB
    of input cannot make more than a few MB: every block carries at most 128 KiB)."""
    d = _package("zstandard", "zstd").ZstdDecompressor().decompressobj()
    parts, total = [], 0
    for i in range(0, len(body), 1024):
        if d.eof:
            break
        part = d.decompress(body[i:i + 1024])
        parts.append(part)
        total += len(part)
        if total > limit:
            break
    return b"".join(parts), d.eof


def _package(module: str, kind: str):
    """The compressor package, imported when first needed (they come with ``rmqstore[compression]``)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{kind} bodies need the {module.split('.')[0]} package: "
                          "pip install 'rmqstore[compression]'") from e


def compress(body: bytes, kind: str, level: int = 5) -> tuple[bytes, int]:
    """``(stored body, sysFlag bits)`` as RocketMQ's producer writes a compressed body with
    ``kind`` at ``level`` (upstream's default ``compressLevel`` is 5): for tests, replay and
    producers that want RocketMQ's compression."""
    if kind == ZLIB:
        data = zlib.compress(body, level)
    elif kind == LZ4:
        lz4_frame = _package("lz4.frame", "lz4")
        # lz4-java's LZ4FrameOutputStream defaults: 4 MB blocks, independent, no content checksum
        data = lz4_frame.compress(body, block_size=lz4_frame.BLOCKSIZE_MAX4MB, block_linked=False,
                                  content_checksum=False, store_size=False)
    elif kind == ZSTD:
        data = _package("zstandard", "zstd").ZstdCompressor(level=level, write_content_size=False).compress(body)
    else:
        raise ValueError(f"compression must be 'lz4', 'zstd' or 'zlib', got {kind!r}")
    return data, COMPRESSED_FLAG | TYPE_BITS[kind]
