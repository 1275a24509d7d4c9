"""The standalone name server frame by frame: registration rules, routes of several broker groups
with ids 0/1, expiry, unregistration, the topic lists and KV config, a REGISTER_BROKER frame built
as a Java broker builds it."""
from __future__ import annotations

import json
import os
import socket
import struct
import time
import zlib

import pytest

from rmqstore.broker import remoting as R
from rmqstore.broker.namesrv import NamesrvCode as N, body_crc32
from rmqstore.engine.consumer_offsets import parse_broker_json

RC = R.ResponseCode


def topic(name: str, queues: int = 4, perm: int = 6) -> dict:
    return {"attributes": {}, "order": False, "perm": perm, "readQueueNums": queues, "topicFilterType": "SINGLE_TAG",
            "topicName": name, "topicSysFlag": 0, "writeQueueNums": queues}


def register_body(topics: list[dict], counter: int = 1, state: int = 0) -> bytes:
    """``RegisterBrokerBody`` as fastjson writes it (fields sorted, compact)."""
    wrapper = {"dataVersion": {"counter": counter, "stateVersion": state, "timestamp": 1700000000000},
               "mappingDataVersion": {"counter": 0, "stateVersion": 0, "timestamp": 1700000000000},
               "topicConfigTable": {t["topicName"]: t for t in topics}, "topicQueueMappingDetailMap": {},
               "topicQueueMappingInfoMap": {}}
    return json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": wrapper}, separators=(",", ":"),
                      sort_keys=True).encode()


def register(c, name: str, addr: str, bid: int, topics: list[dict], *, cluster: str = "c1", crc: bool = True,
             **extra):
    body = register_body(topics, **{k: extra.pop(k) for k in ("counter", "state") if k in extra})
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": cluster, "haServerAddr": addr[:-1] + "2",
           "brokerId": bid, "enableActingMaster": False, "compressed": False,
           "bodyCrc32": body_crc32(body) if crc else 0, **extra}
    if ext["enableActingMaster"] is None:  # a broker older than 5.0 sends no such field
        del ext["enableActingMaster"]
    return c.call(N.REGISTER_BROKER, ext, body)


TOPICS = [topic("T"), topic("c1", 16, 7), topic("broker-x", 1, 7)]


def route(c, name: str, version: int = R.VERSION_V4_9_4):
    r = c.call(N.GET_ROUTEINFO_BY_TOPIC, {"topic": name}, version=version)
    return r, (json.loads(r.body) if r.code == RC.SUCCESS else None)


def test_two_groups_ids_0_and_1_route_and_master_named_to_the_slave(namesrv, connect):
    ns = namesrv()
    c = connect(ns.address)
    r = register(c, "broker-a", "10.0.0.1:10911", 0, TOPICS)
    assert r.code == RC.SUCCESS and "masterAddr" not in r.ext and "haServerAddr" not in r.ext
    r = register(c, "broker-a", "10.0.0.2:10911", 1, TOPICS)
    assert r.code == RC.SUCCESS
    assert (r.ext["masterAddr"], r.ext["haServerAddr"]) == ("10.0.0.1:10911", "10.0.0.1:10912")
    assert register(c, "broker-b", "10.0.0.3:10911", 0, [topic("T", 2), topic("U")]).code == RC.SUCCESS
    r, doc = route(c, "T")
    assert [b["brokerName"] for b in doc["brokerDatas"]] == ["broker-a", "broker-b"]
    assert doc["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
    assert doc["brokerDatas"][0]["cluster"] == "c1" and doc["brokerDatas"][0]["enableActingMaster"] is False
    assert [(q["brokerName"], q["writeQueueNums"], q["perm"]) for q in doc["queueDatas"]] == [
        ("broker-a", 4, 6), ("broker-b", 2, 6)]
    assert r.body.startswith(b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},')
    old, _ = c.call(N.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, version=121), None
    assert b'"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}' in old.body  # fastjson's bare keys
    std = c.call(N.GET_ROUTEINFO_BY_TOPIC, {"topic": "T", "acceptStandardJsonOnly": "true"}, version=121)
    assert b'{"0":"10.0.0.1:10911"' in std.body
    assert route(c, "U")[1]["queueDatas"][0]["brokerName"] == "broker-b"
    r = c.call(N.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert r.code == RC.TOPIC_NOT_EXIST and "Nope" in r.remark
    info = c.call(N.GET_BROKER_CLUSTER_INFO)
    assert b'"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}' in info.body
    doc = parse_broker_json(info.body.decode())
    assert doc["clusterAddrTable"] == {"c1": ["broker-a", "broker-b"]}
    assert set(doc["brokerAddrTable"]) == {"broker-a", "broker-b"}


def test_slave_topics_do_not_count_and_slave_alone_keeps_queue_data(namesrv, connect):
    ns = namesrv()
    c = connect(ns.address)
    r = register(c, "broker-a", "10.0.0.2:10911", 1, TOPICS + [topic("SlaveOnly")], enableActingMaster=None)
    assert r.code == RC.SUCCESS and "masterAddr" not in r.ext  # no live master
    assert route(c, "SlaveOnly")[0].code == RC.TOPIC_NOT_EXIST  # a 4.x slave's topics never count
    register(c, "broker-a", "10.0.0.2:10911", 1, TOPICS + [topic("SlaveOnly")], counter=2)
    assert route(c, "SlaveOnly")[0].code == RC.SUCCESS  # a 5.x slave with the lowest live id counts
    assert register(c, "broker-a", "10.0.0.1:10911", 0, TOPICS).code == RC.SUCCESS
    assert c.call(N.UNREGISTER_BROKER, {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911",
                                        "clusterName": "c1", "brokerId": 0}).code == RC.SUCCESS
    r, doc = route(c, "T")  # the master is gone; the slave lives: the queues stay, the slave is routed
    assert r.code == RC.SUCCESS and doc["brokerDatas"][0]["brokerAddrs"] == {"1": "10.0.0.2:10911"}
    c.call(N.UNREGISTER_BROKER, {"brokerName": "broker-a", "brokerAddr": "10.0.0.2:10911", "clusterName": "c1",
                                 "brokerId": 1})
    assert route(c, "T")[0].code == RC.TOPIC_NOT_EXIST
    assert parse_broker_json(c.call(N.GET_BROKER_CLUSTER_INFO).body.decode()) == {"brokerAddrTable": {},
                                                                                  "clusterAddrTable": {}}


def test_first_registration_with_one_topic_is_refused(namesrv, connect):
    c = connect(namesrv().address)
    r = register(c, "broker-a", "10.0.0.1:10911", 0, [topic("Only")])
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "register broker failed")
    assert route(c, "Only")[0].code == RC.TOPIC_NOT_EXIST
    assert register(c, "broker-a", "10.0.0.1:10911", 0, TOPICS).code == RC.SUCCESS
    assert register(c, "broker-a", "10.0.0.1:10911", 0, [topic("Only")], counter=2).code == RC.SUCCESS
    assert route(c, "Only")[0].code == RC.SUCCESS  # once registered, one topic is fine


def test_address_re_registering_under_another_id_replaces_its_entry(namesrv, connect):
    c = connect(namesrv().address)
    register(c, "broker-a", "10.0.0.1:10911", 0, TOPICS)
    register(c, "broker-a", "10.0.0.2:10911", 1, TOPICS)
    c.call(N.UNREGISTER_BROKER, {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911", "clusterName": "c1",
                                 "brokerId": 0})
    assert register(c, "broker-a", "10.0.0.2:10911", 0, TOPICS).code == RC.SUCCESS  # the slave promoted
    assert route(c, "T")[1]["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.2:10911"}
    r = register(c, "broker-a", "10.0.0.1:10911", 1, TOPICS)  # the old master rejoins as its slave
    assert r.ext["masterAddr"] == "10.0.0.2:10911" and r.ext["haServerAddr"] == "10.0.0.2:10912"
    assert route(c, "T")[1]["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.2:10911", "1": "10.0.0.1:10911"}


def test_expiry_after_the_heartbeat_timeout_and_renewal(namesrv, connect):
    ns = namesrv(scan=0.05)
    a, b, c = connect(ns.address), connect(ns.address), connect(ns.address)
    assert register(a, "broker-a", "10.0.0.1:10911", 0, TOPICS, heartbeatTimeoutMillis=1000).code == RC.SUCCESS
    assert register(b, "broker-b", "10.0.0.3:10911", 0, [topic("T"), topic("U")]).code == RC.SUCCESS  # 120 s
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.0:  # twice the timeout, alive because BROKER_HEARTBEAT renews it
        time.sleep(0.2)
        assert c.call(N.BROKER_HEARTBEAT, {"clusterName": "c1", "brokerAddr": "10.0.0.1:10911"}).code == RC.SUCCESS
    assert len(route(c, "T")[1]["brokerDatas"]) == 2
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(route(c, "T")[1]["brokerDatas"]) == 2:
        time.sleep(0.05)
    _, doc = route(c, "T")
    assert [b["brokerName"] for b in doc["brokerDatas"]] == ["broker-b"]
    assert route(c, "U")[0].code == RC.SUCCESS
    with pytest.raises(ConnectionError):  # the expired broker's connection is closed, as upstream's
        a.call(N.BROKER_HEARTBEAT, {"clusterName": "c1", "brokerAddr": "10.0.0.1:10911"})


def test_closed_connection_unregisters_its_broker(namesrv, connect):
    ns = namesrv()
    c = connect(ns.address)
    register(c, "broker-a", "10.0.0.1:10911", 0, TOPICS)
    assert route(c, "T")[0].code == RC.SUCCESS
    c.close()
    c2 = connect(ns.address)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and route(c2, "T")[0].code == RC.SUCCESS:
        time.sleep(0.02)
    assert route(c2, "T")[0].code == RC.TOPIC_NOT_EXIST


def test_crc_and_body_errors(namesrv, connect):
    c = connect(namesrv().address)
    body = register_body(TOPICS)
    ext = {"brokerName": "b", "brokerAddr": "10.0.0.1:10911", "clusterName": "c1", "haServerAddr": "x:1",
           "brokerId": 0, "bodyCrc32": body_crc32(body) ^ 1}
    r = c.call(N.REGISTER_BROKER, ext, body)
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "crc32 not match")
    r = c.call(N.REGISTER_BROKER, dict(ext, bodyCrc32=0), b"{not json")
    assert r.code == RC.SYSTEM_ERROR and "RegisterBrokerBody" in r.remark
    r = c.call(N.REGISTER_BROKER, {"brokerName": "b"}, body)
    assert r.code == RC.SYSTEM_ERROR and "is null" in r.remark
    r = c.call(N.REGISTER_BROKER, dict(ext, bodyCrc32=0), register_body([topic("A"), dict(topic("B"), perm="rw")]))
    assert r.code == RC.SYSTEM_ERROR and "'B': perm not integers" in r.remark
    for junk in (b"\x78\x9c garbage", zlib.compress(b"\0\0\0\x05{}"), zlib.compress(bytes(65 << 20), 1)):
        r = c.call(N.REGISTER_BROKER, dict(ext, bodyCrc32=0, compressed="true"), junk)
        assert r.code == RC.SYSTEM_ERROR and "compressed RegisterBrokerBody" in r.remark, r.remark
    assert c.call(N.GET_BROKER_CLUSTER_INFO).code == RC.SUCCESS  # still serving this connection


def test_random_bytes_close_one_connection_only(namesrv, connect):
    ns = namesrv()
    good = connect(ns.address)
    register(good, "broker-a", "10.0.0.1:10911", 0, TOPICS)
    host, port = ns.address.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as bad:
        bad.sendall(struct.pack(">i", 1 << 30) + os.urandom(64))
        assert bad.recv(100) == b""  # closed, as upstream's frame decoder does
    assert route(good, "T")[0].code == RC.SUCCESS


def _java_frame(body: bytes, opaque: int = 7) -> bytes:
    """A REGISTER_BROKER frame as a 5.x Java broker writes it: JSON header (fastjson, fields sorted,
    every extFields value a string), version V5_3_1 (ordinal 481... any >= V3_0_11), body, bodyCrc32."""
    ext = {"brokerAddr": "192.168.1.5:10911", "brokerId": "0", "brokerName": "java-a", "bodyCrc32":
           str(zlib.crc32(body) & 0x7FFFFFFF), "clusterName": "DefaultCluster", "compressed": "false",
           "enableActingMaster": "false", "haServerAddr": "192.168.1.5:10912"}
    header = json.dumps({"code": 103, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": opaque,
                         "serializeTypeCurrentRPC": "JSON", "version": 487}, separators=(",", ":"),
                        sort_keys=True).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def test_java_shaped_register_broker_frame_accepted(namesrv, connect):
    ns = namesrv()
    c = connect(ns.address)
    body = register_body([topic("TBW102", 8, 7), topic("JavaTopic", 8), topic("DefaultCluster", 16, 7)])
    c.send_raw(_java_frame(body))
    r = c.read()
    assert r.is_response and r.opaque == 7 and r.code == RC.SUCCESS
    _, doc = route(c, "JavaTopic")
    assert doc["brokerDatas"][0]["brokerAddrs"] == {"0": "192.168.1.5:10911"}
    assert doc["queueDatas"][0]["readQueueNums"] == 8
    bad = bytearray(_java_frame(body, opaque=8))
    bad[-3] ^= 0x20  # one body byte changed after the CRC was computed
    c.send_raw(bytes(bad))
    r = c.read()
    assert (r.opaque, r.code, r.remark) == (8, RC.SYSTEM_ERROR, "crc32 not match")
    # the same registration with the ROCKETMQ binary header (-Drocketmq.serialize.type=ROCKETMQ)
    body = register_body([topic("TBW102", 8, 7), topic("BinTopic", 2), topic("DefaultCluster", 16, 7)], counter=2)
    r = c.call(N.REGISTER_BROKER, {"brokerAddr": "192.168.1.6:10911", "brokerId": "0", "brokerName": "java-b",
                                   "bodyCrc32": str(body_crc32(body)), "clusterName": "DefaultCluster",
                                   "compressed": "false", "enableActingMaster": "false",
                                   "haServerAddr": "192.168.1.6:10912"}, body, serialize=R.ROCKETMQ)
    assert r.code == RC.SUCCESS and r.serialize == R.ROCKETMQ
    assert route(c, "BinTopic")[1]["brokerDatas"][0]["brokerName"] == "java-b"


def test_compressed_register_body(namesrv, connect):
    c = connect(namesrv().address)

    def chunk(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    topics = [topic("Z1"), topic("Z2"), topic("Z3")]
    raw = chunk(b'{"counter":3,"stateVersion":0,"timestamp":1}') + struct.pack(">i", len(topics))
    raw += b"".join(chunk(json.dumps(t).encode()) for t in topics) + chunk(b"[]") + struct.pack(">i", 0)
    body = zlib.compress(raw, 9)
    r = c.call(N.REGISTER_BROKER, {"brokerName": "z", "brokerAddr": "10.0.0.9:10911", "clusterName": "c1",
                                   "haServerAddr": "10.0.0.9:10912", "brokerId": 0, "compressed": "true",
                                   "bodyCrc32": body_crc32(body)}, body)
    assert r.code == RC.SUCCESS
    assert route(c, "Z2")[1]["queueDatas"][0]["brokerName"] == "z"


def test_topic_lists_delete_and_register_topic(namesrv, connect):
    c = connect(namesrv().address)
    register(c, "broker-a", "10.0.0.1:10911", 0, TOPICS)
    register(c, "broker-b", "10.0.0.3:10911", 0, [topic("T"), topic("U")], cluster="c2")
    assert json.loads(c.call(N.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body) == {
        "topicList": ["T", "U", "broker-x", "c1"]}
    assert json.loads(c.call(N.GET_TOPICS_BY_CLUSTER, {"cluster": "c2"}).body) == {"topicList": ["T", "U"]}
    sys_topics = json.loads(c.call(N.GET_SYSTEM_TOPIC_LIST_FROM_NS).body)
    assert sys_topics["topicList"] == ["c1", "broker-a", "c2", "broker-b"] and sys_topics["brokerAddr"]
    assert c.call(N.DELETE_TOPIC_IN_NAMESRV, {"topic": "T", "clusterName": "c2"}).code == RC.SUCCESS
    assert [q["brokerName"] for q in route(c, "T")[1]["queueDatas"]] == ["broker-a"]
    c.call(N.DELETE_TOPIC_IN_NAMESRV, {"topic": "T"})
    assert route(c, "T")[0].code == RC.TOPIC_NOT_EXIST
    qd = {"brokerName": "broker-b", "perm": 6, "readQueueNums": 2, "writeQueueNums": 2, "topicSysFlag": 0}
    assert c.call(N.REGISTER_TOPIC_IN_NAMESRV, {"topic": "V"}, json.dumps({"queueDatas": [qd]}).encode()).code == 0
    assert route(c, "V")[1]["queueDatas"] == [qd]
    r = c.call(N.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-b"})
    assert r.code == RC.SUCCESS and r.ext["wipeTopicCount"] == "2"
    assert route(c, "V")[1]["queueDatas"][0]["perm"] == 4
    assert c.call(N.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-b"}).ext["addTopicCount"] == "2"
    assert route(c, "V")[1]["queueDatas"][0]["perm"] == 6


def test_kv_config_and_data_version(namesrv, connect):
    c = connect(namesrv().address)
    assert c.call(N.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"}).code == 0
    r = c.call(N.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"})
    assert (r.code, r.ext["value"]) == (RC.SUCCESS, "broker-a:4")
    assert json.loads(c.call(N.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}).body) == {
        "table": {"T": "broker-a:4"}}
    r = register(c, "broker-a", "10.0.0.1:10911", 0, TOPICS)
    assert json.loads(r.body) == {"table": {"T": "broker-a:4"}}  # order topics sent back to the broker
    c.call(N.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"})
    assert c.call(N.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}).code == RC.QUERY_NOT_FOUND
    # upstream keeps a namespace whose last key went: an empty table, listed and sent to brokers
    r = c.call(N.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
    assert (r.code, r.body) == (RC.SUCCESS, b'{"table":{}}')
    assert register(c, "broker-a", "10.0.0.1:10911", 0, TOPICS).body == b'{"table":{}}'
    assert c.call(N.GET_KVLIST_BY_NAMESPACE, {"namespace": "never"}).code == RC.QUERY_NOT_FOUND
    assert c.call(N.PUT_KV_CONFIG, {"key": "x"}).code == RC.SYSTEM_ERROR
    same = b'{"counter":1,"stateVersion":0,"timestamp":1700000000000}'
    r = c.call(N.QUERY_DATA_VERSION, {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911",
                                      "clusterName": "c1", "brokerId": 0}, same)
    assert r.ext["changed"] == "false" and json.loads(r.body)["counter"] == 1
    r = c.call(N.QUERY_DATA_VERSION, {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911",
                                      "clusterName": "c1", "brokerId": 0}, same.replace(b":1,", b":2,"))
    assert r.ext["changed"] == "true"
    g = c.call(N.GET_BROKER_MEMBER_GROUP, {"clusterName": "c1", "brokerName": "broker-a"})
    assert parse_broker_json(g.body.decode())["brokerMemberGroup"]["brokerAddrs"] == {"0": "10.0.0.1:10911"}


def test_the_kv_config_is_kept_in_rocketmqs_kvconfig_json(namesrv, connect, tmp_path):
    path = tmp_path / "namesrv" / "kvConfig.json"
    ns = namesrv(kv_config_path=str(path))
    c = connect(ns.address)
    assert not path.exists()  # nothing written before a change
    c.call(N.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"})
    assert path.read_bytes() == b'{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"broker-a:4"}}}'
    c.call(N.PUT_KV_CONFIG, {"namespace": "ns2", "key": "k", "value": "v"})
    c.call(N.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"})
    assert json.loads(path.read_text()) == {"configTable": {"ORDER_TOPIC_CONFIG": {}, "ns2": {"k": "v"}}}
    assert json.loads((tmp_path / "namesrv" / "kvConfig.json.bak").read_text())["configTable"] == {
        "ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}, "ns2": {"k": "v"}}  # the file before the last change
    config = c.call(N.GET_NAMESRV_CONFIG, {}).body.decode()
    assert f"kvConfigPath={path}\n" in config
    c.close()
    ns.stop()
    again = connect(namesrv(kv_config_path=str(path)).address)  # a restart loads it
    assert again.call(N.GET_KV_CONFIG, {"namespace": "ns2", "key": "k"}).ext["value"] == "v"
    assert again.call(N.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}).body == b'{"table":{}}'


def test_a_kv_config_file_that_does_not_parse_is_refused_untouched(tmp_path):
    from rmqstore.broker.namesrv import NameServer
    from rmqstore.errors import CorruptRecordError

    path = tmp_path / "kvConfig.json"
    for text in ('{"configTable":{"ns":{"k":"v"}', '{"configTable":["x"]}', '[1]'):
        path.write_text(text)
        with pytest.raises(CorruptRecordError, match="kvConfig.json") as e:
            NameServer("127.0.0.1:0", kv_config_path=str(path))
        assert str(path) in str(e.value) and path.read_text() == text
    path.write_text('{"configTable":{"ns":{"k":"v",1:2}}}')  # fastjson's bare integer keys are read
    assert NameServer("127.0.0.1:0", kv_config_path=str(path)).kv.table == {"ns": {"k": "v", "1": "2"}}


def test_fastjson_encoding_rules():
    from rmqstore.broker.routes import encode_fastjson

    doc = {"z": 1, "a": {1: "x", 0: "y"}, "n": None, "s": {"b", "a"}, "t": "Ünï"}
    assert encode_fastjson(doc) == '{"a":{"0":"y","1":"x"},"s":["a","b"],"t":"Ünï","z":1}'.encode()
    assert encode_fastjson(doc, quote_int_keys=False) == '{"a":{0:"y",1:"x"},"s":["a","b"],"t":"Ünï","z":1}'.encode()
    assert encode_fastjson(doc, ascii_only=True).endswith(b'"t":"\\u00dcn\\u00ef","z":1}')
