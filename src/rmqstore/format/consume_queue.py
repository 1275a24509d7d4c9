"""ConsumeQueue unit codec (FORMAT.md §5.1).

One unit per message, 20 bytes, big-endian::

    off  size  field
    0    8     commitlog phy offset (i64)
    8    4     TOTALSIZE of the record (i32)
    12   8     tagsCode (i64): Java hash of TAGS, sign-extended; delivery time on SCHEDULE_TOPIC_XXXX

Queue offset q lives at byte ``q*20`` of the queue's file sequence; segment files are named by
their first byte offset (``%020d``). Blank pre-fill units are ``(0, 0x7FFFFFFF, 0)``.
"""
from __future__ import annotations

import struct

import numpy as np

UNIT = struct.Struct(">qiq")
UNIT_SIZE = 20
assert UNIT.size == UNIT_SIZE
UNIT_DTYPE = np.dtype([("phy_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert UNIT_DTYPE.itemsize == UNIT_SIZE
BLANK_UNIT = UNIT.pack(0, 0x7FFFFFFF, 0)


def encode_units(phy_offsets, sizes, tags_codes) -> bytes:
    """Batch form: the bytes of consecutive units."""
    if len(phy_offsets) <= 8:  # a few units: struct beats numpy's fixed cost
        tl = (lambda a: a.tolist() if hasattr(a, "tolist") else list(a))
        return b"".join(map(UNIT.pack, tl(phy_offsets), tl(sizes), tl(tags_codes)))
    arr = np.empty(len(phy_offsets), dtype=UNIT_DTYPE)
    arr["phy_offset"] = phy_offsets
    arr["size"] = sizes
    arr["tags_code"] = tags_codes
    return arr.tobytes()


def decode_units(buf) -> np.ndarray:
    """Batch form: a structured (big-endian) view of whole units in ``buf``."""
    n = len(buf) // UNIT_SIZE
    return np.frombuffer(buf, dtype=UNIT_DTYPE, count=n)


def is_valid_unit(phy_offset: int, size: int) -> bool:
    """Upstream's recovery test: ``offset >= 0 && size > 0`` (blank pre-fill units pass)."""
    return phy_offset >= 0 and size > 0
