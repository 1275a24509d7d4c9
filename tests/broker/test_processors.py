"""The broker's request processors, driven by a small remoting client: routes, sends, pulls with
long polling, offsets, operator queries, admin requests, client management."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

from rmqstore.broker import remoting as R
from rmqstore.broker.messages import java_properties
from rmqstore.engine.consumer_offsets import parse_broker_json

C, RC = R.RequestCode, R.ResponseCode


def test_routes_unknown_default_and_created_topics(start_broker, connect, send_v2):
    b = start_broker()
    c = connect(b.address)
    r = c.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert r.code == RC.TOPIC_NOT_EXIST and "Nope" in r.remark
    r = c.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
    route = json.loads(r.body)
    assert r.code == RC.SUCCESS and route["queueDatas"][0]["perm"] == 7
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": b.address}
    assert send_v2(c, "Orders", b"x").code == RC.SUCCESS  # auto-created from TBW102 with the client's 4 queues
    q = json.loads(c.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}).body)["queueDatas"][0]
    assert (q["readQueueNums"], q["writeQueueNums"], q["perm"], q["brokerName"]) == (4, 4, 6, "broker-a")
    old = c.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}, version=121)  # below V4_9_4: fastjson int keys
    assert b'"brokerAddrs":{0:"' in old.body
    raw = c.call(C.GET_BROKER_CLUSTER_INFO).body  # fastjson's bare integer keys, as upstream's name server
    assert b'"brokerAddrs":{0:"' in raw
    info = parse_broker_json(raw.decode())
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


def test_auto_create_off_refuses_unknown_topics(start_broker, connect, send_v2):
    b = start_broker(broker={"autoCreateTopicEnable": "false"})
    c = connect(b.address)
    r = send_v2(c, "Orders", b"x")
    assert r.code == RC.TOPIC_NOT_EXIST and "apply first" in r.remark
    assert b.store.max_phy_offset == 0


@pytest.mark.parametrize("code", [C.SEND_MESSAGE, C.SEND_MESSAGE_V2])
def test_send_then_pull_returns_the_stored_bytes(start_broker, connect, send_v2, pull, props_text, records_in,
                                                  stored_bytes, code):
    b = start_broker()
    c = connect(b.address)
    props = props_text(KEYS="k1 k2", TAGS="TagA", UNIQ_KEY="0A0B0C0D0E0F10111213141516171819", WAIT="true", a="1")
    r = send_v2(c, "Orders", b"hello", props=props, queue_id=1, code=code)
    assert r.code == RC.SUCCESS, r.remark
    assert (r.ext["queueId"], r.ext["queueOffset"]) == ("1", "0")
    assert r.ext["transactionId"] == "0A0B0C0D0E0F10111213141516171819" and r.ext["MSG_REGION"] == "DefaultRegion"
    b.store.wait_dispatched(10)
    p = pull(c, "G1", "Orders", 1, 0)
    assert p.code == RC.SUCCESS and p.ext["nextBeginOffset"] == "1" and p.ext["maxOffset"] == "1"
    (rec,) = records_in(p.body)
    assert p.body == stored_bytes(b.store, rec.phy_offset, rec.store_size)
    assert rec.msg_id == r.ext["msgId"] and rec.body == b"hello" and rec.born_timestamp == 1_700_000_000_000
    expected = {"KEYS": "k1 k2", "TAGS": "TagA", "UNIQ_KEY": "0A0B0C0D0E0F10111213141516171819", "WAIT": "true",
                "a": "1", "CLUSTER": "DefaultCluster"}
    assert list(rec.properties.items()) == java_properties(expected)  # the order a Java broker stores
    host, _, port = rec.born_host.rpartition(":")
    assert host == "127.0.0.1" and int(port) == c.sock.getsockname()[1]
    assert rec.store_host == b.address


def test_send_without_uniq_key_gets_one_and_illegal_sends_are_refused(start_broker, connect, send_v2, records_in,
                                                                       pull):
    b = start_broker(max_message_size=1024)
    c = connect(b.address)
    assert send_v2(c, "T1", b"x").code == RC.SUCCESS
    b.store.wait_dispatched(10)
    found = [m for q in range(4) for m in records_in(pull(c, "G", "T1", q, 0).body)]
    assert len(found) == 1 and len(found[0].uniq_key) == 32
    before = b.store.max_phy_offset
    assert send_v2(c, "bad topic", b"x").code == RC.INVALID_PARAMETER
    assert send_v2(c, "SCHEDULE_TOPIC_XXXX", b"x").code == RC.NO_PERMISSION
    assert send_v2(c, "T1", b"x", queue_id=9).code == RC.INVALID_PARAMETER
    assert send_v2(c, "T1", b"x" * 2000).code == RC.MESSAGE_ILLEGAL
    assert send_v2(c, "T1", b"x", props="DELAY\x01 2\x02").code == RC.MESSAGE_ILLEGAL
    r = c.call(C.SEND_MESSAGE_V2, {"b": "T1"}, b"x")  # no queueId: a header error, the connection lives on
    assert r.code == RC.SYSTEM_ERROR and "is null" in r.remark
    assert b.store.max_phy_offset == before  # nothing written for a refused request
    assert send_v2(c, "T1", b"y").code == RC.SUCCESS


def _batch_body(n: int) -> bytes:
    out = b""
    for i in range(n):
        body = f"m{i}".encode()
        props = f"KEYS\x01bk{i}\x02UNIQ_KEY\x01{i:032X}\x02".encode()
        out += ((22 + len(body) + len(props)).to_bytes(4, "big") + b"\0" * 8 + (0).to_bytes(4, "big")
                + len(body).to_bytes(4, "big") + body + len(props).to_bytes(2, "big") + props)
    return out


def test_batch_decision_follows_the_header(start_broker, connect, send_v2, pull, records_in):
    b = start_broker()
    c = connect(b.address)
    body = _batch_body(5)
    r = send_v2(c, "B", body, code=C.SEND_BATCH_MESSAGE, queue_id=0, batch="true")
    assert r.code == RC.SUCCESS and r.ext["queueOffset"] == "0"
    assert list(r.ext) == ["MSG_REGION", "TRACE_ON", "msgId", "queueId", "queueOffset"]  # (Java's order)
    batch_ids = r.ext["msgId"].split(",")
    # the C++ client's batch="1" is not a batch for Boolean.parseBoolean: one message holding the bytes
    r = send_v2(c, "B", body, code=C.SEND_BATCH_MESSAGE, queue_id=0, batch="1")
    assert r.code == RC.SUCCESS and r.ext["queueOffset"] == "5"
    b.store.wait_dispatched(10)
    recs = records_in(pull(c, "G", "B", 0, 0).body)
    assert [m.body for m in recs] == [b"m0", b"m1", b"m2", b"m3", b"m4", body]
    assert batch_ids == [m.msg_id for m in recs[:5]]  # each message's offsetMsgId, in order
    assert recs[2].keys == ["bk2"]
    assert send_v2(c, "B", b"\0\0\0\x30junk", code=C.SEND_BATCH_MESSAGE, queue_id=0,
                   batch="true").code == RC.MESSAGE_ILLEGAL


def test_query_by_key_unique_key_and_view_by_offset_are_byte_exact(start_broker, connect, send_v2, props_text,
                                                                    stored_bytes):
    b = start_broker()
    c = connect(b.address)
    for i in range(3):
        send_v2(c, "Q", f"v{i}".encode(), queue_id=0, props=props_text(KEYS=f"order-{i % 2}", UNIQ_KEY=f"{i:032X}"))
    b.store.wait_dispatched(10)
    r = c.call(C.QUERY_MESSAGE, {"topic": "Q", "key": "order-0", "maxNum": 32, "beginTimestamp": 0,
                                 "endTimestamp": 2**62})
    recs = b.store.query_message("Q", "order-0", 32, exact=False).messages
    assert r.code == RC.SUCCESS and len(recs) == 2
    assert r.body == b"".join(stored_bytes(b.store, m.phy_offset, m.store_size) for m in recs)
    assert int(r.ext["indexLastUpdatePhyoffset"]) > 0
    r = c.call(C.QUERY_MESSAGE, {"topic": "Q", "key": f"{1:032X}", "maxNum": 1, "beginTimestamp": 0,
                                 "endTimestamp": 2**62, "_UNIQUE_KEY_QUERY": "true"})
    assert r.code == RC.SUCCESS and b"v1" in r.body
    r = c.call(C.QUERY_MESSAGE, {"topic": "Q", "key": "none", "maxNum": 32, "beginTimestamp": 0,
                                 "endTimestamp": 2**62})
    assert r.code == RC.QUERY_NOT_FOUND
    m = recs[1]
    r = c.call(C.VIEW_MESSAGE_BY_ID, {"offset": m.phy_offset})
    assert r.code == RC.SUCCESS and r.body == stored_bytes(b.store, m.phy_offset, m.store_size)
    r = c.call(C.VIEW_MESSAGE_BY_ID, {"offset": 10**9})
    assert r.code == RC.SYSTEM_ERROR and str(10**9) in r.remark


def test_offsets_requests(start_broker, connect, send_v2):
    b = start_broker()
    c = connect(b.address)
    for i in range(3):
        send_v2(c, "O", f"{i}".encode(), queue_id=0)
    b.store.wait_dispatched(10)
    q = {"consumerGroup": "G", "topic": "O", "queueId": 0}
    # a new group: 0 while the queue starts at 0 and its first message is in memory
    assert c.call(C.QUERY_CONSUMER_OFFSET, q).ext["offset"] == "0"
    assert c.call(C.QUERY_CONSUMER_OFFSET, {**q, "queueId": 3}).code == RC.QUERY_NOT_FOUND  # empty queue
    assert c.call(C.QUERY_CONSUMER_OFFSET, {**q, "setZeroIfNotFound": "false"}).code == RC.QUERY_NOT_FOUND
    c.send(C.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": 2}, oneway=True)  # oneway: no reply
    r = c.call(C.QUERY_CONSUMER_OFFSET, q)
    assert (r.code, r.ext["offset"]) == (RC.SUCCESS, "2")
    assert c.call(C.GET_MAX_OFFSET, {"topic": "O", "queueId": 0}).ext["offset"] == "3"
    assert c.call(C.GET_MIN_OFFSET, {"topic": "O", "queueId": 0}).ext["offset"] == "0"
    t1 = b.store.get_message_store_timestamp("O", 0, 1)
    assert c.call(C.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "O", "queueId": 0, "timestamp": t1}).ext["offset"] == \
        str(b.store.get_offset_in_queue_by_time("O", 0, t1))
    r = c.call(C.GET_EARLIEST_MSG_STORETIME, {"topic": "O", "queueId": 0})
    assert r.ext["timestamp"] == str(b.store.get_message_store_timestamp("O", 0, 0))
    b.persist()
    doc = parse_broker_json(open(os.path.join(b.store.path, "config", "consumerOffset.json")).read())
    assert doc["offsetTable"]["O@G"] == {"0": 2}


def test_pull_statuses_and_commit_piggyback(start_broker, connect, send_v2, pull):
    b = start_broker()
    c = connect(b.address)
    send_v2(c, "P", b"a", queue_id=0, props="TAGS\x01TagA\x02")
    send_v2(c, "P", b"b", queue_id=0, props="TAGS\x01TagB\x02")
    b.store.wait_dispatched(10)
    assert pull(c, "G", "P", 0, 0, sub="TagB").code == RC.SUCCESS
    assert pull(c, "G", "P", 0, 0, sub="TagC").code == RC.PULL_RETRY_IMMEDIATELY
    assert pull(c, "G", "P", 0, 2).code == RC.PULL_NOT_FOUND
    r = pull(c, "G", "P", 0, 9)
    assert (r.code, r.ext["nextBeginOffset"]) == (RC.PULL_OFFSET_MOVED, "2")
    assert pull(c, "G", "Nope", 0, 0).code == RC.TOPIC_NOT_EXIST
    assert pull(c, "G", "P", 7, 0).code == RC.SYSTEM_ERROR
    pull(c, "G", "P", 0, 1, commit=1, suspend_ms=10)
    assert b.store.consumer_offsets.query_offset("G", "P", 0) == 1
    no_sub = c.call(C.PULL_MESSAGE, {"consumerGroup": "G", "topic": "P", "queueId": 0, "queueOffset": 0,
                                     "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0})
    assert no_sub.code == RC.SUBSCRIPTION_NOT_EXIST


def test_long_poll_is_held_and_woken_by_a_new_message(start_broker, connect, send_v2, pull):
    b = start_broker()
    c, other = connect(b.address), connect(b.address)
    send_v2(other, "L", b"first", queue_id=0)
    b.store.wait_dispatched(10)
    t0 = time.monotonic()
    r = pull(c, "G", "L", 0, 1, suspend_ms=1500)  # nothing new: held for its suspend time
    held = time.monotonic() - t0
    assert r.code == RC.PULL_NOT_FOUND and 1.4 <= held < 5
    # a held pull does not block the connection's other requests
    op = c.send(C.PULL_MESSAGE, {"consumerGroup": "G", "topic": "L", "queueId": 0, "queueOffset": 1,
                                 "maxMsgNums": 32, "sysFlag": 6, "commitOffset": 0, "suspendTimeoutMillis": 15000,
                                 "subscription": "*", "expressionType": "TAG"})
    t0 = time.monotonic()
    assert c.call(C.GET_MAX_OFFSET, {"topic": "L", "queueId": 0}).ext["offset"] == "1"
    assert time.monotonic() - t0 < 1
    sender = threading.Timer(0.5, lambda: send_v2(other, "L", b"second", queue_id=0))
    t_send = time.monotonic() + 0.5
    sender.start()
    r = c.response_to(op)
    woke = time.monotonic() - t_send
    sender.join()
    assert r.code == RC.SUCCESS and b"second" in r.body
    assert woke < 0.2, f"woken {woke * 1000:.0f} ms after the send"


def test_unknown_request_code(start_broker, connect):
    b = start_broker()
    c = connect(b.address)
    r = c.call(9999)
    assert r.code == RC.REQUEST_CODE_NOT_SUPPORTED and "9999" in r.remark
    assert c.call(C.GET_BROKER_CLUSTER_INFO).code == RC.SUCCESS


def _heartbeat(client_id: str, group: str, topic: str, sub: str = "*") -> dict:
    return {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": sub, "tagsSet": [], "codeSet": [], "subVersion": 1,
                                 "classFilterMode": False, "expressionType": "TAG"}]}]}


def test_heartbeats_consumer_list_and_member_change_notice(start_broker, connect):
    b = start_broker()
    c1, c2 = connect(b.address), connect(b.address)
    assert c1.json_call(C.HEART_BEAT, None, _heartbeat("c1@1", "G", "T"))[0].code == RC.SUCCESS
    c2.json_call(C.HEART_BEAT, None, _heartbeat("c2@1", "G", "T"))
    r, doc = c1.json_call(C.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
    assert doc == {"consumerIdList": ["c1@1", "c2@1"]}
    notice = c1.read()  # c2 joining is announced to c1 (NOTIFY_CONSUMER_IDS_CHANGED, oneway)
    assert notice.code == C.NOTIFY_CONSUMER_IDS_CHANGED and notice.ext == {"consumerGroup": "G"}
    assert "%RETRY%G" in b.topics.table  # a clustering group gets its retry topic
    r, doc = c1.json_call(C.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G"})
    assert {x["clientId"] for x in doc["connectionSet"]} == {"c1@1", "c2@1"} and "T" in doc["subscriptionTable"]
    c2.call(C.UNREGISTER_CLIENT, {"clientID": "c2@1", "consumerGroup": "G"})
    assert c1.json_call(C.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})[1] == {"consumerIdList": ["c1@1"]}
    c1.close()
    deadline = time.time() + 5
    while b.clients.consumers.get("G") and time.time() < deadline:
        time.sleep(0.02)
    assert "G" not in b.clients.consumers
    assert c2.call(C.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}).code == RC.SYSTEM_ERROR
    assert c2.json_call(C.CHECK_CLIENT_CONFIG, None, {"subscriptionData": {"expressionType": "SQL92"}})[0].code \
        == RC.SUBSCRIPTION_PARSE_FAILED


def test_orderly_queue_locks(start_broker, connect):
    b = start_broker()
    c = connect(b.address)
    mqs = [{"topic": "T", "brokerName": "broker-a", "queueId": q} for q in range(2)]
    _, doc = c.json_call(C.LOCK_BATCH_MQ, None, {"consumerGroup": "G", "clientId": "a", "mqSet": mqs})
    assert doc["lockOKMQSet"] == mqs
    _, doc = c.json_call(C.LOCK_BATCH_MQ, None, {"consumerGroup": "G", "clientId": "b", "mqSet": mqs})
    assert doc["lockOKMQSet"] == []
    c.json_call(C.UNLOCK_BATCH_MQ, None, {"consumerGroup": "G", "clientId": "a", "mqSet": mqs[:1]})
    _, doc = c.json_call(C.LOCK_BATCH_MQ, None, {"consumerGroup": "G", "clientId": "b", "mqSet": mqs})
    assert doc["lockOKMQSet"] == mqs[:1]


def test_admin_requests_and_state_files(start_broker, connect, send_v2, stop_broker, tmp_path):
    b = start_broker()
    c = connect(b.address)
    r = c.call(C.UPDATE_AND_CREATE_TOPIC, {"topic": "Admin", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
                                           "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    assert r.code == RC.SUCCESS
    send_v2(c, "Admin", b"x", queue_id=1)
    b.store.wait_dispatched(10)
    c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "Admin", "queueId": 1, "commitOffset": 1})
    cfgs = json.loads(c.call(C.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    assert cfgs["Admin"]["readQueueNums"] == 2 and "TBW102" in cfgs
    stats = c.call(C.GET_TOPIC_STATS_INFO, {"topic": "Admin"}).body.decode()
    assert '{"brokerName":"broker-a","queueId":1,"topic":"Admin"}:{"minOffset":0,"maxOffset":1' in stats
    cs = c.call(C.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "Admin"}).body.decode()
    assert '"queueId":1,"topic":"Admin"}:{"brokerOffset":1,"consumerOffset":1' in cs
    assert json.loads(c.call(C.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "Admin"}).body) == {"groupList": ["G"]}
    assert c.call(C.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G"}).code == RC.CONSUMER_NOT_ONLINE
    r, _ = c.json_call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, {"groupName": "G2", "retryMaxTimes": 3})
    assert r.code == RC.SUCCESS
    groups = json.loads(c.call(C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)["subscriptionGroupTable"]
    assert groups["G2"]["retryMaxTimes"] == 3 and groups["G2"]["retryQueueNums"] == 1  # upstream's defaults filled
    assert c.json_call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, {"retryMaxTimes": 3})[0].code == RC.SYSTEM_ERROR
    path = b.store.path
    stop_broker(b)
    topics = json.loads(open(os.path.join(path, "config", "topics.json")).read())
    assert topics["topicConfigTable"]["Admin"]["writeQueueNums"] == 2 and "dataVersion" in topics
    offsets = parse_broker_json(open(os.path.join(path, "config", "consumerOffset.json")).read())
    assert offsets["offsetTable"]["Admin@G"] == {"1": 1}
    groups = json.loads(open(os.path.join(path, "config", "subscriptionGroup.json")).read())
    assert groups["subscriptionGroupTable"]["G2"]["retryMaxTimes"] == 3
    b2 = start_broker(path=path)  # a restart keeps topics and offsets
    c2 = connect(b2.address)
    assert json.loads(c2.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "Admin"}).body)["queueDatas"][0]["readQueueNums"] == 2
    assert c2.call(C.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "Admin", "queueId": 1}).ext["offset"] == "1"


def test_java_written_state_files_are_read(start_broker, connect, tmp_path):
    """fastjson's unquoted integer keys and fields rmqstore does not know survive a round trip."""
    cfg_dir = tmp_path / "store" / "config"
    cfg_dir.mkdir(parents=True)
    (cfg_dir / "topics.json").write_text('{"dataVersion":{"counter":7,"timestamp":1},"topicConfigTable":{"J":'
                                         '{"topicName":"J","readQueueNums":3,"writeQueueNums":3,"perm":6,'
                                         '"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,'
                                         '"attributes":{"+message.type":"NORMAL"}}}}')
    (cfg_dir / "delayOffset.json").write_text('{"offsetTable":{1:5,3:2}}')
    b = start_broker(path=tmp_path / "store")
    assert b.topics.get("J")["attributes"] == {"+message.type": "NORMAL"} and b.topics.file.counter >= 7
    assert b.delay_offsets.table == {1: 5, 3: 2}
    c = connect(b.address)
    assert json.loads(c.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "J"}).body)["queueDatas"][0]["readQueueNums"] == 3


def test_topics_of_a_store_without_config_are_served(tmp_path, start_broker, connect, pull, records_in):
    """A store written through the embedded API (no topics.json) gets routes for what it holds."""
    from rmqstore import Message, MessageStore, MessageStoreConfig

    path = tmp_path / "store"
    cfg = MessageStoreConfig.embedded(mapped_file_size_commit_log=4 << 20, mapped_file_size_consume_queue=80000,
                                      max_hash_slot_num=4000, max_index_num=16000)
    with MessageStore.open(path, cfg) as st:
        st.put_message(Message.create("Embedded", b"e", queue_id=2, tags="t"))
        st.wait_dispatched(10)
    b = start_broker(path=path)
    c = connect(b.address)
    q = json.loads(c.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "Embedded"}).body)["queueDatas"][0]
    assert (q["readQueueNums"], q["writeQueueNums"], q["perm"]) == (3, 3, 6)
    assert [m.body for m in records_in(pull(c, "G", "Embedded", 2, 0).body)] == [b"e"]


def test_broker_conf_keys_and_advertised_address(tmp_path, start_broker, connect):
    from rmqstore.broker import BrokerConfig
    from rmqstore.errors import ConfigError

    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b1\nbrokerClusterName=C1\nbrokerIP1=10.1.2.3\nlistenPort=10911\n"
                    "defaultTopicQueueNums=2\nautoCreateTopicEnable=false\nbrokerIp1=ignored\n")
    cfg = BrokerConfig.from_properties(conf)
    assert (cfg.broker_name, cfg.broker_cluster_name, cfg.broker_ip1, cfg.listen_port) == ("b1", "C1", "10.1.2.3", 10911)
    assert cfg.default_topic_queue_nums == 2 and cfg.auto_create_topic_enable is False
    bad = tmp_path / "bad.conf"
    bad.write_text("defaultTopicQueueNums=8 \n")  # Integer.parseInt refuses the blank: the broker would ignore it
    with pytest.raises(ConfigError, match="defaultTopicQueueNums"):
        BrokerConfig.from_properties(bad)
    b = start_broker(broker=cfg.replace(auto_create_topic_enable=True))
    assert b.address == "10.1.2.3:10911"  # routes advertise brokerIP1:listenPort, for clients on other hosts
    c = connect(f"127.0.0.1:{b.server_port}")
    route = json.loads(c.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).body)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "10.1.2.3:10911"}
    assert route["queueDatas"][0]["writeQueueNums"] == 2
