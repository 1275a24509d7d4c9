"""A slave whose link to its master misbehaves, as processes under the C++ client's load: the link
goes through a loopback TCP proxy (``tests/netkit.py``) that cuts a frame in the middle, splits
frames into 7-byte reads, delays every chunk, and stalls past ``haHousekeepingInterval``. After each
fault the slave's commitlog is still a byte-identical prefix of the master's; it resumes by itself,
and at the end holds every acknowledged send, byte for byte, with its queues as rebuilt. A
SYNC_MASTER whose slave stalls or goes away answers as RocketMQ's does."""
from __future__ import annotations

import time

import clusterkit as K

from tests.netkit import TcpProxy

TOPIC = "RepFaults"


def test_slave_behind_a_faulty_link_stays_a_prefix_and_resumes(cluster, tmp_path):
    store = {"mappedFileSizeCommitLog": 1 << 20, "haHousekeepingInterval": 2000, "haTransferBatchSize": 8192}
    m_ha = K.free_port()
    master = cluster.broker("f-m", K.broker_conf("f", "ASYNC_MASTER", ha_port=m_ha, **store))
    proxy = TcpProxy((K.HOST, m_ha))
    try:
        slave = cluster.broker("f-s", K.broker_conf("f", "SLAVE", ha_port=K.free_port(), master_ha=proxy.addr, **store))
        load = K.produce(cluster, master.addr, TOPIC, threads=2, seconds=10, extra=("--interval", "0.002"))
        load.started()

        def caught_up_with_some_more(before: int):
            return K.valid_end(slave.store) > before

        def fault(name: str, start, end, hold: float = 0.0) -> None:
            before = K.valid_end(slave.store)
            start()
            time.sleep(hold)
            K.assert_prefix(slave.store, master.store)
            end()
            K.wait_until(lambda: caught_up_with_some_more(before), 20, f"the slave to resume after {name}")
            K.assert_prefix(slave.store, master.store)

        K.wait_until(lambda: K.valid_end(slave.store) > 0, 20, "the slave to start replicating")
        connections = proxy.connections
        fault("a frame cut in the middle", lambda: proxy.cut_after(5003), lambda: None, hold=0.6)
        assert proxy.connections > connections, "the slave connected again after the cut"
        fault("7-byte reads", lambda: setattr(proxy, "chunk", 7), lambda: setattr(proxy, "chunk", 65536), hold=0.6)
        fault("a delayed link", lambda: setattr(proxy, "delay", 0.05), lambda: setattr(proxy, "delay", 0.0), hold=0.6)
        connections = proxy.connections
        fault("a stalled link", proxy.stall, proxy.resume, hold=2.6)
        assert proxy.connections > connections, "a stall past haHousekeepingInterval made the slave reconnect"
        done = load.wait(60)
        acks = {a["k"] for a in load.acks()}
        assert done["ok"] == len(acks) > 500
        end = K.valid_end(master.store)
        K.wait_until(lambda: K.valid_end(slave.store) == end, 30, "the slave to catch up")
        slave.stop()
        master.stop()
    finally:
        proxy.close()
    K.assert_prefix(slave.store, master.store, equal=True)
    assert acks <= K.keys_in_commitlog(slave.store)
    K.assert_queues_as_rebuilt(slave.store, tmp_path)


def test_sync_master_answers_flush_slave_timeout_and_slave_not_available(cluster):
    """On the wire, as RocketMQ's broker: a stalled slave makes a SYNC_MASTER send wait slaveTimeout
    and answer FLUSH_SLAVE_TIMEOUT (12); with no slave at all it answers SLAVE_NOT_AVAILABLE (11) at
    once; both messages are stored on the master."""
    store = {"slaveTimeout": 600, "haHousekeepingInterval": 1500}
    m_ha = K.free_port()
    master = cluster.broker("y-m", K.broker_conf("y", "SYNC_MASTER", ha_port=m_ha, **store))
    proxy = TcpProxy((K.HOST, m_ha))
    try:
        slave = cluster.broker("y-s", K.broker_conf("y", "SLAVE", ha_port=K.free_port(), master_ha=proxy.addr, **store))
        K.wait_replicating(master, TOPIC)
        assert K.send(master.addr, TOPIC, b"ok", keys="k-ok").code == 0
        proxy.stall()
        t0 = time.monotonic()
        r = K.send(master.addr, TOPIC, b"stalled", keys="k-stalled")
        waited = time.monotonic() - t0
        assert r.code == 12 and waited >= 0.5, (r.code, r.remark, waited)
        proxy.resume()
        slave.stop()
        K.wait_until(lambda: K.send(master.addr, TOPIC, b"alone", keys="k-alone").code == 11, 20,
                     "SLAVE_NOT_AVAILABLE once the slave is gone")
    finally:
        proxy.close()
    master.stop()
    assert {"k-ok", "k-stalled", "k-alone"} <= K.keys_in_commitlog(master.store)
