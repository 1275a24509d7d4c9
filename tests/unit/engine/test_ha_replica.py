"""engine/ha/replica.py: the slave's appends at exact offsets; a record cut by a batch is waited
on by the slave's dispatch (never skipped); a divergent tail cut with its bytes kept."""
from __future__ import annotations

import os
import time

import pytest

from rmqstore.config import MessageStoreConfig
from rmqstore.engine.ha.replica import append_replicated, complete_records_end, cut_tail
from rmqstore.errors import HAProtocolError
from rmqstore.message_store import MessageStore
from rmqstore.types import Message

SEG = 64 * 1024
SMALL = dict(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=4000, max_hash_slot_num=64,
             max_index_num=512)


@pytest.fixture
def master_bytes(tmp_path):
    """A master's commitlog over two segments: (bytes from 0, record starts)."""
    with MessageStore.open(str(tmp_path / "m"), MessageStoreConfig(**SMALL)) as m:
        rs = [m.put_message(Message.create("T", b"v" * 900, keys=[f"k{i}"], queue_id=i % 2)) for i in range(100)]
        end = m.commit_log.confirm_offset
        data = b"".join(bytes(mf.mm[:mf.wrote_position]) for mf in m.commit_log.queue.files)
    assert len(data) == end > SEG
    return data, [r.phy_offset for r in rs]


def test_appends_must_continue_the_log(tmp_path, master_bytes):
    data, _ = master_bytes
    with MessageStore.open(str(tmp_path / "s"), MessageStoreConfig(**SMALL, broker_role="SLAVE")) as s:
        cl = s.commit_log
        with pytest.raises(HAProtocolError, match="segment boundary"):
            append_replicated(cl, 100, data[100:200])
        assert cl.queue.last is None
        assert append_replicated(cl, 0, data[:5000]) == 5000
        with pytest.raises(HAProtocolError, match="slave max offset is 5000"):
            append_replicated(cl, 4000, data[4000:6000])
        with pytest.raises(HAProtocolError, match="do not continue"):
            append_replicated(cl, 5000, data[5000:SEG + 10])        # crosses the segment's end
        assert append_replicated(cl, 5000, data[5000:SEG]) == SEG
        assert append_replicated(cl, SEG, data[SEG:]) == len(data)  # the next segment is created
        assert [mf.file_from_offset for mf in cl.queue.files] == [0, SEG]


def test_a_record_cut_by_a_batch_is_waited_on(tmp_path, master_bytes):
    data, starts = master_bytes
    with MessageStore.open(str(tmp_path / "s"), MessageStoreConfig(**SMALL, broker_role="SLAVE")) as s:
        cut = starts[10] + 37                    # the eleventh record, cut inside its header
        append_replicated(s.commit_log, 0, data[:cut])
        with pytest.raises(TimeoutError):        # dispatch cannot reach the end: a record is cut
            s.wait_dispatched(0.5)
        q = s.consume_queues
        assert q[("T", 0)].max_offset + q[("T", 1)].max_offset == 10
        assert s.reput.reput_from == starts[10]   # waits at the cut record, did not skip it
        append_replicated(s.commit_log, cut, data[cut:starts[12] + 5])
        s.reput.wake_now()
        s.reput.wait_until(starts[12], 5)
        assert q[("T", 0)].max_offset + q[("T", 1)].max_offset == 12
        assert s.reput.reput_from == starts[12]


def test_cut_tail_keeps_the_bytes_and_rebuilds_what_pointed_past(tmp_path, master_bytes):
    data, starts = master_bytes
    with MessageStore.open(str(tmp_path / "s"), MessageStoreConfig(**SMALL)) as s:
        append_replicated(s.commit_log, 0, data[:SEG])
        append_replicated(s.commit_log, SEG, data[SEG:])
        s.wait_dispatched(5)
        at = starts[80] + 300                    # inside record 80: the cut is at its start
        assert complete_records_end(s.commit_log, at) == starts[80]
        assert cut_tail(s, at, "test") == starts[80]
        assert s.commit_log.confirm_offset == starts[80]
        assert s.consume_queues[("T", 0)].max_offset == 40 and s.consume_queues[("T", 1)].max_offset == 40
        saved = sorted(os.listdir(tmp_path / "s" / "recovery"))
        kept = b"".join((tmp_path / "s" / "recovery" / n).read_bytes() for n in saved)
        assert kept == data[starts[80]:]
        assert s.look_message_by_offset(starts[79]).queue_offset == 39


def test_a_slave_closed_on_a_cut_record_reopens_before_it(tmp_path, master_bytes):
    data, starts = master_bytes
    cfg = MessageStoreConfig(**SMALL, broker_role="SLAVE")
    t0 = time.monotonic()
    with MessageStore.open(str(tmp_path / "s"), cfg) as s:
        append_replicated(s.commit_log, 0, data[:starts[20] + 100])
        s.reput.wake_now()
        s.reput.wait_until(starts[20], 5)
    assert time.monotonic() - t0 < 20        # the close does not wait for the cut record
    with MessageStore.open(str(tmp_path / "s"), cfg) as s:
        assert s.commit_log.confirm_offset == starts[20]     # the partial record is cut off...
        kept = b"".join(p.read_bytes() for p in sorted((tmp_path / "s" / "recovery").iterdir()))
        assert kept == data[starts[20]:starts[20] + 100]     # ...and kept
        assert append_replicated(s.commit_log, starts[20], data[starts[20]:SEG]) == SEG
        s.wait_dispatched(5)
        assert sum(cq.max_offset for cq in s.consume_queues.values()) == sum(1 for p in starts if p < SEG)
