"""Checkpoint page codec (FORMAT.md §8): 4096 bytes, five big-endian i64 then zeros::

    0  physicMsgTimestamp   8  logicsMsgTimestamp   16 indexMsgTimestamp
    24 masterFlushedOffset  32 confirmPhyOffset
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

LAYOUT = struct.Struct(">qqqqq")
FILE_SIZE = 4096
assert LAYOUT.size == 40


@dataclass
class CheckpointValues:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    def pack(self) -> bytes:
        return LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
                           self.master_flushed_offset, self.confirm_phy_offset) + bytes(FILE_SIZE - LAYOUT.size)

    @classmethod
    def unpack(cls, buf) -> "CheckpointValues":
        if len(buf) < LAYOUT.size:
            return cls()
        return cls(*LAYOUT.unpack_from(buf, 0))

    @property
    def min_timestamp(self) -> int:
        """``max(0, min(physic, logics) - 3000)`` (FORMAT.md §8)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)
