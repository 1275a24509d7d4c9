"""Clusters as processes: broker groups behind ``rmqstore namesrv`` with RocketMQ's C++ client, and
an operator's failover and rejoin.

* two broker groups (master + slave each) behind one name server: producers spread over both
  groups, a consumer group rebalances across all their queues; one master is killed with SIGKILL:
  the producers continue on the other group and the consumers drain the dead group's queues from
  its slave, so every acknowledged send is consumed;
* failover and rejoin: the slave is promoted (its brokerRole changed, restarted) and producers
  continue on it; the old master, whose tail the new master never received, rejoins as its slave:
  the tail is cut and kept as evidence, then the old master holds a byte-identical copy.
"""
from __future__ import annotations

import time

import clusterkit as K

TOPIC = "RepCluster"


def _acked(*loads: K.Load) -> set[str]:
    return {a["k"] for ld in loads for a in ld.acks()}


def test_two_groups_behind_one_name_server(cluster):
    ns = cluster.namesrv()
    a_m, a_s = cluster.group("ga", namesrv=ns.addr)
    b_m, b_s = cluster.group("gb", namesrv=ns.addr)
    for m in (a_m, b_m):
        K.create_topic(m.addr, TOPIC, queues=4)
    K.wait_until(lambda: {k: sorted(v) for k, v in K.brokers_in_route(ns.addr, TOPIC).items()}
                 == {"ga": ["0", "1"], "gb": ["0", "1"]}, 40, "both groups, master and slave, in the topic's route")
    consumers = [cluster.load("consume", "--namesrv", ns.addr, "--group", "RepCG", "--topic", TOPIC,
                              "--seconds", "45", "--idle", "8") for _ in range(2)]
    for c in consumers:
        c.started()
    producers = [K.produce(cluster, ns.addr, TOPIC, threads=2, seconds=10, run=f"p{i}", group="RepPG",
                           extra=("--max-failures", "1000", "--retry-pause", "0.02", "--interval", "0.002"))
                 for i in range(2)]
    for p in producers:
        p.started()
    K.wait_until(lambda: len(_acked(*producers)) >= 1000, 30, "1000 acknowledged sends")
    a_m.kill9()
    killed_at = time.time()
    for p in producers:
        p.wait(60)
    acked = _acked(*producers)
    on_a, on_b = K.keys_in_commitlog(a_m.store), K.keys_in_commitlog(b_m.store)
    assert acked <= on_a | on_b
    assert acked & on_a and acked & on_b, "the producers used both groups"
    after = {a["k"] for p in producers for a in p.acks() if a["t"] > killed_at + 1}
    assert len(after) >= 200 and after <= on_b, "after the kill the producers continued on the other group"
    assert acked & on_a <= K.keys_in_commitlog(a_s.store), "the dead group's slave holds its acknowledged sends"
    for c in consumers:
        c.wait(60)
    received = [r for c in consumers for r in c.received()]
    got = {r["k"] for r in received}
    missing = acked - got
    assert not missing, f"{len(missing)} acknowledged sends never consumed, e.g. {sorted(missing)[:5]}"
    # the group rebalanced across all eight queues (four per group, each consumer its share)
    per_consumer = [{(r["k"] in on_a, r["q"]) for r in c.received()} for c in consumers]
    assert set().union(*per_consumer) == {(g, q) for g in (True, False) for q in range(4)}
    assert all(per_consumer), "both consumers got queues"


def test_failover_then_the_old_master_rejoins_as_slave(cluster, tmp_path):
    old, new = cluster.group("f")
    first = K.produce(cluster, old.addr, TOPIC, threads=2, seconds=30, run="one", extra=("--count", "300"))
    assert first.wait(60)["ok"] == 600
    end1 = K.valid_end(old.store)
    K.wait_until(lambda: K.valid_end(new.store) == end1, 30, "the slave to catch up")
    new.stop()  # the slave is down while the master takes more sends: a tail only the old master has
    second = K.produce(cluster, old.addr, TOPIC, threads=2, seconds=30, run="two", extra=("--count", "200"))
    assert second.wait(60)["ok"] == 400
    old.kill9()
    tail_start, tail_end = end1, K.valid_end(old.store)
    _, whole = K.commitlog_bytes(old.store)
    tail = whole[tail_start:tail_end]
    assert len(tail) > 0
    # the operator promotes the slave: brokerRole changed, restarted; producers continue on it
    new.conf.update(brokerRole="ASYNC_MASTER", brokerId=0)
    new.conf.pop("haMasterAddress")
    new.start()
    third = K.produce(cluster, new.addr, TOPIC, threads=2, seconds=30, run="three", extra=("--count", "200"))
    assert third.wait(60)["ok"] == 400
    # the old master rejoins as the new master's slave
    old.conf.update(brokerRole="SLAVE", brokerId=1, haMasterAddress=new.ha_addr)
    old.start()
    end3 = K.valid_end(new.store)
    K.wait_until(lambda: K.valid_end(old.store) == end3, 30, "the rejoined old master to catch up")
    old.stop()
    new.stop()
    K.assert_prefix(old.store, new.store, equal=True)
    keys = K.keys_in_commitlog(old.store)
    assert _acked(first, third) <= keys and not (_acked(second) & keys)
    cut = b"".join(p.read_bytes() for p in sorted((old.store / "recovery").glob("*.cut")))
    assert tail in cut, "the cut tail is kept as evidence"
    K.assert_queues_as_rebuilt(old.store, tmp_path)
