"""Compressed bodies as RocketMQ's Java compressors frame them, and the sysFlag bits by name."""
from __future__ import annotations

import os
import struct
import zlib

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqstore import CorruptRecordError, Message, MessageStore, MessageStoreConfig
from rmqstore.format import compression as C

BODY = (b'{"order": 12345, "items": ["apple", "pear"], "note": "' + b"x" * 5000 + b'"}')


def _java_zlib(body: bytes, level: int = 5) -> bytes:
    """``DeflaterOutputStream(new Deflater(level))``: a zlib stream (header 0x78, Adler-32 trailer)."""
    c = zlib.compressobj(level)
    return c.compress(body) + c.flush()


def _java_lz4_frame(body: bytes) -> bytes:
    """lz4-java ``LZ4FrameOutputStream``: magic 0x184D2204, FLG version 01 with independent blocks,
    BD 4 MB blocks, blocks of compressed data, an end mark of 0 (built block by block here)."""
    return lz4.frame.compress(body, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False,
                              content_checksum=False, store_size=False)


def _java_zstd(body: bytes, level: int = 5) -> bytes:
    """zstd-jni ``ZstdOutputStream``: a streamed frame, no content size in its header."""
    c = zstandard.ZstdCompressor(level=level)
    w = c.compressobj()
    return w.compress(body) + w.flush()


@pytest.mark.parametrize("kind, bits, frame", [
    ("zlib", 0x301, _java_zlib), ("lz4", 0x101, _java_lz4_frame), ("zstd", 0x201, _java_zstd)])
def test_decompress_each_java_framing(kind, bits, frame):
    stored = frame(BODY)
    assert stored != BODY and len(stored) < len(BODY)
    assert C.compression_of(bits) == kind
    assert C.decompress(stored, bits) == BODY
    data, flag = C.compress(BODY, kind)
    assert flag == bits and C.decompress(data, flag) == BODY
    if kind == "lz4":
        assert stored[:4] == struct.pack("<I", 0x184D2204)
    if kind == "zlib":
        assert stored[:2] == b"\x78\x5e"  # Deflater level 5, as Java writes it


def test_flag_alone_means_zlib_and_no_flag_means_stored_as_is():
    assert C.compression_of(0x1) == "zlib" and C.decompress(_java_zlib(BODY), 0x1) == BODY
    assert C.compression_of(0x300) is None and C.decompress(b"raw", 0x300) == b"raw"


@pytest.mark.parametrize("bits", [0x401, 0x501, 0x701])
def test_unknown_compression_types_are_typed_errors(bits):
    with pytest.raises(C.CompressionError):
        C.compression_of(bits)
    assert C.describe_sys_flag(bits)["compression"].startswith("unknown")


@pytest.mark.parametrize("kind, frame", [("zlib", _java_zlib), ("lz4", _java_lz4_frame), ("zstd", _java_zstd)])
def test_damaged_truncated_or_huge_bodies_are_refused(kind, frame):
    bits = C.TYPE_BITS[kind] | 1
    stored = frame(BODY)
    with pytest.raises(C.CompressionError):
        C.decompress(stored[: len(stored) // 2], bits)
    with pytest.raises(C.CompressionError):
        C.decompress(b"\x00\x01garbage" + stored[10:], bits)
    bomb = frame(b"\0" * (1 << 20))
    with pytest.raises(C.CompressionError, match="past"):
        C.decompress(bomb, bits, limit=1000)
    assert isinstance(C.CompressionError("x"), CorruptRecordError)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([0x1, 0x101, 0x201, 0x301, 0x0]))
def test_arbitrary_bytes_never_escape_as_untyped_errors(data, bits):
    try:
        out = C.decompress(data, bits)
    except C.CompressionError:
        return
    assert isinstance(out, bytes)


def test_describe_sys_flag():
    d = C.describe_sys_flag(0x301 | 0x2 | 0x8 | 0x10)
    assert d == {"compression": "zlib", "multi_tags": True, "transaction": "commit", "born_host": "v6",
                 "store_host": "v4", "inner_batch": False, "need_unwrap": False}
    assert C.describe_sys_flag(0)["compression"] is None and C.describe_sys_flag(0xC)["transaction"] == "rollback"


@pytest.mark.parametrize("kind", ["zlib", "lz4", "zstd"])
def test_a_stored_compressed_body_reads_back_decoded(tmp_path, kind):
    """body stays the stored bytes (what BODYCRC covers); decoded_body is the producer's."""
    data, flag = C.compress(BODY, kind)
    cfg = MessageStoreConfig(mapped_file_size_commit_log=1 << 16, mapped_file_size_consume_queue=400,
                             max_hash_slot_num=16, max_index_num=64)
    with MessageStore.open(tmp_path / "s", cfg) as st:
        r = st.put_message(Message(topic="T", body=data, sys_flag=flag, properties={"KEYS": "k"}))
        st.wait_dispatched()
        rec = st.look_message_by_offset(r.phy_offset)
        assert rec.body == data and rec.body_crc == zlib.crc32(data) & 0x7FFFFFFF
        assert rec.compression == kind and rec.decoded_body == BODY
        plain = st.look_message_by_offset(st.put_message(Message(topic="T", body=b"plain")).phy_offset)
        assert plain.compression is None and plain.decoded_body == b"plain"
    assert os.path.exists(tmp_path / "s")
