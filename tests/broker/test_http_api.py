"""The HTTP listener of ``rmqstore serve --http-listen``: ``/metrics`` parsed with prometheus_client's
own parser after real client traffic (RocketMQ's C++ client), the JSON API's answers against the
store's, and the write calls' token check."""
from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from rmqstore import MessageStore  # noqa: E402
from rmqstore.broker import Broker, BrokerConfig  # noqa: E402
from rmqstore.broker.http import HttpOptions  # noqa: E402
from rmqstore.broker.http.metrics import version_desc  # noqa: E402
from rmqstore.broker.remoting import RequestCode as C  # noqa: E402

from tests import kit

from .conftest import RemotingClient, broker_store_config  # noqa: E402

TOKEN = "s3cret-token"
#: no proxy: the test servers are on loopback
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http(base: str, path: str, method: str = "GET", doc=None, token: str | None = None) -> tuple[int, object]:
    req = urllib.request.Request(base + path, method=method,
                                 data=json.dumps(doc).encode() if doc is not None else None)
    req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with OPENER.open(req, timeout=20) as r:
            raw, status, ctype = r.read(), r.status, r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        raw, status, ctype = e.read(), e.code, e.headers.get("Content-Type", "")
    return status, (json.loads(raw) if "json" in ctype else raw.decode())


@pytest.fixture
def http_broker(tmp_path):
    running = []

    def _start(token: str | None = TOKEN, grpc: bool = False, **store_overrides) -> tuple[Broker, str]:
        st = MessageStore.open(Path(tmp_path) / "store", broker_store_config(**store_overrides))
        b = Broker(st, BrokerConfig.from_properties({"brokerName": "broker-a"}), listen="127.0.0.1:0",
                   grpc_listen="127.0.0.1:0" if grpc else None, http=HttpOptions("127.0.0.1:0", token))
        b.start()
        running.append((b, st))
        return b, f"http://{b.http.address}"

    yield _start
    for b, st in running:
        b.stop()
        st.close()


def samples(text: str) -> dict[str, list]:
    """name -> [(labels, value)] of every sample, parsed by prometheus_client."""
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def one(found: dict, name: str, **labels) -> float:
    hits = [v for lab, v in found.get(name, []) if all(lab.get(k) == v2 for k, v2 in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {hits} in {found.get(name)}"
    return hits[0]


def store_lag(store, group: str, topic: str) -> int:
    """Lag as the store tells it: each queue's max offset less the group's committed offset."""
    committed = store.consumer_offsets.query_offsets(group, topic)
    return sum(store.get_max_offset_in_queue(topic, q) - committed.get(q, 0) for q in store.topics()[topic])


def test_metrics_after_real_clients(http_broker, cpp_client):
    b, base = http_broker()
    sent = cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Orders", "--count", 60,
                      "--quiet")
    assert sent[-1]["ok"] == 60
    got = cpp_client("push", "--namesrv", b.address, "--group", "CG", "--topic", "Orders", "--count", 60,
                     "--timeout", 60, "--linger", 6, "--quiet")
    assert got[-1]["count"] == 60
    cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Orders", "--count", 15,
               "--start", 60, "--quiet")
    pulled = cpp_client("pull", "--namesrv", b.address, "--group", "CP", "--topic", "Orders", "--count", 75)
    assert pulled[-1]["count"] == 75
    b.store.wait_dispatched(10)
    status, text = http(base, "/metrics")
    assert status == 200
    found = samples(text)
    const = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a",
             "otel_scope_name": "broker-meter"}
    labels = dict(const, topic="Orders", message_type="normal", is_system="false")
    assert one(found, "rocketmq_messages_in_total", **labels) == 75
    stored = [b.store.look_message_by_offset(b.store.get_commit_log_offset_in_queue("Orders", q, o))
              for q in b.store.topics()["Orders"] for o in range(b.store.get_max_offset_in_queue("Orders", q))]
    assert one(found, "rocketmq_throughput_in_total", **labels) == sum(r.store_size for r in stored)
    assert one(found, "rocketmq_message_size_count", **labels) == 75
    assert one(found, "rocketmq_message_size_bucket", le="1024.0", **labels) == 75  # small messages
    # a pull consumer takes each message once; the push consumer's prefetch may pull some again
    out = dict(const, topic="Orders", consumer_group="CP", is_system="false")
    assert one(found, "rocketmq_messages_out_total", **out) == 75
    assert one(found, "rocketmq_messages_out_total", **dict(out, consumer_group="CG")) >= 60
    lag = dict(const, topic="Orders", consumer_group="CG", is_retry="false", is_system="false")
    assert one(found, "rocketmq_consumer_lag_messages", **lag) == store_lag(b.store, "CG", "Orders") == 15
    # inflight: what CG's pulls took past its committed offsets (a pull the gone push consumer left
    # held is answered when the 15 arrive, as upstream answers it); ready: the rest of the lag
    offsets = b.store.consumer_offsets
    committed, pulled = offsets.query_offsets("CG", "Orders"), offsets.query_pull_offsets("CG", "Orders")
    inflight = sum(max(0, p - committed[q]) for q, p in pulled.items() if q in committed)
    assert one(found, "rocketmq_consumer_inflight_messages", **lag) == inflight <= 15
    assert one(found, "rocketmq_consumer_ready_messages", **lag) == 15 - inflight
    assert one(found, "rocketmq_consumer_lag_latency_milliseconds", **lag) > 0
    assert one(found, "rocketmq_topic_number", **const) == len(b.topics.table)
    assert one(found, "rocketmq_storage_dispatch_behind_bytes", **const) == 0
    assert one(found, "rocketmq_storage_size_bytes", **const) > 0
    assert one(found, "rocketmq_storage_message_reserve_time_milliseconds", **const) >= 0
    assert not [n for n in found if n.endswith("_created")]  # as the Java exporter: no _created series
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    names = {n for e in exprs for n in re.findall(r"\b(?:rocketmq|rmqstore)_\w+", e)}
    families = {f.name for f in text_string_to_metric_families(text)}
    served = families | {n + "_total" for n in families} | {n + "_bucket" for n in families}
    assert names <= served  # the broker runs its HA service: the replication families are served too


def test_replication_lag_per_slave(http_broker):
    """With an HA service on the store (``store.ha.slaves()``: peer, acknowledged offset,
    ``time.monotonic()`` of the last report), one series per slave."""
    b, base = http_broker()
    st = b.store
    from rmqstore.types import Message
    st.put_message(Message(topic="T", body=b"x" * 500))

    reported = time.monotonic() - 2.0

    class HA:
        def slaves(self):
            return [("127.0.0.1:40001", 0, reported), ("127.0.0.1:40002", st.max_phy_offset, reported + 2.0)]

    st.ha = HA()
    try:
        found = samples(http(base, "/metrics")[1])
        _, info = http(base, "/api/broker")
    finally:
        del st.ha
    assert one(found, "rmqstore_replication_lag_bytes", slave="127.0.0.1:40001") == st.max_phy_offset > 0
    assert one(found, "rmqstore_replication_lag_bytes", slave="127.0.0.1:40002") == 0
    assert 2000 <= one(found, "rmqstore_replication_last_report_age_milliseconds", slave="127.0.0.1:40001") < 60000
    assert [s["ackOffset"] for s in info["slaves"]] == [0, st.max_phy_offset]


def test_version_desc_matches_mqversion():
    """Ordinals of RocketMQ's ``MQVersion.Version`` (V4_9_4 is 401, as the remoting code knows it)."""
    assert version_desc(473) == "v5_3_0" and version_desc(472) == "v5_3_0_snapshot"
    assert version_desc(401) == "v4_9_4" and version_desc(194) == "v3_9_1_snapshot"
    assert version_desc(121) == "v_121"  # before 3.9.1 the names are irregular


def test_json_api_equals_the_store(http_broker, cpp_client):
    b, base = http_broker()
    sent = cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "T", "--count", 20)
    b.store.wait_dispatched(10)
    st = b.store
    _, topics = http(base, "/api/topics")
    assert {t["topic"] for t in topics} == set(b.topics.table)
    assert next(t for t in topics if t["topic"] == "T")["messages"] == 20
    _, queues = http(base, "/api/topics/T/queues")
    assert [(q["queueId"], q["minOffset"], q["maxOffset"]) for q in queues] == \
        [(q, st.get_min_offset_in_queue("T", q), st.get_max_offset_in_queue("T", q)) for q in range(len(queues))]
    assert http(base, "/api/topics/Nope/queues")[0] == 404
    # by key, by unique key (the client's msgId), by offset msgId, by time
    _, found = http(base, "/api/messages?topic=T&key=key-7")
    assert [m["body"] for m in found] == ["body-7"] and found[0]["properties"]["index"] == "7"
    uniq = next(s["msg_id"] for s in sent if s.get("i") == 3)
    _, found = http(base, f"/api/messages?topic=T&uniqKey={uniq}")
    assert [m["body"] for m in found] == ["body-3"]
    rec = st.look_message_by_offset(found[0]["phyOffset"])
    _, by_id = http(base, f"/api/messages?msgId={rec.msg_id}")
    assert by_id[0]["phyOffset"] == rec.phy_offset and by_id[0]["body"] == "body-3"
    _, by_time = http(base, f"/api/messages?topic=T&begin={rec.store_timestamp}&end={rec.store_timestamp}")
    assert rec.phy_offset in {m["phyOffset"] for m in by_time}
    assert all(m["storeTimestamp"] == rec.store_timestamp for m in by_time)
    assert http(base, "/api/messages?key=x")[0] == 400  # a key search needs its topic
    _, one_msg = http(base, f"/api/messages/{rec.phy_offset}")
    assert (one_msg["queueOffset"], one_msg["bodyCRC"], one_msg["storeSize"]) == \
        (rec.queue_offset, rec.body_crc, rec.store_size)
    assert http(base, f"/api/messages/{rec.phy_offset + 1}")[0] == 404
    # the storage view: the record's fields at their offsets, its queue unit, its index chain
    _, view = http(base, f"/api/storage/{rec.phy_offset}")
    fields = {f["name"]: f for f in view["fields"]}
    raw = bytes(st.commit_log.get_data(rec.phy_offset, rec.store_size))
    assert fields["phy_offset"]["value"] == rec.phy_offset and fields["total"]["value"] == rec.store_size
    for f in view["fields"]:
        assert raw[f["offset"]:f["offset"] + f["size"]].hex().startswith(f["hex"].rstrip("."))
    assert fields["body"]["value"]["crc32"] == rec.body_crc
    assert (view["consumeQueue"]["phyOffset"], view["consumeQueue"]["size"]) == (rec.phy_offset, rec.store_size)
    assert view["consumeQueue"]["position"] == rec.queue_offset * 20
    chains = {c["key"]: c for c in view["index"]}
    assert chains["key-3"]["files"][0]["found"] and chains[uniq]["files"][0]["found"]
    assert chains["key-3"]["files"][0]["chain"][-1]["phyOffset"] == rec.phy_offset
    # groups with lag, clients, health
    c = RemotingClient(b.address)
    c.json_call(C.HEART_BEAT, None, kit.consumer_heartbeat("c1@1", "G", "T"))
    st.consumer_offsets.commit_offset("G", "T", 0, 1)
    _, g = http(base, "/api/groups/G")
    assert g["lag"] == store_lag(st, "G", "T")
    _, groups = http(base, "/api/groups")
    assert next(x for x in groups if x["group"] == "G")["online"] == 1
    b.loop.call_soon_threadsafe(b.http.history.sample)  # as the 10 s sampler does, on the broker's loop
    deadline = time.time() + 5
    while len(http(base, "/api/history")[1]) < 2 and time.time() < deadline:
        time.sleep(0.05)
    _, hist = http(base, "/api/history?group=G")
    assert hist[-1]["lag"] == store_lag(st, "G", "T") and hist[-1]["in"] == 20 and hist[0]["t"] <= hist[-1]["t"]
    _, clients = http(base, "/api/clients")
    assert [(x["group"], [k["clientId"] for k in x["connections"]]) for x in clients["consumers"]] == [("G", ["c1@1"])]
    _, health = http(base, "/api/health")
    assert health["commitlog"]["confirmOffset"] == st.max_phy_offset and health["dispatchBehindBytes"] == 0
    assert health["indexFiles"][0]["indexCount"] == 40  # a key and a unique key per message
    c.close()


def test_writes_need_admin_and_token(http_broker, cpp_client):
    b, base = http_broker()
    assert http(base, "/api/topics", "POST", {"topic": "New", "queues": 2})[0] == 401
    assert http(base, "/api/topics", "POST", {"topic": "New", "queues": 2}, token="wrong")[0] == 403
    assert "New" not in b.topics.table
    status, cfg = http(base, "/api/topics", "POST", {"topic": "New", "queues": 2}, token=TOKEN)
    assert status == 201 and b.topics.table["New"]["readQueueNums"] == 2
    assert http(base, "/api/topics", "POST", {"topic": "bad topic!"}, token=TOKEN)[0] == 400
    # attributes as updateTopic -a alters them; an update without any keeps them
    status, cfg = http(base, "/api/topics", "POST", {"topic": "New", "attributes": "+message.type=FIFO"}, token=TOKEN)
    assert status == 201 and cfg["attributes"] == b.topics.table["New"]["attributes"] == {"message.type": "FIFO"}
    assert http(base, "/api/topics", "POST", {"topic": "New", "queues": 4}, token=TOKEN)[0] == 201
    assert b.topics.table["New"]["attributes"] == {"message.type": "FIFO"} and b.topics.table["New"]["readQueueNums"] == 4
    for bad in ("+message.type=MIXED", "+queue.type=BatchCQ", "message.type=FIFO"):
        assert http(base, "/api/topics", "POST", {"topic": "New", "attributes": bad}, token=TOKEN)[0] == 400, bad
    assert b.topics.table["New"]["attributes"] == {"message.type": "FIFO"}
    assert http(base, "/api/topics/New", "DELETE", token=TOKEN)[0] == 200 and "New" not in b.topics.table
    # reset by time: offsets committed and a live consumer told (RESET_CONSUMER_CLIENT_OFFSET)
    cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "T", "--count", 10, "--quiet")
    b.store.wait_dispatched(10)
    c = RemotingClient(b.address)
    c.json_call(C.HEART_BEAT, None, kit.consumer_heartbeat("c1@1", "G", "T"))
    for q in b.store.topics()["T"]:
        b.store.consumer_offsets.commit_offset("G", "T", q, b.store.get_max_offset_in_queue("T", q))
    status, doc = http(base, "/api/groups/G/reset", "POST", {"topic": "T", "timestamp": 0}, token=TOKEN)
    assert status == 200 and doc["consumersTold"] == 1
    assert store_lag(b.store, "G", "T") == 10
    deadline = time.time() + 5
    while True:
        cmd = c.read()
        if cmd.code == 220 or time.time() > deadline:
            break
    assert cmd.code == 220 and cmd.ext["group"] == "G" and cmd.ext["timestamp"] == "0"
    assert '"queueId":0,"topic":"T"}:0' in cmd.body.decode()
    c.close()


def test_writes_off_without_admin(http_broker):
    b, base = http_broker(token=None)
    status, doc = http(base, "/api/topics", "POST", {"topic": "New"}, token=TOKEN)
    assert status == 403 and "--http-admin" in doc["error"]
    assert http(base, "/api/broker")[1]["httpAdmin"] is False
    assert "New" not in b.topics.table


def test_bad_requests_get_clear_answers(http_broker):
    _, base = http_broker()
    assert http(base, "/api/messages/abc")[0] == 400
    status, doc = http(base, "/api/messages?topic=T&begin=yesterday")
    assert status == 400 and "begin" in doc["error"]
    assert http(base, "/api/topics", "POST", None, token=TOKEN)[0] == 400
    assert http(base, "/nope")[0] == 404


def test_dead_letter_counted_then_resent_and_verify(http_broker):
    """A send-back past its retries goes to %DLQ%G and counts in rocketmq_send_to_dlq_messages_total;
    the API resends it to its topic; a verify's summary shows in /api/health."""
    from rmqstore.types import Message
    b, base = http_broker()
    st = b.store
    b.topics.create_if_absent("Work", 1)
    orig = st.put_message(Message(topic="Work", body=b"job", properties={"KEYS": "job-1"}))
    st.wait_dispatched(10)
    c = RemotingClient(b.address)
    r = c.call(C.CONSUMER_SEND_MSG_BACK, {"offset": orig.phy_offset, "group": "G", "delayLevel": -1,
                                          "originMsgId": orig.msg_id, "originTopic": "Work", "maxReconsumeTimes": 2})
    c.close()
    assert r.code == 0, r.remark
    found = samples(http(base, "/metrics")[1])
    assert one(found, "rocketmq_send_to_dlq_messages_total", consumer_group="G", topic="Work") == 1
    st.wait_dispatched(10)
    dead = st.look_message_by_offset(st.get_commit_log_offset_in_queue("%DLQ%G", 0, 0))
    assert dead.body == b"job" and http(base, f"/api/messages/{orig.phy_offset}/resend", "POST", {},
                                        token=TOKEN)[0] == 400  # not a dead letter
    status, doc = http(base, f"/api/messages/{dead.phy_offset}/resend", "POST", {}, token=TOKEN)
    assert status == 200 and doc["topic"] == "Work"
    again = st.look_message_by_offset(doc["phyOffset"])
    assert (again.topic, again.body, again.reconsume_times) == ("Work", b"job", 0)
    # a body the producer compressed (zlib, RocketMQ's default) is shown as the producer sent it
    import zlib
    text = "compressible " * 50
    z = st.put_message(Message(topic="Work", body=zlib.compress(text.encode()), sys_flag=0x1))
    doc = http(base, f"/api/messages/{z.phy_offset}")[1]
    assert doc["body"] == text and doc["sysFlagBits"]["compression"] == "zlib" and doc["storedBodyLength"] < len(text)
    assert http(base, "/api/health")[1]["lastVerify"] is None
    status, v = http(base, "/api/health/verify", "POST", {}, token=TOKEN)
    assert status == 200 and v["ok"] is True and http(base, "/api/health")[1]["lastVerify"]["ok"] is True


def test_grpc_traffic_is_counted(http_broker):
    """RocketMQ 5's gRPC protocol: sends, a receive (pop) and a pull count as the remoting ones do."""
    from rmqstore.broker.messaging.protocol import pb

    from .test_grpc_protocol import Api
    b, base = http_broker(grpc=True)
    b.topics.create_if_absent("GT", 1)
    a = Api(b.grpc_address)
    try:
        for i in range(3):
            assert a.send("GT", b"grpc-%d" % i).status.code == pb.OK
        b.store.wait_dispatched(10)
        stream = a.receive("GR", "GT", n=32, invisible_ms=20000)
        got = [r for r in stream if r.WhichOneof("content") == "message"]
        pulled = a.PullMessage(pb.PullMessageRequest(
            group=pb.Resource(name="GP"), message_queue=pb.MessageQueue(topic=pb.Resource(name="GT"), id=0),
            offset=0, batch_size=32, filter_expression=pb.FilterExpression(type=pb.TAG, expression="*")))
    finally:
        a.close()
    assert len(got) == 3, stream
    assert len([r for r in pulled if r.WhichOneof("content") == "message"]) == 3
    assert b.store.consumer_offsets.query_pull_offsets("GP", "GT") == {0: 3}  # where GP pulls next (inflight)
    found = samples(http(base, "/metrics")[1])
    assert one(found, "rocketmq_messages_in_total", topic="GT", message_type="normal") == 3
    assert one(found, "rocketmq_messages_out_total", topic="GT", consumer_group="GR") == 3
    assert one(found, "rocketmq_messages_out_total", topic="GT", consumer_group="GP") == 3
    sizes = sum(b.store.look_message_by_offset(b.store.get_commit_log_offset_in_queue("GT", 0, o)).store_size
                for o in range(3))
    assert one(found, "rocketmq_throughput_out_total", topic="GT", consumer_group="GP") == sizes


def test_serve_command_http_options(tmp_path):
    """``rmqstore serve --http-listen``: the listening line names the HTTP address, /metrics answers,
    SIGTERM stops it cleanly; the options are checked before anything starts."""
    import signal
    import subprocess
    import sys
    rmq = [sys.executable, "-m", "rmqstore.cli.main", "serve", "--store", str(tmp_path / "s")]
    p = subprocess.run(rmq + ["--http-listen", "127.0.0.1:0", "--http-admin"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, RMQSTORE_HTTP_TOKEN=""))
    assert p.returncode == 2 and "needs a token" in p.stderr, p.stderr
    p = subprocess.Popen(rmq + ["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--http-admin", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, RMQSTORE_HTTP_TOKEN=TOKEN))
    try:
        doc = json.loads(p.stdout.readline())
        base = f"http://{doc['http']}"
        assert http(base, "/metrics")[0] == 200
        assert http(base, "/api/topics", "POST", {"topic": "ViaCli"}, token=TOKEN)[0] == 201
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err


def test_storage_view_of_a_message_with_two_keys(http_broker):
    """Each word of KEYS has its own index chain, and each chain ends at the record."""
    from rmqstore.types import Message
    b, base = http_broker()
    st = b.store
    for i in range(30):  # other keys first: chains in the same slots are possible, never wrong
        st.put_message(Message(topic="K", body=b"filler", properties={"KEYS": f"f{i}"}))
    r = st.put_message(Message(topic="K", body=b"two keys", properties={"KEYS": "alpha beta", "TAGS": "t"}))
    st.wait_dispatched(10)
    status, view = http(base, f"/api/storage/{r.phy_offset}")
    assert status == 200
    chains = {c["key"]: c for c in view["index"]}
    assert set(chains) == {"alpha", "beta"}  # no UNIQ_KEY on a message put without one
    for key, c in chains.items():
        walk = c["files"][0]
        assert walk["found"] and walk["chain"][-1]["phyOffset"] == r.phy_offset
        assert walk["slot"] == c["keyHash"] % walk["slotNum"] and c["indexKey"] == f"K#{key}"
    fields = {f["name"]: f for f in view["fields"]}
    assert fields["topic"]["value"] == "K" and "KEYS=alpha beta" in fields["properties"]["value"]
    assert sum(f["size"] for f in view["fields"]) == r.wrote_bytes  # every byte of the record, once


def test_read_only_broker_serves_reads_and_refuses_writes(tmp_path):
    from rmqstore.types import Message
    path = Path(tmp_path) / "store"
    with MessageStore.open(path, broker_store_config()) as st:
        st.put_message(Message(topic="RO", body=b"x"))
    st = MessageStore.open(path, broker_store_config(), read_only=True)
    b = Broker(st, BrokerConfig.from_properties({"brokerName": "broker-a"}), listen="127.0.0.1:0",
               http=HttpOptions("127.0.0.1:0", TOKEN))
    b.start()
    try:
        base = f"http://{b.http.address}"
        found = samples(http(base, "/metrics")[1])
        assert one(found, "rocketmq_broker_permission") == 4
        assert http(base, "/api/broker")[1]["readOnly"] is True
        status, doc = http(base, "/api/topics", "POST", {"topic": "New"}, token=TOKEN)
        assert status == 409 and "read-only" in doc["error"]
    finally:
        b.stop()
        st.close()
