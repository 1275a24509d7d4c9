"""StoreCheckpoint (StoreCheckpointTest; FORMAT.md §8)."""
from __future__ import annotations

import struct

from rmqstore.engine.checkpoint import StoreCheckpoint


def test_flush_and_reopen(tmp_path):
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path), read_only=False)
    assert (cp.values.physic_msg_timestamp, cp.values.logics_msg_timestamp) == (0, 0)  # missing file: zeros
    cp.values.physic_msg_timestamp = 0xAABB
    cp.values.logics_msg_timestamp = 0xCCDD
    cp.flush()
    assert cp.values.physic_msg_timestamp - cp.values.min_timestamp == 3000
    data = path.read_bytes()
    assert len(data) == 4096 and struct.unpack_from(">qq", data) == (0xAABB, 0xCCDD) and not any(data[16:])
    again = StoreCheckpoint(str(path), read_only=True)
    assert (again.values.physic_msg_timestamp, again.values.logics_msg_timestamp) == (0xAABB, 0xCCDD)


def test_read_only_checkpoint_never_writes(tmp_path):
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path), read_only=True)
    cp.values.confirm_phy_offset = 5
    cp.flush()
    assert not path.exists()
    path.write_bytes(struct.pack(">qqqqq", 1, 2, 3, 4, 5) + bytes(4056))
    ro = StoreCheckpoint(str(path), read_only=True)
    ro.values.index_msg_timestamp = 99
    ro.flush()
    assert struct.unpack_from(">qqqqq", path.read_bytes()) == (1, 2, 3, 4, 5)
