"""engine/commit_log.py: the append lock, and the commit log's reads, flush and segment roll
checked against the record layout of FORMAT.md §2.1 (field offsets, magic codes, CRC)."""
from __future__ import annotations

import struct
import threading
import time
import zlib

import pytest

from rmqstore import OffsetError
from tests.kit import msg

T0 = 1_700_000_000_000
V1_MAGIC = 0xDAA320A7  # FORMAT.md §2.2, MESSAGE_MAGIC_CODE


def test_append_lock_excludes_a_holder_that_gives_the_gil_away():
    from rmqstore.engine.commit_log import AppendLock

    lock, box = AppendLock(), [0]

    def worker():
        for _ in range(500):
            with lock:
                v = box[0]
                time.sleep(0)  # the GIL goes to another thread inside the critical section
                box[0] = v + 1

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert box[0] == 2000 and not lock.locked()


def test_append_lock_blocks_after_its_spins(monkeypatch):
    """A holder in a long GIL-free call: the waiter yields SPINS times, then blocks until release."""
    from rmqstore.engine import commit_log as CL

    yields = []
    monkeypatch.setattr(CL, "_sleep", lambda s: (yields.append(s), time.sleep(s)))
    lock, held, order = CL.AppendLock(), threading.Event(), []

    def holder():
        with lock:
            held.set()
            time.sleep(0.3)
            order.append("released")

    t = threading.Thread(target=holder)
    t.start()
    held.wait()
    with lock:
        order.append("waiter in")
    t.join()
    assert order == ["released", "waiter in"]
    assert yields == [0] * CL.AppendLock.SPINS  # bounded: no busy wait for the whole 0.3 s


def _three(open_store):
    st = open_store()
    bodies = (b"one", b"second body", b"")
    rs = [st.put_message(msg("CL", body, queue_id=1, store_timestamp=T0 + i)) for i, body in enumerate(bodies)]
    assert all(r.ok for r in rs)
    return st, rs, bodies


def test_get_data_returns_the_record_as_laid_out_in_format_md(open_store):
    st, rs, bodies = _three(open_store)
    cl = st.commit_log
    for i, (r, body) in enumerate(zip(rs, bodies)):
        raw = bytes(cl.get_data(r.phy_offset, r.wrote_bytes))
        total, magic, body_crc, queue_id = struct.unpack_from(">iIii", raw, 0)
        queue_offset, phy = struct.unpack_from(">qq", raw, 20)
        store_ts = struct.unpack_from(">q", raw, 56)[0]      # IPv4 hosts: STORETIMESTAMP at 56
        body_len = struct.unpack_from(">i", raw, 84)[0]      # BODYLENGTH at 84, BODY at 88
        assert (total, magic, queue_id, queue_offset, phy) == (r.wrote_bytes, V1_MAGIC, 1, i, r.phy_offset)
        assert body_crc == zlib.crc32(body) & 0x7FFFFFFF
        assert store_ts == T0 + i
        assert (body_len, raw[88:88 + body_len]) == (len(body), body)
        assert total == 91 + len(body) + len("CL")       # the length formula, no properties
    assert rs[1].phy_offset == rs[0].phy_offset + rs[0].wrote_bytes  # records are contiguous


def test_get_data_outside_the_written_data_is_none(open_store):
    st, rs, _ = _three(open_store)
    cl = st.commit_log
    end = rs[-1].phy_offset + rs[-1].wrote_bytes
    assert cl.max_offset == end and cl.min_offset == 0
    assert cl.get_data(end, 1) is None
    assert cl.get_data(end - 4, 8) is None
    assert cl.get_data(0, 0) is None
    assert bytes(cl.get_data(end - 4, 4)) == bytes(cl.get_data(rs[-1].phy_offset, rs[-1].wrote_bytes))[-4:]


def test_read_record_decodes_what_was_put_and_refuses_offsets_outside(open_store):
    st, rs, bodies = _three(open_store)
    cl = st.commit_log
    for i, (r, body) in enumerate(zip(rs, bodies)):
        rec = cl.read_record(r.phy_offset, check_crc=True)
        assert (rec.phy_offset, rec.topic, rec.queue_id, rec.queue_offset, rec.body, rec.store_size) == (
            r.phy_offset, "CL", 1, i, body, r.wrote_bytes)
    with pytest.raises(OffsetError):
        cl.read_record(cl.max_offset)


def test_flush_reaches_the_written_end(open_store):
    st, rs, _ = _three(open_store)
    cl = st.commit_log
    assert cl.flush() == cl.max_offset == rs[-1].phy_offset + rs[-1].wrote_bytes
    assert cl.flushed_offset == cl.max_offset


@pytest.mark.parametrize("phy, want", [(0, 4096), (1, 4096), (4095, 4096), (4096, 8192), (10_000, 12_288)])
def test_roll_next_file_is_the_next_segment_start(open_store, phy, want):
    """FORMAT.md §2.5: next = offset + fileSize - (offset mod fileSize), with the kit's 4 KiB segments."""
    assert open_store().commit_log.roll_next_file(phy) == want
