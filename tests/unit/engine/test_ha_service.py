"""engine/ha/service.py: a master and a slave store in one process over loopback (the classic
protocol end to end): byte-identical commitlogs across segment rollovers, the start rule for a
report of 0, slave consume queues and index equal to ``rebuild``'s, restarts of either side, the
SYNC_MASTER statuses, bad input on the HA port."""
from __future__ import annotations

import logging
import random
import socket
import threading
import time

import pytest

from rmqstore.config import MessageStoreConfig
from rmqstore.engine.checkpoint import StoreCheckpoint
from rmqstore.engine.ha import encode_report
from rmqstore.message_store import MessageStore
from rmqstore.rebuild import rebuild
from rmqstore.types import Message, PutMessageStatus
from tests import kit, netkit
from tests.kit import free_port, tree_bytes, tree_hashes

SEG = 64 * 1024
BASE = dict(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=20 * 200, max_hash_slot_num=64,
            max_index_num=512, ha_send_heartbeat_interval=200, ha_housekeeping_interval=3000,
            ha_reconnect_interval=100, ha_transfer_batch_size=7000, slave_timeout=3000)


def conf(**kw) -> MessageStoreConfig:
    return MessageStoreConfig(**{**BASE, **kw})


def put_some(st: MessageStore, start: int, n: int, expect=PutMessageStatus.PUT_OK) -> list:
    out = []
    for i in range(start, start + n):
        r = st.put_message(Message.create("T", b"x" * (50 + i % 700), keys=[f"k{i}"], queue_id=i % 4))
        assert r.status is expect, r.status
        out.append(r)
    return out








def caught_up(master: MessageStore, slave: MessageStore) -> bool:
    return slave.commit_log.confirm_offset == master.commit_log.confirm_offset


@pytest.fixture
def pair(tmp_path):
    made = []

    def open_pair(slave_kw=None, master_kw=None, via=None):
        m = MessageStore.open(str(tmp_path / "m"), conf(**(master_kw or {})))
        ha = m.start_ha("127.0.0.1", 0)
        addr = "%s:%d" % ha.address
        if via is not None:
            proxy = netkit.TcpProxy(ha.address)
            made.append(proxy)
            addr = proxy.addr
        s = MessageStore.open(str(tmp_path / "s"), conf(broker_role="SLAVE", ha_master_address=addr, **(slave_kw or {})))
        made.extend([s, m])
        return m, s, (made[0] if via is not None else None)

    yield open_pair
    for x in made:
        x.close()


def test_slave_is_a_byte_identical_copy_from_the_masters_last_segment(pair, tmp_path):
    m, s, _ = pair()
    put_some(m, 0, 300)                        # before the slave: the start rule picks the last segment
    first = m.commit_log.confirm_offset - m.commit_log.confirm_offset % SEG
    assert first > 0
    s.start_ha()
    kit.wait_for(lambda: s.commit_log.confirm_offset > 0, what="the first frame")
    put_some(m, 300, 600)                      # under replication, across several segments
    kit.wait_for(lambda: caught_up(m, s), what="the slave to catch up")
    assert s.commit_log.min_offset == first
    assert len(s.commit_log.queue.files) >= 3
    kit.assert_commitlog_prefix(m, s)
    s.wait_dispatched(10)
    assert all(cq.min_offset > 0 for cq in s.consume_queues.values())  # CQs start past 0, as upstream
    for key, cq in s.consume_queues.items():
        assert cq.max_offset == m.consume_queues[key].max_offset
    assert m.ha.push_to_slave_max_offset() == m.commit_log.confirm_offset
    assert [a for _, a, _ in m.ha.slaves()] == [m.commit_log.confirm_offset]
    put_some(m, 900, 5)                        # (the dispatched store time reaches the checkpoint)
    kit.wait_for(lambda: caught_up(m, s))
    s.close()
    cp = StoreCheckpoint.read_file(str(tmp_path / "s" / "checkpoint"))
    assert cp.physic_msg_timestamp > 0 and cp.logics_msg_timestamp > 0   # a crash recovery starts near the end
    out = tmp_path / "rebuilt"
    rebuild(str(tmp_path / "s"), str(out), conf())
    assert tree_bytes(out / "consumequeue") == tree_bytes(tmp_path / "s" / "consumequeue")
    assert sorted(tree_hashes(out / "index").values()) == sorted(tree_hashes(tmp_path / "s" / "index").values())


def test_slave_restart_and_master_restart(pair, tmp_path):
    port = free_port()
    m = MessageStore.open(str(tmp_path / "m"), conf())
    m.start_ha("127.0.0.1", port)
    s = MessageStore.open(str(tmp_path / "s"), conf(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{port}"))
    s.start_ha()
    try:
        put_some(m, 0, 200)
        kit.wait_for(lambda: caught_up(m, s))
        s.close()
        put_some(m, 200, 200)
        s = MessageStore.open(str(tmp_path / "s"), conf(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{port}"))
        s.start_ha()
        kit.wait_for(lambda: caught_up(m, s), what="the restarted slave")
        kit.assert_commitlog_prefix(m, s)
        m.close()
        kit.wait_for(lambda: s.ha.master_unreachable_ms() > 0, what="the slave to notice")
        m = MessageStore.open(str(tmp_path / "m"), conf())
        m.start_ha("127.0.0.1", port)
        put_some(m, 400, 200)
        kit.wait_for(lambda: caught_up(m, s), what="the slave to follow the restarted master")
        assert s.ha.master_connected and s.ha.master_unreachable_ms() == 0
        kit.assert_commitlog_prefix(m, s)
    finally:
        s.close()
        m.close()


def test_sync_master_acks_after_the_slave(pair):
    m, s, _ = pair(master_kw=dict(broker_role="SYNC_MASTER"))
    put_some(m, 0, 3, expect=PutMessageStatus.SLAVE_NOT_AVAILABLE)   # no slave: stored, not replicated
    s.start_ha()
    kit.wait_for(lambda: m.ha.slaves() and m.ha.slaves()[0][1] >= 0, what="the slave's first report")
    rs = put_some(m, 3, 50)                                           # PUT_OK: each one acked
    last = rs[-1]
    assert m.ha.push_to_slave_max_offset() >= last.phy_offset + last.wrote_bytes
    assert s.commit_log.confirm_offset >= last.phy_offset + last.wrote_bytes


def test_sync_master_times_out_with_a_stalled_slave(pair):
    m, s, proxy = pair(master_kw=dict(broker_role="SYNC_MASTER", slave_timeout=1000), via=True)
    s.start_ha()
    kit.wait_for(lambda: m.ha.slaves() and m.ha.slaves()[0][1] >= 0)
    put_some(m, 0, 5)
    proxy.stall()
    t0 = time.monotonic()
    put_some(m, 5, 1, expect=PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
    assert time.monotonic() - t0 >= 0.9
    proxy.resume()
    kit.wait_for(lambda: caught_up(m, s))
    put_some(m, 6, 5)


def test_a_group_commit_wakes_the_senders_once_and_waits_for_each_put(pair, monkeypatch):
    m, s, _ = pair(master_kw=dict(broker_role="SYNC_MASTER"))
    s.start_ha()
    kit.wait_for(lambda: m.ha.slaves() and m.ha.slaves()[0][1] >= 0, what="the slave's first report")
    wakes = []
    real = m.ha.wake_senders
    monkeypatch.setattr(m.ha, "wake_senders", lambda: (wakes.append(1), real())[1])
    rs = m.put_group([[Message.create("T", b"g%d" % i, queue_id=i % 4)] for i in range(5)])
    assert [r.status for r in rs] == [PutMessageStatus.PUT_OK] * 5 and wakes == [1]
    assert s.commit_log.confirm_offset >= rs[-1].phy_offset + rs[-1].wrote_bytes
    assert m.put_message(Message.create("T", b"one", queue_id=0)).status is PutMessageStatus.PUT_OK
    assert wakes == [1, 1]  # a single put wakes them once too
    m.ha_wait_in_put = False  # (the broker awaits the futures itself: nothing waited for here)
    assert [r.status for r in m.put_group([[Message.create("T", b"h", queue_id=0)]])] == [PutMessageStatus.PUT_OK]
    assert wakes == [1, 1, 1]


def test_the_broker_awaits_the_future_instead(pair):
    m, s, _ = pair(master_kw=dict(broker_role="SYNC_MASTER"))
    m.ha_wait_in_put = False
    r = m.put_message(Message.create("T", b"y", queue_id=0))
    assert r.status is PutMessageStatus.PUT_OK                      # not waited for here...
    fut = m.ha.replication_future(r)
    assert fut.result(2) is PutMessageStatus.SLAVE_NOT_AVAILABLE    # ...but by whoever awaits this


def test_a_slave_store_refuses_puts(pair):
    m, s, _ = pair()
    r = s.put_message(Message.create("T", b"y", queue_id=0))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "SLAVE" in r.error


def raw_client(addr, payload: bytes) -> bytes:
    """Send ``payload`` to the HA port; what comes back until the master closes (or 3 s)."""
    with socket.create_connection(addr, timeout=3) as c:
        c.sendall(payload)
        got = b""
        try:
            while chunk := c.recv(65536):
                got += chunk
        except socket.timeout:
            return got + b"<open>"
        return got


@pytest.mark.parametrize("payload, says", [
    (random.Random(29).randbytes(4096), "offset"),
    (encode_report(-5), "negative"),
    (encode_report(0) + encode_report(1 << 40), "past the master's max offset"),
    (encode_report(1 << 40), "past the master's max offset"),
])
def test_bad_input_closes_that_connection_only(pair, caplog, payload, says):
    m, s, _ = pair()
    s.start_ha()
    put_some(m, 0, 50)
    kit.wait_for(lambda: caught_up(m, s))
    with caplog.at_level(logging.WARNING, logger="rmqstore.ha"):
        got = raw_client(m.ha.address, payload)
    assert not got.endswith(b"<open>")
    assert any(says in r.getMessage() and "closed" in r.getMessage() for r in caplog.records)
    put_some(m, 50, 100)
    kit.wait_for(lambda: caught_up(m, s), what="the good slave to go on")
    kit.assert_commitlog_prefix(m, s)
    assert len(m.ha.slaves()) == 1


def test_two_slaves_at_once_and_in_sync_replicas(tmp_path):
    m = MessageStore.open(str(tmp_path / "m"), conf(broker_role="SYNC_MASTER", in_sync_replicas=3, slave_timeout=2000))
    ha = m.start_ha("127.0.0.1", 0)
    proxy = netkit.TcpProxy(ha.address)
    s1 = MessageStore.open(str(tmp_path / "s1"), conf(broker_role="SLAVE", ha_master_address="%s:%d" % ha.address))
    s2 = MessageStore.open(str(tmp_path / "s2"), conf(broker_role="SLAVE", ha_master_address=proxy.addr))
    try:
        s1.start_ha()
        kit.wait_for(lambda: len(ha.slaves()) == 1 and ha.slaves()[0][1] >= 0)
        put_some(m, 0, 2, expect=PutMessageStatus.SLAVE_NOT_AVAILABLE)   # inSyncReplicas=3: two slaves
        s2.start_ha()
        kit.wait_for(lambda: len(ha.slaves()) == 2 and min(a for _, a, _ in ha.slaves()) >= 0)
        put_some(m, 2, 200)                                                # both acknowledge each one
        assert caught_up(m, s1) and caught_up(m, s2)
        proxy.stall()                                                      # one of two is not enough
        put_some(m, 202, 1, expect=PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        proxy.resume()
        kit.wait_for(lambda: caught_up(m, s2))
        kit.assert_commitlog_prefix(m, s1)
        kit.assert_commitlog_prefix(m, s2)
    finally:
        s1.close()
        s2.close()
        proxy.close()
        m.close()


def test_silent_connections_are_closed_on_both_sides(pair, caplog):
    m, s, proxy = pair(master_kw=dict(ha_housekeeping_interval=600), slave_kw=dict(ha_housekeeping_interval=600),
                       via=True)
    s.start_ha()
    put_some(m, 0, 20)
    kit.wait_for(lambda: caught_up(m, s))
    with caplog.at_level(logging.INFO, logger="rmqstore.ha"):
        with socket.create_connection(m.ha.address, timeout=3) as c:   # reports once, then nothing
            c.sendall(encode_report(0))
            c.settimeout(10)
            t0 = time.monotonic()
            while c.recv(65536):
                pass
            assert 0.5 < time.monotonic() - t0 < 9                       # closed by the master
        before = proxy.connections
        proxy.stall()                                                   # the slave hears nothing
        kit.wait_for(lambda: proxy.connections > before, what="the slave to reconnect")
        proxy.resume()
    assert any("haHousekeepingInterval" in r.getMessage() for r in caplog.records)
    put_some(m, 20, 50)
    kit.wait_for(lambda: caught_up(m, s))
    kit.assert_commitlog_prefix(m, s)


def test_the_master_address_can_come_later(tmp_path):
    m = MessageStore.open(str(tmp_path / "m"), conf())
    ha = m.start_ha("127.0.0.1", 0)
    s = MessageStore.open(str(tmp_path / "s"), conf(broker_role="SLAVE"))
    try:
        sh = s.start_ha()
        put_some(m, 0, 30)
        time.sleep(0.2)
        assert sh.master_address is None and not sh.master_connected and sh.master_unreachable_ms() >= 200
        assert s.commit_log.confirm_offset == 0
        sh.set_master_address("%s:%d" % ha.address)                   # e.g. from the name server's reply
        kit.wait_for(lambda: caught_up(m, s))
        assert sh.master_address == "%s:%d" % ha.address and sh.master_connected
        assert sh.master_unreachable_ms() == 0
    finally:
        s.close()
        m.close()


def test_stopping_replication_answers_waiting_puts(pair):
    m, s, proxy = pair(master_kw=dict(broker_role="SYNC_MASTER", slave_timeout=30_000), via=True)
    s.start_ha()
    kit.wait_for(lambda: m.ha.slaves() and m.ha.slaves()[0][1] >= 0)
    proxy.stall()
    answers = []
    t = threading.Thread(target=lambda: answers.append(m.put_message(Message.create("T", b"w", queue_id=0))))
    t.start()
    time.sleep(0.2)
    ha = m.ha
    m.stop_ha()
    t.join(10)
    assert answers[0].status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT      # not left waiting 30 s
    assert ha.wait_replicated(1).result(1) in (PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                                               PutMessageStatus.SLAVE_NOT_AVAILABLE)
    proxy.resume()


def test_connections_are_bounded(pair, monkeypatch):
    from rmqstore.engine.ha import service as S
    monkeypatch.setattr(S, "MAX_CONNECTIONS", 2)
    m, s, _ = pair()
    held = [socket.create_connection(m.ha.address, timeout=3) for _ in range(2)]
    try:
        kit.wait_for(lambda: len(m.ha.slaves()) == 2)
        extra = socket.create_connection(m.ha.address, timeout=3)
        assert extra.recv(10) == b""                       # the third is closed at once
        extra.close()
    finally:
        for c in held:
            c.close()
    kit.wait_for(lambda: len(m.ha.slaves()) == 0)
    s.start_ha()                                            # room again: a slave replicates
    put_some(m, 0, 10)
    kit.wait_for(lambda: caught_up(m, s))
