"""RocketMQ 5's gRPC Python client (PyPI rocketmq-python-client 5.1.2, unmodified) against
``rmqstore serve``'s gRPC endpoint: send, receive, ack, invisible time, redelivery, dead letters,
restart, FIFO, delay, transactions, and interoperation with the remoting endpoint."""
from __future__ import annotations

import time

from rmqstore.broker import remoting as R
from rmqstore.broker.metadata import topic_config

#: receives may ask for invisible times from 1 s (upstream's minimum is 10 s: tests would be slow)
FAST = {"minInvisibleTimeMillsForRecv": 1000, "grpcClientConsumerMinLongPollingTimeoutMillis": 1000}


def _group(b, name: str, **fields) -> None:
    cfg = dict(b.groups.find(name) or {"groupName": name})
    cfg.update(fields)
    b.groups.put(cfg)


def _typed_topic(b, name: str, kind: str) -> None:
    """A topic whose ``message.type`` is ``kind`` (the client and the endpoint check sends against it)."""
    b.topics.put(dict(topic_config(name, 8), attributes={"message.type": kind}))


def _records(b, topic: str, qid: int = 0) -> list:
    end = b.store.get_max_offset_in_queue(topic, qid)
    if end <= 0:
        return []
    return b.store.get_message("check", topic, qid, 0, end, transfer_limits=False).messages


def test_500_sends_each_received_and_acked_exactly_once(start_broker, grpc_py):
    b = start_broker(grpc=True, broker=FAST)
    c = grpc_py()
    c.call("producer", endpoints=b.grpc_address, topics=["T500"])
    sent = c.call("send_many", topic="T500", n=500, prefix="m-", tag="A")["ids"]
    assert len(set(sent)) == 500
    c.call("consumer", endpoints=b.grpc_address, group="G500", topic="T500", await_s=2)
    counts = c.call("receive_all", n_expected=500, invisible_s=30, ack=True, timeout_s=90)["counts"]
    assert sorted(counts) == sorted(sent)
    assert set(counts.values()) == {1}
    # every message acked: nothing comes back, not even after an invisible time has passed
    time.sleep(1.5)
    again = c.call("receive", n=32, invisible_s=1)["msgs"]
    assert again == []
    assert b.pops.in_flight("G500") == 0


def test_unacked_message_is_redelivered_with_attempt_2_then_dead_lettered(start_broker, grpc_py):
    b = start_broker(grpc=True, broker=FAST)
    _group(b, "GR", retryMaxTimes=1)  # max attempts = retryMaxTimes + 1 = 2
    c = grpc_py()
    c.call("producer", endpoints=b.grpc_address, topics=["TR"])
    sent = c.call("send", topic="TR", body="retry me", tag="x", keys=["k1"], props={"color": "red"})["id"]
    c.call("consumer", endpoints=b.grpc_address, group="GR", topic="TR", await_s=2)
    first = c.call("receive", n=1, invisible_s=1)["msgs"]
    assert [(m["id"], m["attempt"], m["body"]) for m in first] == [(sent, 1, "retry me")]
    assert first[0]["props"] == {"color": "red"} and first[0]["keys"] == ["k1"] and first[0]["tag"] == "x"
    assert not first[0]["corrupted"]
    # not acked: invisible for 1 s, then delivered again with attempt 2 (same message id)
    second = []
    deadline = time.time() + 15
    while not second and time.time() < deadline:
        second = c.call("receive", n=1, invisible_s=1)["msgs"]
    assert [(m["id"], m["attempt"], m["body"]) for m in second] == [(sent, 2, "retry me")]
    # the first receipt handle is stale now
    assert c.call("ack_error", ref=first[0]["ref"])["error"]
    # attempt 2 is the last: not acked, it goes to %DLQ%GR and is not delivered again
    deadline = time.time() + 15
    while not _records(b, "%DLQ%GR") and time.time() < deadline:
        time.sleep(0.2)
    dead = _records(b, "%DLQ%GR")
    assert len(dead) == 1
    assert dead[0].body == b"retry me"
    assert dead[0].properties["UNIQ_KEY"] == sent and dead[0].properties["DLQ_ORIGIN_TOPIC"] == "TR"
    assert c.call("receive", n=1, invisible_s=1)["msgs"] == []


def test_change_invisible_duration_gives_a_new_handle(start_broker, grpc_py):
    b = start_broker(grpc=True, broker=FAST)
    c = grpc_py()
    c.call("producer", endpoints=b.grpc_address, topics=["TC"])
    sent = c.call("send", topic="TC", body="later")["id"]
    c.call("consumer", endpoints=b.grpc_address, group="GC", topic="TC", await_s=2)
    m = c.call("receive", n=1, invisible_s=1)["msgs"][0]
    assert m["id"] == sent
    c.call("change_invisible", ref=m["ref"], invisible_s=4)
    time.sleep(1.5)  # past the first invisible time, within the new one: not delivered again
    assert c.call("receive", n=1, invisible_s=1)["msgs"] == []
    c.call("ack", refs=[m["ref"]])  # the client acks with the new handle
    time.sleep(3)
    assert c.call("receive", n=1, invisible_s=1)["msgs"] == []
    assert b.pops.in_flight() == 0


def test_restart_brings_back_unacked_messages_and_not_acked_ones(start_broker, stop_broker, grpc_py, tmp_path):
    path = tmp_path / "restart-store"
    b = start_broker(grpc=True, broker=FAST, path=path)
    c = grpc_py()
    c.call("producer", endpoints=b.grpc_address, topics=["TS"])
    ids = c.call("send_many", topic="TS", n=3, prefix="s-")["ids"]
    c.call("consumer", endpoints=b.grpc_address, group="GS", topic="TS", await_s=2)
    got = []
    deadline = time.time() + 20
    while len(got) < 3 and time.time() < deadline:
        got += c.call("receive", n=3, invisible_s=2)["msgs"]
    assert sorted(m["id"] for m in got) == sorted(ids)
    acked = got[0]
    c.call("ack", refs=[acked["ref"]])
    c.close()
    stop_broker(b)
    b2 = start_broker(grpc=True, broker=FAST, path=path)
    assert b2.pops.in_flight("GS") == 2  # rebuilt from the revive topic
    c2 = grpc_py()
    c2.call("consumer", endpoints=b2.grpc_address, group="GS", topic="TS", await_s=2)
    back = []
    deadline = time.time() + 20
    while len(back) < 2 and time.time() < deadline:
        for m in c2.call("receive", n=3, invisible_s=5)["msgs"]:
            back.append(m)
            c2.call("ack", refs=[m["ref"]])
    assert sorted(m["id"] for m in back) == sorted(m["id"] for m in got[1:])
    assert all(m["attempt"] == 2 for m in back)
    time.sleep(2.5)
    assert c2.call("receive", n=3, invisible_s=1)["msgs"] == []


def test_fifo_order_holds_under_redelivery(start_broker, grpc_py):
    b = start_broker(grpc=True, broker=FAST)
    _group(b, "GF", consumeMessageOrderly=True)
    c = grpc_py()
    _typed_topic(b, "TF", "FIFO")
    c.call("producer", endpoints=b.grpc_address, topics=["TF"])
    ids = [c.call("send", topic="TF", body=f"f{i}", group="order-1")["id"] for i in range(6)]
    other = c.call("send", topic="TF", body="g0", group="order-2")["id"]
    c.call("consumer", endpoints=b.grpc_address, group="GF", topic="TF", await_s=2)
    seen: dict[str, list] = {"order-1": [], "order-2": []}
    first = []
    deadline = time.time() + 10
    while len(first) < 7 and time.time() < deadline:
        first += c.call("receive", n=32, invisible_s=2)["msgs"]
    for m in first:
        seen[m["group"]].append(m["id"])
    assert seen["order-1"] == ids and seen["order-2"] == [other]
    # nothing acked: the queues are held, nothing more is delivered until the invisible time passes
    assert c.call("receive", n=32, invisible_s=2)["msgs"] == []
    again = []
    deadline = time.time() + 15
    while len(again) < 7 and time.time() < deadline:
        again += c.call("receive", n=32, invisible_s=5)["msgs"]
    group1 = [m for m in again if m["group"] == "order-1"]
    assert [m["id"] for m in group1] == ids  # the same order, every one attempt 2
    assert {m["attempt"] for m in again} == {2}
    # ack the first half of group 1 only (and group 2): the rest comes back, in order, attempt 3
    c.call("ack", refs=[m["ref"] for m in group1[:3]] + [m["ref"] for m in again if m["group"] == "order-2"])
    rest = []
    deadline = time.time() + 15
    while len(rest) < 3 and time.time() < deadline:
        rest += c.call("receive", n=32, invisible_s=5)["msgs"]
    assert [m["id"] for m in rest] == ids[3:]
    assert {m["attempt"] for m in rest} == {3}
    c.call("ack", refs=[m["ref"] for m in rest])
    time.sleep(0.5)
    assert c.call("receive", n=32, invisible_s=1)["msgs"] == []


def test_delivery_timestamp_delays_the_message(start_broker, grpc_py):
    b = start_broker(grpc=True, broker=FAST)
    c = grpc_py()
    _typed_topic(b, "TD", "DELAY")
    c.call("producer", endpoints=b.grpc_address, topics=["TD"])
    c.call("consumer", endpoints=b.grpc_address, group="GD", topic="TD", await_s=1)
    assert c.call("receive", n=1, invisible_s=5)["msgs"] == []  # the group starts before the send
    t0 = time.time()
    sent = c.call("send", topic="TD", body="in 3 s", delay_ms=3000)["id"]
    got = []
    while not got and time.time() < t0 + 20:
        got = c.call("receive", n=1, invisible_s=5)["msgs"]
    assert [m["id"] for m in got] == [sent]
    assert time.time() - t0 >= 2.0  # the client rounds the delivery time down to a whole second
    c.call("ack", refs=[got[0]["ref"]])
    delivered = [r for r in _records(b, "TD", 0) + sum((_records(b, "TD", q) for q in range(1, 8)), [])
                 if r.properties.get("UNIQ_KEY") == sent]
    assert len(delivered) == 1
    assert delivered[0].store_timestamp >= int(delivered[0].properties["TIMER_DELIVER_MS"])


def test_transactions_commit_rollback_and_the_check_over_telemetry(start_broker, grpc_py):
    b = start_broker(grpc=True, broker={**FAST, "transactionTimeOut": 1000, "transactionCheckInterval": 200})
    c = grpc_py()
    _typed_topic(b, "TT", "TRANSACTION")
    c.call("producer", endpoints=b.grpc_address, topics=["TT"], checker="commit")
    committed = c.call("transaction", topic="TT", body="commit me", end="commit")["id"]
    c.call("transaction", topic="TT", body="roll me back", end="rollback")
    orphan = c.call("transaction", topic="TT", body="ask me", end="none")["id"]
    consumer = grpc_py()
    consumer.call("consumer", endpoints=b.grpc_address, group="GT", topic="TT", await_s=2)
    got = {}
    deadline = time.time() + 30
    while len(got) < 2 and time.time() < deadline:
        for m in consumer.call("receive", n=8, invisible_s=10)["msgs"]:
            got[m["id"]] = m["body"]
            consumer.call("ack", refs=[m["ref"]])
    assert got == {committed: "commit me", orphan: "ask me"}
    assert orphan in c.call("checked")["ids"]  # the broker asked the producer over its telemetry stream


def test_grpc_and_remoting_share_messages_and_group_progress(start_broker, grpc_py, connect, send_v2, pull):
    b = start_broker(grpc=True, broker=FAST)
    b.topics.create_if_absent("TI", 1)
    c = grpc_py()
    c.call("producer", endpoints=b.grpc_address, topics=["TI"])
    grpc_ids = [c.call("send", topic="TI", body=f"g{i}")["id"] for i in range(3)]
    client = connect(b.address)
    # sent over gRPC, read over remoting
    r = pull(client, "GI", "TI", 0, 0)
    assert r.code == R.ResponseCode.SUCCESS
    assert b"g0" in r.body and b"g2" in r.body
    # a remoting consumer of group GI commits offset 2: the gRPC consumer of GI continues there
    client.call(R.RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "GI", "topic": "TI", "queueId": 0,
                                                        "commitOffset": 2})
    send_v2(client, "TI", b"from remoting", queue_id=0,
            props="UNIQ_KEY\x01AC11000100002A9F0000000000000001\x02TAGS\x01r\x02")
    c.call("consumer", endpoints=b.grpc_address, group="GI", topic="TI", await_s=2)
    got = []
    deadline = time.time() + 10
    while len(got) < 2 and time.time() < deadline:
        got += c.call("receive", n=8, invisible_s=10)["msgs"]
    assert [m["body"] for m in got] == ["g2", "from remoting"]
    assert got[0]["id"] == grpc_ids[2] and got[1]["id"] == "AC11000100002A9F0000000000000001"
    c.call("ack", refs=[m["ref"] for m in got])
    # and the gRPC receives moved the group's offset that remoting reads
    r = client.call(R.RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "GI", "topic": "TI", "queueId": 0})
    assert r.code == R.ResponseCode.SUCCESS and int(r.ext["offset"]) == 4
