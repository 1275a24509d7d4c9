"""A slave broker behind a name server: its master named by the registration reply, its refusals
with upstream's codes, its pulls (slaveReadEnable, and after master loss), SlaveSynchronize applied
on it, and offsets committed to it during an outage not lost."""
from __future__ import annotations

import asyncio
import json

import pytest

from rmqstore import MessageStore, MessageStoreConfig
from rmqstore.broker import Broker, BrokerConfig
from rmqstore.broker import remoting as R
from rmqstore.broker.namesrv import NameServer, NamesrvCode as N

from tests import kit

RC = R.ResponseCode
C = R.RequestCode
REJECT = "[REJECTREQUEST]system busy, start flow control for a while"
FAST_HA = {"ha_reconnect_interval": 200, "ha_send_heartbeat_interval": 200}


@pytest.fixture
def ns():
    server = NameServer("127.0.0.1:0").start()
    yield server
    server.stop()




def on_loop(broker, coro_fn):
    return asyncio.run_coroutine_threadsafe(coro_fn(), broker.loop).result(30)


def pull_req(topic: str, offset: int = 0, group: str = "g") -> dict:
    return {"consumerGroup": group, "topic": topic, "queueId": 0, "queueOffset": offset, "maxMsgNums": 32,
            "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}


def pair(start_broker, ns, tmp_path, *, slave_conf: dict | None = None, **slave_store):
    master = start_broker(broker={"namesrvAddr": ns.address}, path=tmp_path / "m", **FAST_HA)
    slave = start_broker(broker={"namesrvAddr": ns.address, "brokerId": 1, **(slave_conf or {})},
                         path=tmp_path / "s", broker_role="SLAVE", **FAST_HA, **slave_store)
    return master, slave


def replicated(master, slave, topic: str, n: int) -> bool:
    return kit.wait_for(lambda: slave.store.get_max_offset_in_queue(topic, 0) >= n
                    and slave.store.max_phy_offset == master.store.max_phy_offset)


def test_slave_registers_learns_its_master_and_refuses_writes(start_broker, ns, tmp_path, connect, send_v2):
    master, slave = pair(start_broker, ns, tmp_path)
    assert slave.cluster.broker_id == 1 and slave.cluster.master_addr == master.address
    assert slave.store.ha.master_address == master.cluster.ha_addr
    doc = json.loads(connect(ns.address).call(N.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).body)
    assert doc["brokerDatas"][0]["brokerAddrs"] == {"0": master.address, "1": slave.address}
    c = connect(slave.address)
    for code in (C.SEND_MESSAGE, C.SEND_MESSAGE_V2, C.SEND_BATCH_MESSAGE):
        r = send_v2(c, "T", b"x", code=code, batch="false")
        assert (r.code, r.remark) == (RC.SYSTEM_BUSY, REJECT)
    r = c.call(C.END_TRANSACTION, {"producerGroup": "p", "tranStateTableOffset": 0, "commitLogOffset": 0,
                                   "commitOrRollback": 8, "msgId": "x"})
    assert r.code == RC.SLAVE_NOT_AVAILABLE
    r = c.call(C.PULL_MESSAGE, pull_req("TBW102"))
    assert (r.code, r.remark) == (RC.SYSTEM_BUSY, REJECT)  # no slaveReadEnable, master alive
    assert c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": 0,
                                             "commitOffset": 3}).code == RC.SUCCESS


def test_slave_with_id_0_does_not_start(tmp_path):
    st = MessageStore.open(tmp_path / "s", MessageStoreConfig.embedded(broker_role="SLAVE"))
    try:
        with pytest.raises(ValueError, match="brokerId must be > 0"):
            Broker(st, BrokerConfig.from_properties({"brokerName": "b"}), listen="127.0.0.1:0")
    finally:
        st.close()


def test_slave_read_enable_serves_pulls_and_master_suggests_the_slave(start_broker, ns, tmp_path, connect,
                                                                        send_v2):
    master, slave = pair(start_broker, ns, tmp_path, slave_conf={"slaveReadEnable": "true"})
    cm = connect(master.address)
    for i in range(5):
        assert send_v2(cm, "Reads", f"m{i}".encode(), queue_id=0).code == RC.SUCCESS
    assert replicated(master, slave, "Reads", 5)
    r = connect(slave.address).call(C.PULL_MESSAGE, pull_req("Reads"))
    assert r.code == RC.SUCCESS and r.ext["nextBeginOffset"] == "5"
    assert r.ext["suggestWhichBrokerId"] == "0"  # not behind: back to the master (group brokerId)


def test_slave_serves_pulls_after_its_master_is_gone(start_broker, stop_broker, ns, tmp_path, connect, send_v2):
    master, slave = pair(start_broker, ns, tmp_path, ha_housekeeping_interval=500)
    cm = connect(master.address)
    for i in range(3):
        assert send_v2(cm, "Drain", f"m{i}".encode(), queue_id=0).code == RC.SUCCESS
    assert replicated(master, slave, "Drain", 3)
    cs = connect(slave.address)
    assert cs.call(C.PULL_MESSAGE, pull_req("Drain")).code == RC.SYSTEM_BUSY
    stop_broker(master)  # broker and store (and so replication) gone
    seen = []
    r = kit.wait_for(lambda: (lambda r: seen.append((r.code, r.remark, slave.cluster.master_unreachable_ms())) or (
        r if r.code == RC.SUCCESS else None))(cs.call(C.PULL_MESSAGE, pull_req("Drain"))))
    assert r is not None and r.ext["nextBeginOffset"] == "3", seen[-3:]  # beyond upstream: drained from the slave
    slave.cfg = slave.cfg.replace(slave_read_when_master_gone=False)  # upstream's answer stays reachable
    r = cs.call(C.PULL_MESSAGE, pull_req("Drain"))
    assert (r.code, r.remark) == (RC.SYSTEM_BUSY, REJECT)


def test_slave_synchronize_applies_the_masters_state(start_broker, ns, tmp_path, connect, send_v2):
    master, slave = pair(start_broker, ns, tmp_path)
    cm = connect(master.address)
    assert send_v2(cm, "SyncT", b"x", queue_id=0).code == RC.SUCCESS
    assert cm.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g1", "topic": "SyncT", "queueId": 0,
                                              "commitOffset": 1}).code == RC.SUCCESS
    group = {"groupName": "g1", "retryMaxTimes": 3, "consumeEnable": True}
    assert cm.call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, json.dumps(group).encode()).code == RC.SUCCESS
    master.delay_offsets.set(3, 42)
    assert on_loop(slave, slave.cluster.sync.sync_all) is True
    assert slave.topics.get("SyncT") == master.topics.get("SyncT")
    assert set(slave.topics.table) == set(master.topics.table)
    assert slave.store.consumer_offsets.query_offset("g1", "SyncT", 0) == 1
    assert slave.groups.table["g1"]["retryMaxTimes"] == 3
    assert slave.delay_offsets.get(3) == 42
    assert (tmp_path / "s" / "config" / "topics.json").read_text().count("SyncT") >= 1  # persisted


def test_offsets_committed_to_the_slave_are_not_lost(start_broker, ns, tmp_path, connect, send_v2):
    master, slave = pair(start_broker, ns, tmp_path)
    cm, cs = connect(master.address), connect(slave.address)
    send_v2(cm, "Off", b"x", queue_id=0)
    for q, off in ((0, 5), (1, 7)):
        cm.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Off", "queueId": q, "commitOffset": off})
    on_loop(slave, slave.cluster.sync.sync_all)
    # consumers commit to the slave (as they do while the master is away): queue 0 moves on to 9
    assert cs.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Off", "queueId": 0,
                                              "commitOffset": 9}).code == RC.SUCCESS
    cm.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Off", "queueId": 1, "commitOffset": 8})
    assert on_loop(slave, slave.cluster.sync.sync_all) is True
    assert master.store.consumer_offsets.query_offset("g", "Off", 0) == 9  # pushed to the master
    assert slave.store.consumer_offsets.query_offset("g", "Off", 0) == 9  # and kept (upstream: back to 5)
    assert slave.store.consumer_offsets.query_offset("g", "Off", 1) == 8  # the master's for the rest
    assert slave.cluster.sync.pending == set()
    # a master reset (lower) of a queue nobody committed to on the slave since is followed
    cm.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Off", "queueId": 0, "commitOffset": 2})
    on_loop(slave, slave.cluster.sync.sync_all)
    assert slave.store.consumer_offsets.query_offset("g", "Off", 0) == 2


def test_offsets_committed_while_the_master_was_down_reach_it_when_it_returns(start_broker, stop_broker, ns,
                                                                             tmp_path, connect, send_v2):
    master, slave = pair(start_broker, ns, tmp_path)
    cm = connect(master.address)
    send_v2(cm, "Away", b"x", queue_id=0)
    cm.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Away", "queueId": 0, "commitOffset": 1})
    assert on_loop(slave, slave.cluster.sync.sync_all)
    stop_broker(master)  # the master machine goes away
    on_loop(slave, slave.cluster.register_all)
    assert slave.cluster.master_addr is None  # the name server names no live master
    cs = connect(slave.address)
    assert cs.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Away", "queueId": 0,
                                              "commitOffset": 6}).code == RC.SUCCESS
    back = start_broker(broker={"namesrvAddr": ns.address}, path=tmp_path / "m", **FAST_HA)
    assert back.store.consumer_offsets.query_offset("g", "Away", 0) == 1
    on_loop(slave, slave.cluster.register_all)  # the next registration names the master again: sync at once
    assert slave.cluster.master_addr == back.address
    assert kit.wait_for(lambda: back.store.consumer_offsets.query_offset("g", "Away", 0) == 6)
    assert slave.store.consumer_offsets.query_offset("g", "Away", 0) == 6
