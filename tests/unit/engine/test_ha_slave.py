"""engine/ha/slave.py: a slave behind a loopback proxy that cuts frames, stalls and delays never
holds a torn or non-prefix commitlog and resumes by itself; an old master rejoining as a slave
cuts the tail its new master never had (kept under recovery/); a slave in another process."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rmqstore.config import MessageStoreConfig
from rmqstore.engine.ha.replica import cut_tail
from rmqstore.engine.ha.slave import split_address
from rmqstore.message_store import MessageStore
from rmqstore.types import Message
from tests import kit, netkit
from tests.kit import free_port

SEG = 64 * 1024
CFG = dict(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=4000, max_hash_slot_num=64,
           max_index_num=512, ha_send_heartbeat_interval=200, ha_housekeeping_interval=1500,
           ha_reconnect_interval=100, ha_transfer_batch_size=3000, ha_rejoin_check_bytes=4096)


def conf(**kw) -> MessageStoreConfig:
    return MessageStoreConfig(**{**CFG, **kw})


def put_n(st: MessageStore, start: int, n: int) -> None:
    for i in range(start, start + n):
        st.put_message(Message.create("T", b"p" * (60 + i % 500), keys=[f"k{i}"], queue_id=i % 3))






def until(cond, timeout: float = 10.0, also=None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if also is not None:
            also()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_split_address():
    assert split_address("127.0.0.1:10912") == ("127.0.0.1", 10912)
    assert split_address("[::1]:10912") == ("::1", 10912)
    with pytest.raises(ValueError):
        split_address("nohost")


def test_faults_between_master_and_slave_never_tear_the_slave(tmp_path):
    m = MessageStore.open(str(tmp_path / "m"), conf())
    ha = m.start_ha("127.0.0.1", 0)
    proxy = netkit.TcpProxy(ha.address)
    s = MessageStore.open(str(tmp_path / "s"), conf(broker_role="SLAVE", ha_master_address=proxy.addr))
    try:
        s.start_ha()
        put_n(m, 0, 50)
        until(lambda: s.commit_log.confirm_offset == m.commit_log.confirm_offset)
        faults = [("cut", lambda: proxy.cut_after(12 + 1000)), ("cut in a header", lambda: proxy.cut_after(5)),
                  ("stall", proxy.stall), ("delay", lambda: setattr(proxy, "delay", 0.02)),
                  ("chunks", lambda: setattr(proxy, "chunk", 7))]
        n = 50
        for name, fault in faults:
            before = proxy.connections
            fault()
            put_n(m, n, 80)
            n += 80
            for _ in range(20):
                kit.assert_commitlog_prefix(m, s)
                time.sleep(0.01)
            if name == "stall":
                proxy.resume()
            if name.startswith("cut"):
                until(lambda: proxy.connections > before)
            proxy.delay, proxy.chunk = 0.0, 65536
            until(lambda: s.commit_log.confirm_offset == m.commit_log.confirm_offset, also=lambda: kit.assert_commitlog_prefix(m, s))
            kit.assert_commitlog_prefix(m, s)
        assert proxy.connections >= 3
        s.wait_dispatched(5)
        assert sum(cq.max_offset for cq in s.consume_queues.values()) == n
    finally:
        s.close()
        proxy.close()
        m.close()


def test_an_old_master_rejoins_and_its_divergent_tail_is_cut(tmp_path):
    # a and b replicate; a dies with a tail b never got; b is promoted and takes new messages
    a = MessageStore.open(str(tmp_path / "a"), conf())
    ha = a.start_ha("127.0.0.1", 0)
    b = MessageStore.open(str(tmp_path / "b"), conf(broker_role="SLAVE", ha_master_address="%s:%d" % ha.address))
    b.start_ha()
    put_n(a, 0, 150)
    until(lambda: b.commit_log.confirm_offset == a.commit_log.confirm_offset)
    b.close()
    common = a.commit_log.confirm_offset
    put_n(a, 1000, 5)                                   # a's tail: never replicated
    a_tail = kit.commitlog_bytes(a, common, a.commit_log.confirm_offset)
    a.close()
    b = MessageStore.open(str(tmp_path / "b"), conf(broker_role="ASYNC_MASTER"))
    hb = b.start_ha("127.0.0.1", 0)
    put_n(b, 2000, 20)                                  # the new master's own messages after `common`
    # a comes back as b's slave
    a = MessageStore.open(str(tmp_path / "a"), conf(broker_role="SLAVE", ha_master_address="%s:%d" % hb.address))
    try:
        a.start_ha()
        until(lambda: a.commit_log.confirm_offset == b.commit_log.confirm_offset)
        kit.assert_commitlog_prefix(b, a)
        rdir = tmp_path / "a" / "recovery"
        kept = b"".join((rdir / n).read_bytes() for n in sorted(os.listdir(rdir)))
        assert kept == a_tail
        a.wait_dispatched(5)
        for key, cq in b.consume_queues.items():
            assert a.consume_queues[key].max_offset == cq.max_offset
        assert a.look_message_by_offset(common).body == b.look_message_by_offset(common).body
    finally:
        a.close()
        b.close()


SLAVE_PROCESS = textwrap.dedent("""
    import sys, time
    from rmqstore.config import MessageStoreConfig
    from rmqstore.message_store import MessageStore
    path, addr, target = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = MessageStoreConfig(**{cfg!r}, broker_role="SLAVE", ha_master_address=addr)
    with MessageStore.open(path, cfg) as s:
        s.start_ha()
        deadline = time.monotonic() + 30
        while s.commit_log.confirm_offset < target and time.monotonic() < deadline:
            time.sleep(0.02)
        s.wait_dispatched(10)
        print(s.commit_log.min_offset, s.commit_log.confirm_offset)
""")


def test_a_slave_in_another_process(tmp_path):
    with MessageStore.open(str(tmp_path / "m"), conf()) as m:
        ha = m.start_ha("127.0.0.1", 0)
        put_n(m, 0, 400)
        end = m.commit_log.confirm_offset
        out = subprocess.run([sys.executable, "-c", SLAVE_PROCESS.format(cfg=CFG), str(tmp_path / "s"),
                              "%s:%d" % ha.address, str(end)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lo, hi = map(int, out.stdout.split())
        assert hi == end and lo == end - end % SEG
        with MessageStore.open(str(tmp_path / "s"), conf(), read_only=True) as s:
            kit.assert_commitlog_prefix(m, s)


SLAVE_FOREVER = textwrap.dedent("""
    import sys, time
    from rmqstore.config import MessageStoreConfig
    from rmqstore.message_store import MessageStore
    cfg = MessageStoreConfig(**{cfg!r}, broker_role="SLAVE", ha_master_address=sys.argv[2])
    s = MessageStore.open(sys.argv[1], cfg)
    s.start_ha()
    print("up", flush=True)
    while True:
        time.sleep(1)
""")


def test_a_slave_killed_mid_stream_recovers_and_catches_up(tmp_path):
    with MessageStore.open(str(tmp_path / "m"), conf()) as m:
        ha = m.start_ha("127.0.0.1", 0)
        addr = "%s:%d" % ha.address
        p = subprocess.Popen([sys.executable, "-c", SLAVE_FOREVER.format(cfg=CFG), str(tmp_path / "s"), addr],
                             stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline().strip() == "up"
            put_n(m, 0, 100)
            putter = threading.Thread(target=put_n, args=(m, 100, 1500))
            putter.start()
            until(lambda: ha.slaves() and ha.slaves()[0][1] > 100_000)
            p.kill()                                   # kill -9 while frames are coming
            putter.join()
        finally:
            p.kill()
            p.wait(10)
        with MessageStore.open(str(tmp_path / "s"), conf(broker_role="SLAVE", ha_master_address=addr)) as s:
            kit.assert_commitlog_prefix(m, s)                         # recovery left a prefix (torn tail cut)
            s.start_ha()
            until(lambda: s.commit_log.confirm_offset == m.commit_log.confirm_offset)
            kit.assert_commitlog_prefix(m, s)
            s.wait_dispatched(5)
            for key, cq in s.consume_queues.items():
                assert cq.max_offset == m.consume_queues[key].max_offset


def test_a_slave_of_the_wrong_master_cuts_nothing(tmp_path, caplog):
    with MessageStore.open(str(tmp_path / "m"), conf()) as m, \
            MessageStore.open(str(tmp_path / "s"), conf()) as s0:
        put_n(m, 0, 50)
        for i in range(60):                          # a store with messages of its own
            s0.put_message(Message.create("Other", b"o" * 300, queue_id=0))
        end = s0.commit_log.confirm_offset
    with MessageStore.open(str(tmp_path / "m"), conf()) as m:
        ha = m.start_ha("127.0.0.1", 0)
        with caplog.at_level(logging.INFO, logger="rmqstore.ha"):
            with MessageStore.open(str(tmp_path / "s"), conf(broker_role="SLAVE",
                                                             ha_master_address="%s:%d" % ha.address)) as s:
                s.start_ha()
                until(lambda: any("right master" in r.getMessage() for r in caplog.records), timeout=3)
                assert s.commit_log.confirm_offset == end
        assert not (tmp_path / "s" / "recovery").exists()


def test_a_master_back_without_its_tail_is_followed(tmp_path):
    port = free_port()
    m = MessageStore.open(str(tmp_path / "m"), conf())
    m.start_ha("127.0.0.1", port)
    s = MessageStore.open(str(tmp_path / "s"), conf(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{port}"))
    try:
        s.start_ha()
        put_n(m, 0, 120)
        until(lambda: s.commit_log.confirm_offset == m.commit_log.confirm_offset)
        s.close()                                    # a restart: the slave's rejoin check is done and over
        s = MessageStore.open(str(tmp_path / "s"), conf(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{port}"))
        s.start_ha()
        put_n(m, 120, 5)
        until(lambda: s.commit_log.confirm_offset == m.commit_log.confirm_offset)
        lost_from = record_starts(m)[100]
        m.close()                                    # the master comes back without its last 20 messages
        m = MessageStore.open(str(tmp_path / "m"), conf())
        cut_tail(m, lost_from, "test: a tail lost in a crash")
        put_n(m, 500, 10)                            # and new ones where they were
        m.start_ha("127.0.0.1", port)
        until(lambda: s.commit_log.confirm_offset == m.commit_log.confirm_offset)
        kit.assert_commitlog_prefix(m, s)
        assert (tmp_path / "s" / "recovery").is_dir()   # the slave kept what it cut
    finally:
        s.close()
        m.close()


def record_starts(st: MessageStore) -> list[int]:
    st.wait_dispatched(5)
    return sorted(st.get_commit_log_offset_in_queue("T", q, o) for q in range(3)
                  for o in range(st.get_max_offset_in_queue("T", q)))
