"""IndexFile codec (FORMAT.md §6.1): header, slot and item layout; timeDiff in seconds."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from rmqstore.format import index_file as IX


def test_sizes_and_positions():
    assert IX.HEADER_SIZE == 40 and IX.SLOT_SIZE == 4 and IX.ITEM_SIZE == 20
    assert IX.file_size(100, 400) == 8440                 # IndexFileTest
    assert IX.file_size(5_000_000, 20_000_000) == 420_000_040  # upstream default
    assert IX.file_size(64, 256) == 5416                  # the vectors
    assert IX.slot_pos(0) == 40 and IX.slot_pos(63) == 40 + 63 * 4
    assert IX.item_pos(64, 0) == 296 and IX.item_pos(64, 3) == 356
    assert (IX.BEGIN_TS_POS, IX.END_TS_POS, IX.BEGIN_PHY_POS, IX.END_PHY_POS,
            IX.SLOT_COUNT_POS, IX.INDEX_COUNT_POS) == (0, 8, 16, 24, 32, 36)


def test_header_layout():
    b = IX.HEADER.pack(1, 2, 3, 4, 5, 6)
    assert b == struct.pack(">qqqqii", 1, 2, 3, 4, 5, 6)
    assert struct.unpack_from(">i", b, 36)[0] == 6


def test_item_scalar_and_numpy_agree():
    items = [(588507836, 0, 0, 0), (2**31 - 1, 2**40, 3600, 17), (0, 5, 2**31 - 1, 255)]
    data = b"".join(IX.ITEM.pack(*i) for i in items)
    assert data[:20] == bytes.fromhex("2313EABC" "0000000000000000" "00000000" "00000000")
    arr = np.frombuffer(data, dtype=IX.ITEM_DTYPE)
    assert [tuple(int(x) for x in a.tolist()) for a in arr] == items
    rebuilt = np.empty(len(items), dtype=IX.ITEM_DTYPE)
    for name, col in zip(IX.ITEM_DTYPE.names, zip(*items)):
        rebuilt[name] = col
    assert rebuilt.tobytes() == data


def test_time_diff_seconds_scalar_and_numpy():
    cases = [  # (store, begin, want)
        (1_700_000_005_500, 1_700_000_000_000, 5),
        (1_700_000_000_999, 1_700_000_000_000, 0),
        (1_700_000_000_000, 1_700_000_000_000, 0),
        (1_699_999_999_000, 1_700_000_000_000, 0),   # store time going backwards: 0
        (1_700_000_000_000, 0, 0),                   # begin <= 0: 0
        (1_700_000_000_000, -5, 0),
        (10**13, 1, 2**31 - 1),                       # clamped
    ]
    for s, b, want in cases:
        assert IX.time_diff_seconds(s, b) == want, (s, b)
    got = IX.time_diff_seconds(np.array([c[0] for c in cases], dtype=np.int64),
                               np.array([c[1] for c in cases], dtype=np.int64))
    assert got.dtype == np.int32
    assert got.tolist() == [c[2] for c in cases]
    got = IX.time_diff_seconds(np.array([1_700_000_005_500, 1_700_000_009_000]), 1_700_000_000_000)
    assert got.tolist() == [5, 9]
    stores = np.array([c[0] for c in cases], dtype=np.int64)
    for b in {c[1] for c in cases}:  # one begin time for a column of store times: each as the scalar gives it
        got = IX.time_diff_seconds(stores, b)
        assert got.dtype == np.int32 and got.tolist() == [IX.time_diff_seconds(int(s), b) for s in stores]


def _index_bytes(slots: int, items: int, hashes) -> bytearray:
    """An index file with ``hashes`` put in order as FORMAT.md §6.3 says (phy offsets 100, 200, ...)."""
    buf = bytearray(IX.file_size(slots, items))
    count = 1
    for i, h in enumerate(hashes):
        slot = h % slots
        prev = IX.SLOT.unpack_from(buf, IX.slot_pos(slot))[0]
        IX.ITEM.pack_into(buf, IX.item_pos(slots, count), h, 100 * (i + 1), 0, prev)
        IX.SLOT.pack_into(buf, IX.slot_pos(slot), count)
        count += 1
    IX.HEADER.pack_into(buf, 0, 1, 2, 100, 100 * len(hashes), 0, count)
    return buf


@pytest.mark.parametrize("slots,items,n", [(100, 1000, 50), (7, 40, 39), (64, 256, 1), (1000, 100, 99),
                                           (5, 5000, 3000)])
def test_the_geometry_is_read_from_the_keys(slots, items, n):
    rng = np.random.default_rng(slots * 7 + n)
    hashes = [int(h) for h in rng.integers(0, 2**31 - 1, n)]
    buf = _index_bytes(slots, items, hashes)
    assert IX.infer_geometry(buf, len(buf)) == (slots, items)


def test_no_geometry_from_an_empty_or_inconsistent_file():
    assert IX.infer_geometry(bytearray(IX.file_size(10, 7)), IX.file_size(10, 7)) is None  # nothing written
    buf = _index_bytes(100, 1000, [5, 105, 7])
    IX.SLOT.pack_into(buf, IX.slot_pos(5), 3)  # slot 5 names item 3, whose hash (7) is in slot 7
    assert IX.infer_geometry(buf, len(buf)) is None
    buf = _index_bytes(100, 1000, [5, 105, 7])
    IX.ITEM.pack_into(buf, IX.item_pos(100, 3), 7, 300, 0, 3)  # item 3 chained to itself
    assert IX.infer_geometry(buf, len(buf)) is None
    assert IX.infer_geometry(b"short", 5) is None


class _Reader:
    """``read(pos, n)`` over a buffer, keeping every range asked for."""

    def __init__(self, buf):
        self.buf, self.ranges = bytes(buf), []

    def __call__(self, pos: int, n: int) -> bytes:
        self.ranges.append((pos, n))
        return self.buf[pos:pos + n]


@pytest.mark.parametrize("chunk", [1, 7, 20, 64, 1000, 1 << 20])
def test_reading_in_chunks_gives_the_buffers_answer(chunk):
    """geometry_of through a reader, ``chunk`` bytes a step (smaller than an item, across the
    slot/item boundary, larger than the file), answers as infer_geometry over the whole buffer."""
    rng = np.random.default_rng(chunk)
    for slots, items, n in [(100, 1000, 50), (7, 40, 39), (1000, 100, 99), (13, 300, 0)]:
        buf = _index_bytes(slots, items, [int(h) for h in rng.integers(0, 2**31 - 1, n)])
        want = IX.infer_geometry(buf, len(buf))
        assert want == ((slots, items) if n else None)
        assert IX.geometry_of(_Reader(buf), len(buf), chunk) == want
        bad = bytearray(buf)
        if n:
            IX.ITEM.pack_into(bad, IX.item_pos(slots, 1), -5, 100, 0, 0)  # a negative key hash
            assert IX.geometry_of(_Reader(bad), len(bad), chunk) is None


def test_the_file_is_read_backwards_from_its_end_and_only_as_far_as_the_items_written():
    slots, items, n, chunk = 500, 20_000, 300, 4096
    buf = _index_bytes(slots, items, list(range(7, 7 + 13 * n, 13)))
    read = _Reader(buf)
    assert IX.geometry_of(read, len(buf), chunk) == (slots, items)
    used_end = IX.item_pos(slots, n + 1)  # the end of the last item written
    assert len(buf) - used_end > 20 * chunk  # a long zero tail: the backward scan crosses many chunks
    backward = [(pos, size) for pos, size in read.ranges if pos + size > used_end]
    ends = range(len(buf), 0, -chunk)
    assert backward == [(e - chunk, chunk) for e in ends][:len(backward)]  # chunk by chunk from the end
    assert backward[-1][0] < used_end <= backward[-2][0]  # and no further than the chunk holding the last item
    forward = [r for r in read.ranges if r not in backward]
    assert all(size <= max(chunk, 20 * IX.GEOMETRY_CHECK_ITEMS) for _, size in forward)  # bounded reads
    assert sum(size for _, size in forward) <= 40 + 4 * slots + 2 * 20 * (n + 1)  # slots, newest items, all items


def test_two_slots_naming_one_item_tell_no_geometry():
    buf = _index_bytes(100, 1000, [5, 105, 7])
    IX.SLOT.pack_into(buf, IX.slot_pos(9), 1)  # slot 9 also names item 1 (whose hash, 5, is in slot 5)
    assert IX.infer_geometry(buf, len(buf)) is None
    assert IX.geometry_of(_Reader(buf), len(buf), 64) is None
