"""Unmodified RocketMQ clients against the broker: PyPI rocketmq 0.4.4 (RocketMQ's C++ client) and
npm ali-ons 3.12.0 (pure JavaScript), each in its own environment (scripts/setup_clients)."""
from __future__ import annotations

import time

from rmqstore.broker import remoting as R

C, RC = R.RequestCode, R.ResponseCode


def _received(lines: list[dict]) -> list[dict]:
    return [x for x in lines if "keys" in x]


def test_cpp_tag_subscriber_gets_exactly_its_500_of_1000(start_broker, cpp_client):
    b = start_broker()
    sent = cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Orders", "--count", 1000,
                      "--tags", "TagA,TagB")
    assert len([s for s in sent if s.get("status") == 0]) == 1000
    got = _received(cpp_client("push", "--namesrv", b.address, "--group", "CG", "--topic", "Orders", "--expr",
                               "TagA", "--count", 500, "--timeout", 60, "--linger", 1, "--props", "index,CLUSTER"))
    assert len(got) == 500, f"{len(got)} delivered"
    assert sorted(int(m["keys"].split("-")[1]) for m in got) == list(range(0, 1000, 2))  # each TagA once
    by_uniq = {s["msg_id"]: s["i"] for s in sent if "msg_id" in s}
    for m in got:
        i = int(m["prop_index"])
        assert (m["tags"], m["keys"], m["body"], m["prop_CLUSTER"]) == ("TagA", f"key-{i}", f"body-{i}",
                                                                         "DefaultCluster")
        assert by_uniq[m["msg_id"]] == i and m["reconsume_times"] == 0
        rec = b.store.look_message_by_offset(m["commit_log_offset"])
        assert rec.queue_offset == m["queue_offset"] and rec.store_timestamp == m["store_timestamp"]


def test_cpp_consumer_resumes_after_server_and_consumer_restart(start_broker, stop_broker, cpp_client):
    b = start_broker()
    cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "T", "--count", 40, "--tags", "A")
    first = _received(cpp_client("push", "--namesrv", b.address, "--group", "CG", "--topic", "T", "--count", 40,
                                 "--timeout", 60, "--linger", 6))  # past the client's 5 s offset commit
    assert len(first) == 40
    path = b.store.path
    stop_broker(b)
    b2 = start_broker(path=path)
    cpp_client("produce", "--namesrv", b2.address, "--group", "PG", "--topic", "T", "--count", 10, "--start", 40,
               "--tags", "A")
    again = _received(cpp_client("push", "--namesrv", b2.address, "--group", "CG", "--topic", "T", "--count", 10,
                                 "--timeout", 60, "--linger", 2))
    assert sorted(m["keys"] for m in again) == sorted(f"key-{i}" for i in range(40, 50)), "delivered twice or lost"


def test_cpp_reconsume_later_retries_then_dead_letters(start_broker, connect, cpp_client, pull, records_in):
    b = start_broker()
    c = connect(b.address)
    c.json_call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, {"groupName": "CG", "retryMaxTimes": 2})
    c.call(C.UPDATE_AND_CREATE_TOPIC, {"topic": "%RETRY%CG", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6})
    cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Jobs", "--count", 1)
    got = _received(cpp_client("push", "--namesrv", b.address, "--group", "CG", "--topic", "Jobs", "--count", 1,
                               "--reconsume-later", 100, "--timeout", 12, "--linger", 0))
    assert [m["reconsume_times"] for m in got] == [0, 1, 2]  # delivered, retried twice, then no more
    for prev, nxt in zip(got, got[1:]):
        assert nxt["t"] - prev["t"] >= 0.8  # each after its delay level's time (1 s here)
        assert nxt["body"] == "body-0" and nxt["msg_id"] == got[0]["msg_id"]
    b.store.wait_dispatched(10)
    (dead,) = records_in(pull(c, "CG", "%DLQ%CG", 0, 0).body)
    assert dead.body == b"body-0" and dead.reconsume_times == 3 and dead.properties["RETRY_TOPIC"] == "Jobs"


def test_cpp_two_consumers_split_the_queues(start_broker, cpp_client, cpp_client_async, lines_of):
    b = start_broker()
    cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Split", "--count", 1,
               "--tags", "A")  # creates the topic (4 queues)
    procs = [cpp_client_async("push", "--namesrv", b.address, "--group", "CG", "--topic", "Split", "--count", 1000,
                              "--timeout", 16) for _ in range(2)]
    time.sleep(8)  # both members joined and rebalanced (notified of each other)
    cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Split", "--count", 200, "--start", 1,
               "--tags", "A")
    results = [_received(lines_of(p, 60)) for p in procs]
    # (the seed key-0 may come twice: consumed before the second member joined, its offset not yet
    # committed when the rebalance moved its queue: RocketMQ's at-least-once, not the broker's doing)
    keys = [m["keys"] for r in results for m in r if m["keys"] != "key-0"]
    assert len(keys) == len(set(keys)), "a message was consumed twice by the group"
    assert set(keys) >= {f"key-{i}" for i in range(1, 201)}
    queues = [{m["queue_id"] for m in r if m["keys"] != "key-0"} for r in results]
    assert all(queues) and not queues[0] & queues[1], f"queues not split: {queues}"


def test_cpp_new_message_reaches_an_idle_push_consumer_fast(start_broker, cpp_client, cpp_client_async, lines_of):
    b = start_broker()
    cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Fast", "--count", 1)
    p = cpp_client_async("push", "--namesrv", b.address, "--group", "CG", "--topic", "Fast", "--count", 6,
                         "--timeout", 40)
    time.sleep(5)  # started, first message consumed, pulls now held (idle)
    sent = cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Fast", "--count", 5,
                      "--start", 1, "--interval", 0.3)
    got = {m["keys"]: m["t"] for m in _received(lines_of(p, 60))}
    delays = sorted(got[f"key-{s['i']}"] - s["t"] for s in sent if "i" in s)
    assert len(delays) == 5 and delays[-1] < 0.2, f"send-to-delivery {delays}"


def test_cpp_pull_consumer(start_broker, cpp_client):
    b = start_broker()
    cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Pulled", "--count", 20)
    got = _received(cpp_client("pull", "--namesrv", b.address, "--group", "PC", "--topic", "Pulled", "--count", 20))
    assert sorted(m["keys"] for m in got) == sorted(f"key-{i}" for i in range(20))


def test_ali_ons_producer_and_consumer_with_broker_offsets(start_broker, connect, ali_client):
    b = start_broker()
    c = connect(b.address)
    c.call(C.UPDATE_AND_CREATE_TOPIC, {"topic": "Js", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6})
    sent = ali_client("produce", "--namesrv", b.address, "--group", "APG", "--topic", "Js", "--count", 20,
                      "--tags", "TagA,TagB")
    assert all(s["status"] == "SEND_OK" for s in sent if "i" in s)
    first = _received(ali_client("consume", "--namesrv", b.address, "--group", "ACG", "--topic", "Js", "--count", 20,
                                 "--timeout", 60, "--linger", 1))
    assert sorted(m["body"] for m in first) == sorted(f"ali-{i}" for i in range(20))
    assert {m["msg_id"] for m in first} == {s["msg_id"] for s in sent if "i" in s}
    time.sleep(0.5)
    committed = sum(b.store.consumer_offsets.query_offsets("ACG", "Js").values())
    assert committed == 20  # ali-ons keeps its offsets in the broker
    ali_client("produce", "--namesrv", b.address, "--group", "APG", "--topic", "Js", "--count", 3, "--tags", "TagA")
    again = _received(ali_client("consume", "--namesrv", b.address, "--group", "ACG", "--topic", "Js", "--count", 3,
                                 "--timeout", 60, "--linger", 1))
    assert sorted(m["body"] for m in again) == ["ali-0", "ali-1", "ali-2"] and len(again) == 3
    assert {m["msg_id"] for m in again}.isdisjoint({m["msg_id"] for m in first})
