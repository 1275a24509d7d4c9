"""MappedFile (DefaultMappedFile): fixed-size zero-filled segments, read-only mapping."""
from __future__ import annotations

import errno
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


def test_large_write_at_goes_through_pwrite_and_is_visible_in_the_mapping(tmp_path, monkeypatch):
    path = str(tmp_path / "00000000000000000000")
    mf = MappedFile(path, 64 * 1024, create=True)
    calls = []
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, pos: calls.append((pos, len(data))) or real(fd, data, pos))
    data = bytes(range(256)) * 40  # 10 KiB
    mf.write_at(100, data)
    assert calls == [(108, len(data) - 8)]  # everything but the first 8 bytes, which go last, via the mapping
    assert bytes(mf.mm[100:100 + len(data)]) == data
    other = MappedFile(path, 64 * 1024, read_only=True)
    assert bytes(other.read(100, len(data))) == data
    other.close()
    mf.write_at(20000, b"small")  # small writes are copies into the mapping
    assert len(calls) == 1 and bytes(mf.mm[20000:20005]) == b"small"
    mf.close()


def test_short_pwrites_are_continued(tmp_path, monkeypatch):
    mf = MappedFile(str(tmp_path / "00000000000000000000"), 64 * 1024, create=True)
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, pos: real(fd, bytes(data)[:1000], pos))
    data = os.urandom(9000)
    mf.write_at(5, data)
    assert bytes(mf.mm[5:9005]) == data
    mf.close()


def test_failed_large_write_publishes_nothing(tmp_path, monkeypatch):
    """A write that fails part way (ENOSPC, EIO) leaves the first 8 bytes zero: no reader and no
    recovery takes the half-written bytes for a record."""
    mf = MappedFile(str(tmp_path / "00000000000000000000"), 64 * 1024, create=True)
    real = os.pwrite
    seen = []

    def fail_second(fd, data, pos):
        seen.append(pos)
        if len(seen) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, bytes(data)[:4000], pos)
    monkeypatch.setattr(os, "pwrite", fail_second)
    with pytest.raises(OSError):
        mf.write_at(0, b"\x01" * 10000)
    assert bytes(mf.mm[0:8]) == bytes(8) and bytes(mf.mm[8:4008]) == b"\x01" * 4000
    with pytest.raises(StoreIOError):
        mf.write_at(60 * 1024, bytes(8 * 1024))  # past the end of the segment
    mf.close()


def _write_faults(mf: MappedFile, start: int, end: int) -> int:
    """Page faults taken writing a zero byte into each page of ``[start, end)`` of the mapping."""
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for off in range(start, end, 4096):
        mf.mm[off] = 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_populate_faults_a_range_in_and_changes_nothing(tmp_path):
    plain = MappedFile(str(tmp_path / "00000000000000000000"), 1 << 20, create=True)
    mf = MappedFile(str(tmp_path / "00000000000001048576"), 1 << 20, create=True)
    mf.append(b"\x07" * 100)
    if not mf.populate(256 * 1024 + 5, 512 * 1024):
        pytest.skip("MADV_POPULATE_WRITE needs Linux 5.14")
    assert _write_faults(plain, 256 * 1024, 512 * 1024) >= 32  # 64 pages: a write fault each
    assert _write_faults(mf, 256 * 1024, 512 * 1024) < 8  # already mapped writable
    assert bytes(mf.mm[:100]) == b"\x07" * 100 and not any(mf.mm[100:])
    assert mf.populate(0, 0) and mf.populate(0, 10 << 20)  # empty and past-the-end ranges are fine
    mf.close()
    plain.close()
    assert not mf.populate(0, 4096)  # closed
    ro = MappedFile(mf.path, 1 << 20, read_only=True)
    assert not ro.populate(0, 4096)
    ro.close()


def test_pwrite_and_append_write_through_the_file(tmp_path, monkeypatch):
    mf = MappedFile(str(tmp_path / "00000000000000000000"), 64 * 1024, create=True)
    calls = []
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, pos: calls.append((pos, len(data))) or real(fd, data, pos))
    mf.pwrite(10, b"header")  # small, still through the file
    assert calls == [(10, 6)] and bytes(mf.mm[10:16]) == b"header"
    assert mf.append(b"u" * 5000) == 0 and mf.wrote_position == 5000  # a large append: like write_at
    assert calls[1] == (8, 4992) and bytes(mf.mm[:5000]) == b"u" * 5000
    mf.close()
