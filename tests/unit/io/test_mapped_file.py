"""MappedFile (DefaultMappedFile): fixed-size zero-filled segments, read-only mapping."""
from __future__ import annotations

import os

import numpy as np
import pytest

from rmqstore import CorruptRecordError, ReadOnlyStoreError, StoreIOError
from rmqstore.io.mapped_file import MappedFile


def test_create_append_read_and_destroy(tmp_path):
    """MappedFileTest: append 32 bytes to a 64 KiB file, read them back, destroy."""
    path = tmp_path / "00000000000000065536"
    mf = MappedFile(str(path), 65536, create=True)
    assert os.path.getsize(path) == 65536
    assert mf.file_from_offset == 65536
    data = bytes(range(32))
    assert mf.append(data) == 0
    assert (mf.wrote_position, mf.remaining, mf.is_full) == (32, 65536 - 32, False)
    assert bytes(mf.read(0, 32)) == data
    assert mf.u8[:32].tobytes() == data and mf.u8.dtype == np.uint8
    assert mf.append(b"xy") == 32
    assert mf.flush(0) == 34 and mf.flushed_position == 34
    mf.destroy()
    assert not path.exists()
    assert mf.closed


def test_file_is_zero_filled_and_persists(tmp_path):
    path = tmp_path / "00000000000000000000"
    mf = MappedFile(str(path), 4096, create=True)
    mf.append(b"abc")
    mf.flush(0)
    mf.close()
    with open(path, "rb") as fh:
        content = fh.read()
    assert content[:3] == b"abc" and not any(content[3:]) and len(content) == 4096


def test_append_past_the_end_raises(tmp_path):
    mf = MappedFile(str(tmp_path / "00000000000000000000"), 64, create=True)
    mf.append(bytes(60))
    with pytest.raises(StoreIOError) as ei:
        mf.append(bytes(5))
    assert ei.value.offset == 60
    assert mf.wrote_position == 60
    mf.close()


def test_wrong_size_is_corrupt(tmp_path):
    path = tmp_path / "00000000000000000000"
    path.write_bytes(bytes(100))
    with pytest.raises(CorruptRecordError) as ei:
        MappedFile(str(path), 4096)
    assert ei.value.path == str(path)


def test_missing_file_is_io_error(tmp_path):
    with pytest.raises(StoreIOError):
        MappedFile(str(tmp_path / "00000000000000000000"), 4096)


def test_read_only_mapping_refuses_writes(tmp_path):
    path = tmp_path / "00000000000000000000"
    path.write_bytes(b"q" * 128)
    mf = MappedFile(str(path), 128, read_only=True)
    with pytest.raises(ReadOnlyStoreError):
        mf.append(b"x")
    with pytest.raises(ReadOnlyStoreError):
        mf.write_at(0, b"x")
    with pytest.raises(ReadOnlyStoreError):
        mf.zero_from(0)
    with pytest.raises(TypeError):
        mf.mm[0:1] = b"x"  # the mmap itself is read-only
    mf.close()
    assert path.read_bytes() == b"q" * 128


def test_flush_least_pages(tmp_path):
    mf = MappedFile(str(tmp_path / "00000000000000000000"), 6 * 4096, create=True)
    mf.append(bytes(100))
    assert mf.flush(4) == 0             # fewer than 4 dirty pages
    mf.append(bytes(4 * 4096))
    assert mf.flush(4) == 100 + 4 * 4096
    mf.append(bytes(10))
    assert mf.flush(0) == 110 + 4 * 4096  # least pages 0: any dirty byte
    mf.close()


def test_truncate_positions_and_zero_from(tmp_path):
    mf = MappedFile(str(tmp_path / "00000000000000000000"), 256, create=True)
    mf.append(b"\xff" * 200)
    mf.flush(0)
    mf.truncate_positions(50)
    assert (mf.wrote_position, mf.flushed_position) == (50, 50)
    mf.zero_from(50)
    assert bytes(mf.read(0, 256)) == b"\xff" * 50 + bytes(206)
    mf.close()
