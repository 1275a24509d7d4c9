"""The broker in a cluster: registering with several name servers and unregistering at shutdown,
the embedded name server taking other brokers' registrations, the master answering a slave's
SlaveSynchronize requests, suggestWhichBrokerId."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import zlib

import pytest

from rmqstore import MessageStore, MessageStoreConfig
from rmqstore.broker import Broker, BrokerConfig
from rmqstore.broker import remoting as R
from rmqstore.broker.namesrv import NamesrvCode as N
from rmqstore.engine.consumer_offsets import parse_broker_json

from tests.kit import free_port
from tests import kit

RC = R.ResponseCode
C = R.RequestCode
RMQSTORE = [sys.executable, "-m", "rmqstore.cli.main"]




def route(c, topic: str):
    r = c.call(N.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return json.loads(r.body) if r.code == RC.SUCCESS else None


def test_registers_with_two_name_servers_and_unregisters_at_shutdown(namesrv, start_broker, connect, tmp_path):
    a, b = namesrv(), namesrv()
    br = start_broker(broker={"brokerClusterName": "c1", "namesrvAddr": f"{a.address};{b.address}"})
    assert not br.cluster.embedded and br.cluster.registrations == 1
    ca, cb = connect(a.address), connect(b.address)
    for c in (ca, cb):
        doc = route(c, "TBW102")
        assert doc["brokerDatas"][0]["brokerAddrs"] == {"0": br.address}
        assert doc["brokerDatas"][0]["cluster"] == "c1" and doc["queueDatas"][0]["perm"] == 7
        info = parse_broker_json(c.call(N.GET_BROKER_CLUSTER_INFO).body.decode())
        assert info["clusterAddrTable"] == {"c1": ["broker-a"]}
    # the broker is no name server now: clients must ask the name servers
    assert connect(br.address).call(N.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).code == \
        RC.REQUEST_CODE_NOT_SUPPORTED
    br.stop()
    for c in (ca, cb):
        assert route(c, "TBW102") is None
        assert parse_broker_json(c.call(N.GET_BROKER_CLUSTER_INFO).body.decode())["clusterAddrTable"] == {}


def test_a_new_topic_reaches_the_name_servers_at_the_next_registration(namesrv, start_broker, connect, send_v2):
    ns = namesrv()
    br = start_broker(broker={"namesrvAddr": ns.address})
    c = connect(ns.address)
    assert route(c, "Fresh") is None
    assert send_v2(connect(br.address), "Fresh", b"x").code == RC.SUCCESS  # auto-created from TBW102
    br.loop.call_soon_threadsafe(lambda: __import__("asyncio").ensure_future(br.cluster.register_all()))
    assert kit.wait_for(lambda: route(c, "Fresh"))["queueDatas"][0]["brokerName"] == "broker-a"


def test_embedded_name_server_takes_other_brokers(start_broker, connect, tmp_path):
    first = start_broker(broker={"brokerName": "broker-a"})
    second = start_broker(broker={"brokerName": "broker-b", "namesrvAddr": first.address}, path=tmp_path / "b")
    c = connect(first.address)
    doc = route(c, "TBW102")
    assert sorted((d["brokerName"], d["brokerAddrs"]["0"]) for d in doc["brokerDatas"]) == [
        ("broker-a", first.address), ("broker-b", second.address)]
    second.stop()
    assert kit.wait_for(lambda: len(route(c, "TBW102")["brokerDatas"]) == 1)


def test_bad_namesrv_addr(tmp_path):
    st = MessageStore.open(tmp_path / "s", MessageStoreConfig.embedded())
    try:
        with pytest.raises(ValueError, match="HOST:PORT"):
            Broker(st, BrokerConfig.from_properties({"namesrvAddr": "nohost"}), listen="127.0.0.1:0")
    finally:
        st.close()


def test_master_answers_slave_sync_requests(start_broker, connect, send_v2):
    br = start_broker(broker={"brokerName": "broker-a"})
    c = connect(br.address)
    assert send_v2(c, "Sync", b"x").code == RC.SUCCESS
    assert c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Sync", "queueId": 1,
                                             "commitOffset": 5}).code == RC.SUCCESS
    r = c.call(43)  # GET_ALL_CONSUMER_OFFSET: ConsumerOffsetSerializeWrapper, fastjson's bare queue ids
    assert r.code == RC.SUCCESS and b'"Sync@g":{1:5}' in r.body
    assert parse_broker_json(r.body.decode())["offsetTable"] == {"Sync@g": {"1": 5}}
    r = c.call(45)  # GET_ALL_DELAY_OFFSET
    assert r.code == RC.SUCCESS and "offsetTable" in parse_broker_json(r.body.decode())
    topics = json.loads(c.call(C.GET_ALL_TOPIC_CONFIG).body)
    assert "Sync" in topics["topicConfigTable"] and set(topics["dataVersion"]) == {"counter", "stateVersion",
                                                                                  "timestamp"}
    again = json.loads(c.call(C.GET_ALL_TOPIC_CONFIG).body)
    assert again["dataVersion"] == topics["dataVersion"]  # stable while nothing changes
    groups = json.loads(c.call(201).body)
    assert "subscriptionGroupTable" in groups


def test_suggest_which_broker_id(start_broker, connect, send_v2):
    br = start_broker(broker={"slaveReadEnable": "true"})
    c = connect(br.address)
    assert send_v2(c, "Lag", b"x" * 100, queue_id=0).code == RC.SUCCESS
    pull = {"consumerGroup": "g", "topic": "Lag", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 4,
            "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}
    r = c.call(C.PULL_MESSAGE, pull)
    assert r.code == RC.SUCCESS and r.ext["suggestWhichBrokerId"] == "0"  # in memory: stay on the master
    br.store.memory_limit_bytes = lambda: 0  # every byte behind the end now counts as "not in memory"
    assert send_v2(c, "Lag", b"y" * 100, queue_id=0).code == RC.SUCCESS
    r = c.call(C.PULL_MESSAGE, dict(pull, maxMsgNums=1))
    assert r.code == RC.SUCCESS and r.ext["suggestWhichBrokerId"] == "1"  # whichBrokerWhenConsumeSlowly


def _proc_line(argv: list[str], prefix: str) -> subprocess.Popen:
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith(prefix):
        p.kill()
        raise AssertionError(f"{argv[3]}: {line!r} {p.communicate(timeout=10)[1][-2000:]}")
    return p



def test_cpp_producer_through_rmqstore_namesrv_spreads_over_two_groups(tmp_path, cpp_client, connect):
    ns_addr = f"127.0.0.1:{free_port()}"
    procs = [_proc_line([*RMQSTORE, "namesrv", "--listen", ns_addr], f"name server listening on {ns_addr}")]
    try:
        ports = []
        for name in ("broker-a", "broker-b"):
            conf = tmp_path / f"{name}.conf"
            # the HA port named, not listen + 1: a free listen port's neighbour may be a client's port
            conf.write_text(f"brokerName={name}\nbrokerClusterName=c1\nhaListenPort={free_port()}\n")
            ports.append(free_port())
            procs.append(_proc_line([*RMQSTORE, "serve", "--store", str(tmp_path / name), "--config", str(conf),
                                     "--listen", f"127.0.0.1:{ports[-1]}", "--namesrv-addr", ns_addr],
                                    "listening on"))
        vip = connect(f"127.0.0.1:{ports[0] - 2}")  # the VIP channel a Java slave asks for topics
        assert "TBW102" in json.loads(vip.call(C.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
        info = parse_broker_json(connect(ns_addr).call(N.GET_BROKER_CLUSTER_INFO).body.decode())
        assert info["clusterAddrTable"] == {"c1": ["broker-a", "broker-b"]}
        sent = cpp_client("produce", "--namesrv", ns_addr, "--group", "PG", "--topic", "Spread", "--count", 200,
                          "--quiet")
        assert sent[-1]["ok"] == 200
    finally:
        errs = [kit.sigterm_and_wait(p) for p in reversed(procs)]
    assert "unregistered from the name server" in errs[0] and "unregistered from the name server" in errs[1]
    counts = []
    for name in ("broker-a", "broker-b"):
        with MessageStore.open(tmp_path / name, read_only=True) as st:
            counts.append(sum(st.get_max_offset_in_queue("Spread", q) for q in range(16)))
    assert sum(counts) == 200 and min(counts) > 0, counts  # both groups took sends


def test_namesrv_command_json_line_sigterm_and_port_in_use(tmp_path):
    addr = f"127.0.0.1:{free_port()}"
    p = _proc_line([*RMQSTORE, "namesrv", "--listen", addr, "--json"], "{")
    try:
        busy = subprocess.run([*RMQSTORE, "namesrv", "--listen", addr], capture_output=True, text=True, timeout=60)
        assert busy.returncode != 0 and f"cannot listen on {addr}" in busy.stderr
    finally:
        err = kit.sigterm_and_wait(p)
    assert "stopped" in err
    bad = subprocess.run([*RMQSTORE, "namesrv", "--listen", "nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "HOST:PORT" in bad.stderr


def test_embedded_name_server_expires_registrations(start_broker, connect):
    first = start_broker(broker={"brokerName": "broker-a"})
    c = connect(first.address)
    body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 1},
        "topicConfigTable": {t: {"topicName": t, "perm": 6, "readQueueNums": 2, "writeQueueNums": 2}
                             for t in ("TBW102", "Other")}}}).encode()
    r = c.call(N.REGISTER_BROKER, {"brokerName": "java-b", "brokerAddr": "10.9.9.9:10911", "clusterName": "c1",
                                   "haServerAddr": "10.9.9.9:10912", "brokerId": 0,
                                   "heartbeatTimeoutMillis": 300}, body)
    assert r.code == RC.SUCCESS and len(route(c, "TBW102")["brokerDatas"]) == 2
    assert route(c, "Other")["brokerDatas"][0]["brokerName"] == "java-b"
    time.sleep(0.4)  # past the registration's 300 ms; the scan runs every 5 s: run one now
    first.loop.call_soon_threadsafe(first.cluster.routes.expire)
    assert kit.wait_for(lambda: route(connect(first.address), "Other") is None)
    assert [d["brokerName"] for d in route(connect(first.address), "TBW102")["brokerDatas"]] == ["broker-a"]


def test_serve_refuses_a_bad_namesrv_addr_and_a_slave_with_id_0(tmp_path):
    r = subprocess.run([*RMQSTORE, "serve", "--store", str(tmp_path / "s"), "--listen", "127.0.0.1:0",
                        "--namesrv-addr", "a:1;nohost"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--namesrv-addr" in r.stderr and "HOST:PORT" in r.stderr
    conf = tmp_path / "slave.conf"
    conf.write_text("brokerName=b\nbrokerRole=SLAVE\n")
    r = subprocess.run([*RMQSTORE, "serve", "--store", str(tmp_path / "s"), "--listen", "127.0.0.1:0", "--config",
                        str(conf)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "brokerId must be > 0" in r.stderr


def test_register_broker_frame_is_built_as_broker_outer_api_builds_it(namesrv, start_broker):
    ns = namesrv()
    seen = []
    register = ns.server.handlers[N.REGISTER_BROKER]

    def capture(conn, cmd):
        seen.append(cmd)
        return register(conn, cmd)

    ns.server.handlers[N.REGISTER_BROKER] = capture
    br = start_broker(broker={"namesrvAddr": ns.address, "brokerClusterName": "c9"})
    cmd = seen[0]
    assert set(cmd.ext) == {"brokerAddr", "brokerId", "brokerName", "clusterName", "haServerAddr",
                            "enableActingMaster", "compressed", "bodyCrc32"}
    assert (cmd.ext["brokerAddr"], cmd.ext["brokerId"], cmd.ext["clusterName"]) == (br.address, "0", "c9")
    assert (cmd.ext["enableActingMaster"], cmd.ext["compressed"]) == ("false", "false")
    assert cmd.ext["haServerAddr"] == br.cluster.ha_addr and cmd.ext["haServerAddr"].endswith(
        str(br.store.ha.address[1]))
    assert int(cmd.ext["bodyCrc32"]) == zlib.crc32(cmd.body) & 0x7FFFFFFF  # UtilAll.crc32
    body = json.loads(cmd.body)
    assert list(body) == ["filterServerList", "topicConfigSerializeWrapper"]  # fastjson's sorted fields
    wrapper = body["topicConfigSerializeWrapper"]
    assert set(wrapper) == {"dataVersion", "mappingDataVersion", "topicConfigTable", "topicQueueMappingDetailMap",
                            "topicQueueMappingInfoMap"}
    assert wrapper["topicConfigTable"]["TBW102"]["perm"] == 7 and cmd.version >= 121  # >= V3_0_11: this body
