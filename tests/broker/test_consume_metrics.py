"""The consume-side numbers, with real clients consuming: the inflight metric (messages pulled past
the committed offset, or popped and not acked: RocketMQ 5's ConsumerLagCalculator), the consume TPS
of GET_CONSUME_STATS / GET_BROKER_CONSUME_STATS (the group's minute window of pulled messages) and
brokerStatus's put and get rates (StoreStatsService's 10/60/600 s rates). The windows are sampled at
chosen times (``StatsWindows.sample(now_s)``) so that the rates are exact without waiting."""
from __future__ import annotations

import json
import re
import time

import pytest

pytest.importorskip("aiohttp")

from rmqstore.broker.admin_ops import GET_BROKER_CONSUME_STATS, GET_BROKER_RUNTIME_INFO, GET_CONSUME_STATS  # noqa: E402
from rmqstore.broker.remoting import RequestCode as C, ResponseCode as RC  # noqa: E402
from rmqstore.broker.stats_windows import StatsWindows  # noqa: E402
from rmqstore.broker.traffic import Traffic  # noqa: E402

from .test_http_api import http, http_broker, one, samples  # noqa: E402,F401


def lag_labels(group: str, topic: str = "Orders") -> dict:
    return {"topic": topic, "consumer_group": group, "is_retry": "false"}


def test_pull_inflight_consume_tps_and_runtime_rates(http_broker, cpp_client, connect):  # noqa: F811
    b, base = http_broker()
    w = b.admin_ops.windows
    produce = ("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Orders", "--quiet")
    assert cpp_client(*produce, "--count", 40)[-1]["ok"] == 40
    pull = ("pull", "--namesrv", b.address, "--group", "CP", "--topic", "Orders")
    assert cpp_client(*pull, "--count", 40)[-1]["count"] == 40
    # ahead of the broker's own once-a-second sampling (wall and monotonic clocks), which then waits
    t0, m0 = time.time() + 60, time.monotonic() + 60
    w.sample(t0, m0)  # the baseline: 40 put, 40 pulled by CP
    assert cpp_client(*produce, "--count", 20, "--start", 40)[-1]["ok"] == 20
    assert cpp_client(*pull, "--count", 60)[-1]["count"] == 60  # the pull consumer starts again at 0
    queues = b.store.topics()["Orders"]
    # CP pulled every queue to its end; say it committed only the first message of each
    c = connect(b.address)
    for q in queues:
        r = c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "CP", "topic": "Orders", "queueId": q, "commitOffset": 1})
        assert r.code == RC.SUCCESS
    for i in range(1, 11):
        w.sample(t0 + i, m0 + i)  # ten seconds later: the minute window's second sample, ten per-second ones
    found = samples(http(base, "/metrics")[1])
    lag = 60 - len(queues)
    assert one(found, "rocketmq_consumer_lag_messages", **lag_labels("CP")) == lag
    assert one(found, "rocketmq_consumer_inflight_messages", **lag_labels("CP")) == lag  # pulled, not committed
    assert one(found, "rocketmq_consumer_ready_messages", **lag_labels("CP")) == 0
    detail = http(base, "/api/groups/CP")[1]
    assert [t["inflight"] for t in detail["topics"]] == [lag]
    # consumerProgress: pullOffset is where the consumer pulls next, consumeTps its last minute's rate
    stats = c.call(GET_CONSUME_STATS, {"consumerGroup": "CP", "topic": "Orders"}).body.decode()
    assert stats.startswith('{"consumeTps":6.0,')  # 60 messages pulled in the 10 s between the samples
    for q in queues:
        end = b.store.get_max_offset_in_queue("Orders", q)
        assert f'"queueId":{q},"topic":"Orders"}}:{{"brokerOffset":{end},"consumerOffset":1,' in stats
    assert stats.count('"pullOffset":') == len(queues)
    assert sorted(int(x) for x in re.findall(r'"pullOffset":(\d+)', stats)) == sorted(
        b.store.get_max_offset_in_queue("Orders", q) for q in queues)
    r = c.call(GET_BROKER_CONSUME_STATS, {"isOrder": "false"})
    assert r.code == RC.SUCCESS and '{"CP":[{"consumeTps":6.0,' in r.body.decode()
    table = json.loads(c.call(GET_BROKER_RUNTIME_INFO).body)["table"]
    assert table["putTps"] == "2.0  " and table["getTransferredTps"] == "6.0  "  # 60 and 600 s: not yet
    assert b.pulls.calls[0] > 0 and float(table["getFoundTps"].split(" ")[0]) > 0
    assert float(table["getTotalTps"].split(" ")[0]) >= float(table["getFoundTps"].split(" ")[0])
    # a reset by the broker: what was pulled before it no longer counts as held
    r = c.call(222, {"topic": "Orders", "group": "CP", "timestamp": -1, "isForce": "true"})
    assert r.code == RC.SUCCESS
    found = samples(http(base, "/metrics")[1])
    assert one(found, "rocketmq_consumer_inflight_messages", **lag_labels("CP")) == 0
    assert one(found, "rocketmq_consumer_lag_messages", **lag_labels("CP")) == 0


def test_pop_inflight_with_the_grpc_client(http_broker, grpc_py):  # noqa: F811
    b, base = http_broker(grpc=True)
    c = grpc_py()
    c.call("producer", endpoints=b.grpc_address, topics=["PopT"])
    c.call("send_many", topic="PopT", n=6, prefix="m-")
    b.store.wait_dispatched(10)
    c.call("consumer", endpoints=b.grpc_address, group="PopG", topic="PopT", await_s=2)
    got = []
    deadline = time.time() + 30
    while len(got) < 6 and time.time() < deadline:
        got += c.call("receive", n=6 - len(got), invisible_s=60)["msgs"]
    assert len(got) == 6
    c.call("ack", refs=[m["ref"] for m in got[:2]])
    found = samples(http(base, "/metrics")[1])
    labels = lag_labels("PopG", "PopT")
    assert one(found, "rocketmq_consumer_inflight_messages", **labels) == 4 == b.pops.in_flight("PopG")
    assert one(found, "rocketmq_consumer_lag_messages", **labels) == 4  # received, not acked: not consumed
    assert one(found, "rocketmq_consumer_ready_messages", **labels) == 0
    c.call("ack", refs=[m["ref"] for m in got[2:]])
    found = samples(http(base, "/metrics")[1])
    assert one(found, "rocketmq_consumer_inflight_messages", **labels) == 0
    assert one(found, "rocketmq_consumer_lag_messages", **labels) == 0


def test_stats_windows_rates_over_10_60_and_600_seconds():
    totals = [0, 0, 0, 0]
    w = StatsWindows(Traffic(), lambda: tuple(totals))
    assert w.rates("puts") == "  " and w.rates("found+miss") == "0.0 0.0 0.0"
    for s in range(0, 601):
        w.sample(1000.0 + s, 50.0 + s)
        totals[0] += 3 if s < 590 else 30  # 3 a second, then 30 a second for the last 10 s
        totals[2] += 1
    assert len(w.per_second) == 601
    # the last sample holds 590 * 3 + 10 * 30 = 2070; 10 s before it 1770, 60 s before 1620, 600 s before 0
    assert w.rates("puts") == f"{300 / 10!r} {450 / 60!r} {2070 / 600!r}"
    assert w.rates("found") == "1.0 1.0 1.0" and w.rates("miss") == "0.0 0.0 0.0"
    assert w.rates("found+miss") == "1.0 1.0 1.0"
    w.sample(1600.2, 650.2)  # less than half a second after the last: not a new per-second sample
    assert len(w.per_second) == 601
