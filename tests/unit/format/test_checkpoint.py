"""Checkpoint page codec (FORMAT.md §8)."""
from __future__ import annotations

import struct

from rmqstore.format.checkpoint import FILE_SIZE, CheckpointValues


def test_pack_layout():
    cp = CheckpointValues(0xAABB, 0xCCDD, 3, 4, 5)
    b = cp.pack()
    assert len(b) == FILE_SIZE == 4096
    assert struct.unpack_from(">qqqqq", b, 0) == (0xAABB, 0xCCDD, 3, 4, 5)
    assert b[:8] == bytes.fromhex("000000000000AABB")
    assert not any(b[40:])
    assert CheckpointValues.unpack(b) == cp


def test_unpack_short_or_empty_is_zero():
    assert CheckpointValues.unpack(b"") == CheckpointValues(0, 0, 0, 0, 0)
    assert CheckpointValues.unpack(bytes(39)) == CheckpointValues()


def test_min_timestamp():
    assert CheckpointValues(0xAABB, 0xCCDD).min_timestamp == 0xAABB - 3000  # StoreCheckpointTest
    assert CheckpointValues(10_000, 5_000).min_timestamp == 2_000
    assert CheckpointValues(1_000, 5_000).min_timestamp == 0
