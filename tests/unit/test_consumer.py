"""Embedded consumer groups: store.consumer(group, topics, subscription) — poll, commit, committed,
lag, seek, seek_to_time, close; offsets in the broker's consumerOffset.json."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from rmqstore import Message, MessageStore, MessageStoreConfig, ReadOnlyStoreError, StoreClosedError
from rmqstore.engine.consumer_offsets import parse_broker_json

CFG = MessageStoreConfig.embedded(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 64,
                                  max_hash_slot_num=64, max_index_num=256)


def _fill(st, n, topic="Orders", queues=3):
    rs = []
    for i in range(n):
        tag = ("created", "paid", "shipped")[i % 3]
        rs.append(st.put_message(Message.create(topic, f"{topic}-{i}".encode(), tags=tag, keys=[f"k{i}"],
                                                queue_id=i % queues)))
    st.wait_dispatched()
    return rs


@pytest.fixture
def store(tmp_path):
    with MessageStore.open(tmp_path / "store", CFG) as st:
        yield st


def _bodies(recs):
    return sorted(r.body for r in recs)


def test_poll_every_queue_of_every_topic_with_the_subscription(store):
    _fill(store, 30)
    _fill(store, 9, topic="Payments", queues=1)
    c = store.consumer("billing", ["Orders", "Payments"], subscription="created || paid")
    got = []
    while True:
        recs = c.poll(max_messages=7, timeout_s=0)
        if not recs:
            break
        assert len(recs) <= 7
        got += recs
    want = [f"{t}-{i}".encode() for t, n in (("Orders", 30), ("Payments", 9)) for i in range(n) if i % 3 != 2]
    assert _bodies(got) == sorted(want)
    assert all(r.tags in ("created", "paid") for r in got)
    # within a queue, in queue order
    for q in range(3):
        offs = [r.queue_offset for r in got if r.topic == "Orders" and r.queue_id == q]
        assert offs == sorted(offs)
    assert c.lag() == {("Orders", 0): 0, ("Orders", 1): 0, ("Orders", 2): 0, ("Payments", 0): 0}
    assert c.committed() == {}  # nothing committed yet


def test_commit_writes_rocketmqs_file_and_a_reopened_group_resumes(tmp_path):
    path = tmp_path / "store"
    with MessageStore.open(path, CFG) as st:
        _fill(st, 12)
        c = st.consumer("billing", "Orders")
        first = c.poll(max_messages=5, timeout_s=0)
        c.commit()
        doc = parse_broker_json((path / "config" / "consumerOffset.json").read_text())  # written at commit
        assert set(doc["offsetTable"]) == {"Orders@billing"}
        assert sum(doc["offsetTable"]["Orders@billing"].values()) == 5
        assert c.committed() == {("Orders", int(q)): o for q, o in doc["offsetTable"]["Orders@billing"].items()}
        c.poll(max_messages=100, timeout_s=0)  # read but not committed
    with MessageStore.open(path) as st:  # no config: the store's own sizes
        c = st.consumer("billing", "Orders")
        rest = c.poll(max_messages=100, timeout_s=0)
    assert not set(_bodies(first)) & set(_bodies(rest))
    assert len(first) + len(rest) == 12


def test_groups_are_independent_and_new_groups_start_where_asked(store):
    _fill(store, 9)
    a = store.consumer("a", "Orders")
    assert len(a.poll(100, 0)) == 9
    a.commit()
    b = store.consumer("b", "Orders")
    assert len(b.poll(100, 0)) == 9  # earliest by default
    late = store.consumer("late", "Orders", start="latest")
    assert late.poll(100, 0) == []
    rs = _fill(store, 3)
    assert _bodies(late.poll(100, 0)) == sorted(store.look_message_by_offset(r.phy_offset).body for r in rs)
    ts = store.look_message_by_offset(rs[0].phy_offset).store_timestamp
    by_time = store.consumer("t", "Orders", start=ts)
    assert all(r.store_timestamp >= ts for r in by_time.poll(100, 0))
    assert a.committed() == {("Orders", 0): 3, ("Orders", 1): 3, ("Orders", 2): 3}


def test_auto_commit_and_close(tmp_path):
    path = tmp_path / "store"
    with MessageStore.open(path, CFG) as st:
        _fill(st, 6)
        c = st.consumer("auto", "Orders", auto_commit=True)
        assert len(c.poll(4, 0)) == 4
        assert sum(c.committed().values()) == 4  # recorded at the poll
        c.close()
        with pytest.raises(StoreClosedError):
            c.poll(1, 0)
        assert c._on_dispatch not in st._dispatch_listeners
    doc = parse_broker_json((path / "config" / "consumerOffset.json").read_text())  # written at store close
    assert sum(doc["offsetTable"]["Orders@auto"].values()) == 4


def test_poll_wakes_when_a_message_is_dispatched_and_does_not_spin(store):
    _fill(store, 1, topic="Other", queues=1)
    c = store.consumer("w", "Orders")
    calls = []
    real = store.get_message

    def counting(*a, **k):
        calls.append(a)
        return real(*a, **k)

    store.get_message = counting
    t0 = time.monotonic()
    assert c.poll(10, timeout_s=0.5) == []
    assert time.monotonic() - t0 >= 0.5 and len(calls) == 0  # no queue yet: nothing pulled, no busy loop
    timer = threading.Timer(0.2, lambda: store.put_message(Message.create("Orders", b"late", queue_id=1)))
    timer.start()
    t0 = time.monotonic()
    recs = c.poll(10, timeout_s=10)
    waited = time.monotonic() - t0
    timer.join()
    assert [r.body for r in recs] == [b"late"]
    assert waited < 5, f"poll should wake on dispatch, waited {waited:.2f}s"
    assert len(calls) <= 4
    # messages for other topics do not wake it up early
    timer = threading.Timer(0.1, lambda: store.put_message(Message.create("Other", b"x")))
    timer.start()
    calls.clear()
    assert c.poll(10, timeout_s=0.6) == []
    timer.join()
    assert len(calls) <= 2


def test_seek_and_seek_to_time(store):
    rs = _fill(store, 9)
    c = store.consumer("s", "Orders")
    c.poll(100, 0)
    c.seek("Orders", 1, 1)
    assert [(r.queue_id, r.queue_offset) for r in c.poll(100, 0)] == [(1, 1), (1, 2)]
    ts = store.look_message_by_offset(rs[6].phy_offset).store_timestamp
    c.seek_to_time(ts)
    assert all(r.store_timestamp >= ts for r in c.poll(100, 0))
    with pytest.raises(ValueError):
        c.seek("Payments", 0, 0)
    with pytest.raises(ValueError):
        c.seek("Orders", 0, -1)
    assert c.lag() == {("Orders", 0): 0, ("Orders", 1): 0, ("Orders", 2): 0}
    c.seek("Orders", 2, 0)
    assert c.lag()[("Orders", 2)] == 3


def test_new_queues_are_picked_up(store):
    c = store.consumer("n", "Orders")
    assert c.poll(10, 0) == [] and c.assignment() == []
    _fill(store, 2, queues=2)
    assert len(c.poll(10, 0)) == 2 and c.assignment() == [("Orders", 0), ("Orders", 1)]


def test_the_brokers_offsets_are_the_starting_point(tmp_path):
    path = tmp_path / "store"
    with MessageStore.open(path, CFG) as st:
        _fill(st, 9)
    (path / "config").mkdir(exist_ok=True)
    (path / "config" / "consumerOffset.json").write_text('{"offsetTable":{"Orders@billing":{0:2,1:3,2:1}}}')
    with MessageStore.open(path) as st:
        c = st.consumer("billing", "Orders")
        assert sorted((r.queue_id, r.queue_offset) for r in c.poll(100, 0)) == [(0, 2), (2, 1), (2, 2)]


def test_bad_arguments(store):
    with pytest.raises(ValueError):
        store.consumer("", "Orders")
    with pytest.raises(ValueError):
        store.consumer("g", [])
    with pytest.raises(ValueError):
        store.consumer("g", "Orders", start="yesterday")
    with pytest.raises(ValueError):
        store.consumer("g", "Orders").poll(0)


_WRITER = """
import sys, time
from rmqstore import Message, MessageStore, MessageStoreConfig
cfg = MessageStoreConfig.embedded(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 64,
                                  max_hash_slot_num=64, max_index_num=256)
with MessageStore.open(sys.argv[1], cfg) as st:
    print("open", flush=True)
    sys.stdin.readline()
    for i in range(40):
        st.put_message(Message.create("Orders", f"m{i}".encode(), queue_id=i % 2))
        time.sleep(0.01)
    st.wait_dispatched()
    sys.stdin.readline()
"""


def test_a_reader_in_another_process_consumes_a_live_store(tmp_path, caplog):
    path = tmp_path / "store"
    w = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert w.stdout.readline().strip() == "open"
        with caplog.at_level("WARNING", logger="rmqstore"):
            ro = MessageStore.open(path, CFG, read_only=True)  # an empty store has no files to infer sizes from
        assert ro.live_writer_pid == w.pid
        lines = [r.getMessage() for r in caplog.records]
        assert any("live writer (pid" in m for m in lines) and not any("abnormal" in m for m in lines)
        offsets = tmp_path / "reader-offsets.json"
        with ro:
            c = ro.consumer("reader", "Orders", offsets=offsets)
            with pytest.raises(ReadOnlyStoreError):
                ro.consumer("reader", "Orders").commit()  # the store's own file belongs to its writer
            w.stdin.write("go\n")
            w.stdin.flush()
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 40 and time.monotonic() < deadline:
                got += c.poll(100, timeout_s=1.0)
            c.commit()
        assert sorted(r.body for r in got) == sorted(f"m{i}".encode() for i in range(40))
        assert parse_broker_json(offsets.read_text())["offsetTable"] == {"Orders@reader": {"0": 20, "1": 20}}
        assert not (path / "config" / "consumerOffset.json").exists()
    finally:
        w.stdin.close()  # EOF ends every readline of the writer
        assert w.wait(30) == 0
    assert not os.path.exists(path / "abort")


def test_a_damaged_offsets_file_does_not_refuse_the_store(tmp_path):
    path = tmp_path / "store"
    with MessageStore.open(path, CFG) as st:
        _fill(st, 3)
        c = st.consumer("g", "Orders")
        c.poll(100, 0)
        c.commit()
    cfg_dir = path / "config"
    (cfg_dir / "consumerOffset.json").write_bytes(b"\xa2\x00garbage")
    (cfg_dir / "consumerOffset.json.bak").unlink(missing_ok=True)
    with MessageStore.open(path, CFG) as st:
        assert st.consumer_offsets.table() == {}
        assert len(st.consumer("g", "Orders").poll(100, 0)) == 3  # starts over: redelivery, never loss
    assert (cfg_dir / "consumerOffset.json.damaged").read_bytes() == b"\xa2\x00garbage"


def test_a_poll_is_not_held_to_the_network_transfer_limits(tmp_path, monkeypatch):
    """A pull is capped at 32 messages (maxTransferCountOnMessageInMemory) as upstream; the
    in-process consumer pulls what it was asked for in one call per queue (a pull still ends
    with its consume-queue file, as upstream's)."""
    store = MessageStore.open(tmp_path / "s", CFG.replace(mapped_file_size_consume_queue=20 * 1000))
    _fill(store, 200, queues=1)
    g = store.get_message("g", "Orders", 0, 0, 100)
    assert len(g.messages) == 32 and g.next_begin_offset == 32
    g = store.get_message("g", "Orders", 0, 0, 100, transfer_limits=False)
    assert [m.queue_offset for m in g.messages] == list(range(100)) and g.next_begin_offset == 100
    calls = []
    real = store.get_message
    monkeypatch.setattr(store, "get_message", lambda *a, **k: calls.append(a[4]) or real(*a, **k))
    c = store.consumer("big", "Orders")
    assert [r.queue_offset for r in c.poll(max_messages=150, timeout_s=0)] == list(range(150))
    assert calls == [150]
    store.close()
