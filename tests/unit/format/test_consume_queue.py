"""ConsumeQueue unit codec (FORMAT.md §5.1): scalar struct vs numpy batch."""
from __future__ import annotations

import struct

import numpy as np

from rmqstore.format import consume_queue as CQ

UNITS = [(0, 221, 2598919), (221, 222, -1), (2**40, 2**31 - 1, -2**63), (5, 91, 2**63 - 1), (17, 1, 0)]


def test_unit_layout():
    assert CQ.UNIT_SIZE == 20
    b = CQ.UNIT.pack(0x0102030405060708, 0x0A0B0C0D, -2)
    assert b == bytes.fromhex("0102030405060708" "0A0B0C0D" "FFFFFFFFFFFFFFFE")
    assert CQ.BLANK_UNIT == bytes(8) + bytes.fromhex("7FFFFFFF") + bytes(8)


def test_scalar_and_batch_encode_agree():
    phys, sizes, tags = zip(*UNITS)
    batch = CQ.encode_units(np.array(phys), np.array(sizes), np.array(tags))
    assert batch == b"".join(CQ.UNIT.pack(*u) for u in UNITS)
    assert batch == b"".join(struct.pack(">qiq", *u) for u in UNITS)
    assert CQ.encode_units([], [], []) == b""


def test_scalar_and_batch_decode_agree():
    data = b"".join(CQ.UNIT.pack(*u) for u in UNITS) + b"\x00" * 7  # a partial unit is ignored
    arr = CQ.decode_units(data)
    assert arr.size == len(UNITS)
    got = [(int(u["phy_offset"]), int(u["size"]), int(u["tags_code"])) for u in arr]
    assert got == UNITS == [CQ.UNIT.unpack_from(data, 20 * i) for i in range(len(UNITS))]


def test_valid_unit_rule():
    assert CQ.is_valid_unit(0, 1)
    assert CQ.is_valid_unit(0, 0x7FFFFFFF)  # blank pre-fill units pass (quirk 15.6)
    assert not CQ.is_valid_unit(0, 0)
    assert not CQ.is_valid_unit(-1, 100)
    assert not CQ.is_valid_unit(100, -5)
