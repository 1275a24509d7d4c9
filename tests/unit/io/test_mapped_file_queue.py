"""MappedFileQueue: segments named by 20-digit start offsets (MappedFileQueueTest, adapted)."""
from __future__ import annotations

import os

import pytest

from rmqstore import CorruptRecordError, ReadOnlyStoreError
from rmqstore.io.mapped_file_queue import MappedFileQueue, segment_name


def _append(q: MappedFileQueue, data: bytes):
    mf = q.get_last_mapped_file(0)
    assert mf is not None and mf.remaining >= len(data)
    mf.append(data)
    return mf


@pytest.fixture
def q1024(tmp_path):
    q = MappedFileQueue(str(tmp_path / "cl"), 1024)
    yield q
    q.close()


def test_segment_name():
    assert segment_name(0) == "00000000000000000000"
    assert segment_name(1073741824) == "00000000001073741824"


def test_appends_always_find_a_writable_last_file(q1024, tmp_path):
    for _ in range(1024):
        _append(q1024, b"x" * 16)
    assert len(q1024) == 16
    assert q1024.max_offset == 16384
    assert sorted(os.listdir(tmp_path / "cl")) == [segment_name(i * 1024) for i in range(16)]


def test_find_by_offset(q1024):
    for _ in range(1024):
        _append(q1024, b"abcd")
    assert len(q1024) == 4 and q1024.max_offset == 4096
    for off, start in [(0, 0), (100, 0), (1024, 1024), (1124, 1024), (2048, 2048), (2148, 2048), (4095, 3072)]:
        assert q1024.find(off).file_from_offset == start
    assert q1024.find(4096) is None and q1024.find(4196) is None
    assert q1024.find(4096, return_first_on_not_found=True).file_from_offset == 0


def test_first_file_created_at_an_offset(q1024):
    mf = q1024.get_last_mapped_file(1024 + 300)
    assert mf.file_from_offset == 1024
    assert q1024.find(1025) is mf
    assert q1024.find(0) is None and q1024.find(123) is None
    assert q1024.find(123, return_first_on_not_found=True) is mf
    assert q1024.min_offset == 1024


def test_flushed_where_advances_one_segment_at_a_time(q1024):
    for _ in range(16):
        _append(q1024, b"f" * 1024)
    assert q1024.flushed_where == 0
    for i, mf in enumerate(q1024):
        mf.flush(0)
        assert q1024.flushed_where == (i + 1) * 1024
    assert q1024.flush(0) == 16384


def test_lookup_survives_swapped_list_order(q1024):
    for _ in range(4):
        _append(q1024, b"s" * 1024)
    q1024.files[1], q1024.files[2] = q1024.files[2], q1024.files[1]
    assert q1024.find(1024 + 10).file_from_offset == 1024
    assert q1024.find(2048 + 10).file_from_offset == 2048


def test_truncate_dirty_files(tmp_path):
    """64-byte files, 8 x 16 bytes => 2 files; cut back to offset 0 => 1 file (resetOffset)."""
    q = MappedFileQueue(str(tmp_path / "cl"), 64)
    for _ in range(8):
        _append(q, b"z" * 16)
    assert len(q) == 2
    second = q.files[1].path
    removed = q.truncate_dirty_files(40)
    assert removed == [second] and not os.path.exists(second)
    assert len(q) == 1 and q.max_offset == 40 and q.files[0].wrote_position == 40
    assert q.truncate_dirty_files(0) == []
    assert len(q) == 1 and q.max_offset == 0
    q.close()


def test_load_positions_and_contiguity(tmp_path):
    d = tmp_path / "cl"
    q = MappedFileQueue(str(d), 64)
    for _ in range(12):
        _append(q, b"L" * 16)
    q.close()
    q2 = MappedFileQueue(str(d), 64)
    q2.load()
    assert [mf.file_from_offset for mf in q2] == [0, 64, 128]
    assert all(mf.wrote_position == 64 for mf in q2)  # provisional until recovery
    q2.close()
    # a segment missing in the middle is a gap (a stand-in of zeros), not a refusal
    os.unlink(d / segment_name(64))
    for read_only in (True, False):
        q3 = MappedFileQueue(str(d), 64, read_only=read_only)
        q3.load()
        assert [mf.file_from_offset for mf in q3] == [0, 64, 128]
        assert q3.gaps == [(str(d / segment_name(64)), "missing")] and q3.files[1].stand_in == "missing"
        assert bytes(q3.files[1].mm) == bytes(64) and bytes(q3.files[0].mm) == b"L" * 64
        assert q3.find(70) is q3.files[1]
        with pytest.raises(ReadOnlyStoreError):
            q3.files[1].write_at(0, b"x")
        q3.close()
        assert not (d / segment_name(64)).exists()  # nothing written for it
    # a name off the segment grid is a geometry mismatch, still refused
    os.rename(d / segment_name(128), d / segment_name(100))
    q4 = MappedFileQueue(str(d), 64)
    with pytest.raises(CorruptRecordError) as ei:
        q4.load()
    assert ei.value.path == str(d / segment_name(100))
    q4.close()


def test_load_drops_an_empty_last_file_stands_in_for_short_ones_and_rejects_larger(tmp_path):
    d = tmp_path / "cl"
    d.mkdir()
    (d / segment_name(0)).write_bytes(bytes(64))
    (d / segment_name(64)).write_bytes(b"")
    ro = MappedFileQueue(str(d), 64, read_only=True)
    ro.load()
    assert len(ro) == 1 and (d / segment_name(64)).exists()  # read-only: left in place
    ro.close()
    q = MappedFileQueue(str(d), 64)
    q.load()
    assert len(q) == 1 and not (d / segment_name(64)).exists()
    q.close()
    (d / segment_name(64)).write_bytes(b"S" * 10)
    (d / segment_name(128)).write_bytes(bytes(64))
    short = MappedFileQueue(str(d), 64)  # short in the middle: a stand-in holding what is left
    short.load()
    assert short.files[1].stand_in.startswith("short (10 of 64") and bytes(short.files[1].mm) == b"S" * 10 + bytes(54)
    assert os.path.getsize(d / segment_name(64)) == 10  # left as it is
    short.close()
    (d / segment_name(192)).write_bytes(b"T" * 20)  # short and last: a writer extends it with zeros
    ro = MappedFileQueue(str(d), 64, read_only=True)
    ro.load()
    assert ro.files[-1].stand_in and os.path.getsize(d / segment_name(192)) == 20
    ro.close()
    w = MappedFileQueue(str(d), 64)
    w.load()
    assert not w.files[-1].stand_in and bytes(w.files[-1].mm) == b"T" * 20 + bytes(44)
    assert os.path.getsize(d / segment_name(192)) == 64
    w.close()
    os.unlink(d / segment_name(192))
    (d / segment_name(64)).write_bytes(bytes(65))  # larger than a segment: another geometry
    bad = MappedFileQueue(str(d), 64)
    with pytest.raises(CorruptRecordError) as ei:
        bad.load()
    assert ei.value.path == str(d / segment_name(64))
    bad.close()
    (d / "not-a-segment").write_bytes(b"x")
    (d / segment_name(64)).write_bytes(bytes(64))
    ok = MappedFileQueue(str(d), 64)
    ok.load()
    assert len(ok) == 3
    ok.close()


def test_read_only_queue_never_creates(tmp_path):
    q = MappedFileQueue(str(tmp_path / "cl"), 64, read_only=True)
    with pytest.raises(ReadOnlyStoreError):
        q.get_last_mapped_file(0)
    with pytest.raises(ReadOnlyStoreError):
        q.truncate_dirty_files(0)
    assert not (tmp_path / "cl").exists()
    assert q.get_last_mapped_file(0, create=False) is None


def test_truncate_interrupted_after_one_deletion_leaves_no_hole(tmp_path, monkeypatch):
    """A crash in the middle of truncate_dirty_files (kill -9 during recovery) must leave a
    contiguous run of segments: the next open refuses a queue with a hole."""
    from rmqstore.io import mapped_file as MF
    from rmqstore.io.mapped_file_queue import MappedFileQueue

    q = MappedFileQueue(str(tmp_path / "q"), 64)
    for i in range(6):
        mf = q.get_last_mapped_file(0)
        mf.append(bytes([i + 1]) * 64)
    real_destroy = MF.MappedFile.destroy
    calls = []

    def destroy_then_die(self):
        if calls:
            raise KeyboardInterrupt("killed mid-truncate")
        calls.append(self.path)
        real_destroy(self)

    monkeypatch.setattr(MF.MappedFile, "destroy", destroy_then_die)
    with pytest.raises(KeyboardInterrupt):
        q.truncate_dirty_files(100)  # keeps segments 0 and 64, deletes 128..320
    monkeypatch.setattr(MF.MappedFile, "destroy", real_destroy)
    assert calls == [str(tmp_path / "q" / f"{320:020d}")]  # the newest went first
    names = sorted(p.name for p in (tmp_path / "q").iterdir())
    starts = [int(n) for n in names]
    assert starts == list(range(0, 64 * len(starts), 64))  # contiguous: no hole
    reopened = MappedFileQueue(str(tmp_path / "q"), 64)
    reopened.load()  # would raise CorruptRecordError on a hole
    assert reopened.truncate_dirty_files(100) == [str(tmp_path / "q" / f"{o:020d}") for o in (128, 192, 256)]
    assert [m.file_from_offset for m in reopened.files] == [0, 64]
    reopened.close()
    q.close()
