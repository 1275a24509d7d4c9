"""The admin request codes ``mqadmin`` sends, framed as ``MQClientAPIImpl`` frames them, and the answers
checked against what RocketMQ's ``AdminBrokerProcessor`` and its fastjson bodies give
(``GroupList``, ``KVTable``, ``ProducerConnection``), including what ``mqadmin`` parses out of them."""
from __future__ import annotations

import json
import re
import time

import javaproperties

from rmqstore.broker import remoting as R
from rmqstore.broker.admin_ops import _runtime, human_bytes
from rmqstore.broker.namesrv import NameServer
from rmqstore.broker.stats_windows import StatsWindows

C, RC = R.RequestCode, R.ResponseCode
GET_BROKER_RUNTIME_INFO, GET_PRODUCER_CONNECTION_LIST = 28, 204
DELETE_SUBSCRIPTIONGROUP, DELETE_TOPIC_IN_BROKER, GET_BROKER_CONSUME_STATS = 207, 215, 317

#: what ``ClusterListSubCommand`` reads from GET_BROKER_RUNTIME_INFO (missing ones print as null or fail to parse)
CLUSTER_LIST_KEYS = {"msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning", "msgPutTotalTodayNow",
                     "msgGetTotalYesterdayMorning", "msgGetTotalTodayMorning", "msgGetTotalTodayNow", "brokerActive",
                     "putTps", "getTransferredTps", "sendThreadPoolQueueSize", "pullThreadPoolQueueSize",
                     "sendThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueHeadWaitTimeMills",
                     "pageCacheLockTimeMills", "earliestMessageTimeStamp", "commitLogDiskRatio", "timerReadBehind",
                     "timerOffsetBehind", "timerCongestNum", "timerEnqueueTps", "timerDequeueTps", "brokerVersionDesc"}


def _create_topic(c, topic: str, queues: int = 2):
    return c.call(C.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues,
                                              "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                              "order": "false"})


def test_consumed_by_answers_a_group_list(start_broker, connect, send_v2):
    """QUERY_TOPIC_CONSUME_BY_WHO: ``GroupList`` has one field, ``groupList`` (queryMsgById's
    "No Consumer" otherwise)."""
    b = start_broker()
    c = connect(b.address)
    assert _create_topic(c, "T").code == RC.SUCCESS
    for g in ("GB", "GA"):
        c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": g, "topic": "T", "queueId": 0, "commitOffset": 0})
    r = c.call(C.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "T"})
    assert r.code == RC.SUCCESS and r.body == b'{"groupList":["GA","GB"]}'
    assert c.call(C.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "Nobody"}).body == b'{"groupList":[]}'


def test_runtime_info_has_the_keys_mqadmin_parses(start_broker, connect, send_v2):
    b = start_broker()
    c = connect(b.address)
    for i in range(3):
        assert send_v2(c, "Orders", b"m%d" % i).code == RC.SUCCESS
    r = c.call(GET_BROKER_RUNTIME_INFO)
    assert r.code == RC.SUCCESS
    doc = json.loads(r.body)
    assert list(doc) == ["table"]
    table = doc["table"]
    assert CLUSTER_LIST_KEYS <= set(table), CLUSTER_LIST_KEYS - set(table)
    assert all(isinstance(v, str) for v in table.values())  # a HashMap<String, String>
    assert list(table) == sorted(table)  # fastjson writes map keys sorted
    assert table["msgPutTotalTodayNow"] == "3" and int(table["msgPutTotalTodayMorning"]) == 0
    assert int(table["msgGetTotalTodayNow"]) >= 0 and table["brokerActive"] == "true"
    # what ClusterListSubCommand does with them
    # rates over 10, 60, 600 s, "" until sampled that long (mqadmin skips a blank value); their
    # values after traffic: tests/broker/test_consume_metrics.py
    for key in ("putTps", "getTransferredTps", "getFoundTps", "getMissTps", "getTotalTps"):
        tps = table[key].split(" ")
        assert len(tps) == 3 and all(t == "" or float(t) >= 0 for t in tps), (key, table[key])
    assert 0.0 <= float(table["commitLogDiskRatio"]) <= 1.0
    assert int(table["earliestMessageTimeStamp"]) > 0
    assert int(table["commitLogMaxOffset"]) == b.store.max_phy_offset > 0
    assert table["commitLogDirCapacity"].startswith("Total : ") and "iB, Free : " in table["commitLogDirCapacity"]
    assert table["brokerVersionDesc"].startswith("V5_")
    assert table["runtime"].startswith("[ 0 days, 0 hours, ")


def test_producer_connection_list(start_broker, connect):
    b = start_broker()
    c = connect(b.address)
    hb = {"clientID": "127.0.0.1@p1", "producerDataSet": [{"groupName": "PG"}], "consumerDataSet": []}
    assert c.json_call(C.HEART_BEAT, None, hb)[0].code == RC.SUCCESS
    r = c.call(GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"})
    assert r.code == RC.SUCCESS
    (conn,) = json.loads(r.body)["connectionSet"]
    assert list(conn) == ["clientAddr", "clientId", "language", "version"]  # Connection's fields, sorted
    assert conn["clientId"] == "127.0.0.1@p1" and conn["language"] == "JAVA" and conn["clientAddr"].startswith("127.")
    r = c.call(GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "Other"})
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "the producer group[Other] not exist")


def test_delete_subscription_group_and_its_offsets(start_broker, connect):
    b = start_broker()
    c = connect(b.address)
    assert _create_topic(c, "T").code == RC.SUCCESS
    for g in ("Keep", "Drop"):
        assert c.json_call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, {"groupName": g})[0].code == RC.SUCCESS
        c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": g, "topic": "T", "queueId": 1, "commitOffset": 0})
    r = c.call(DELETE_SUBSCRIPTIONGROUP, {"groupName": "Drop", "cleanOffset": "false"})
    assert r.code == RC.SUCCESS
    groups = json.loads(c.call(C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)["subscriptionGroupTable"]
    assert "Keep" in groups and "Drop" not in groups
    assert b.store.consumer_offsets.groups_of_topic("T") == {"Keep", "Drop"}  # offsets kept without cleanOffset
    assert c.call(DELETE_SUBSCRIPTIONGROUP, {"groupName": "Drop", "cleanOffset": "true"}).code == RC.SUCCESS
    assert b.store.consumer_offsets.groups_of_topic("T") == {"Keep"}
    assert c.call(DELETE_SUBSCRIPTIONGROUP, {"cleanOffset": "true"}).code == RC.SYSTEM_ERROR  # groupName is @CFNotNull


def test_delete_topic_in_broker(start_broker, connect, send_v2):
    b = start_broker()
    c = connect(b.address)
    assert _create_topic(c, "Gone").code == RC.SUCCESS and _create_topic(c, "Stays").code == RC.SUCCESS
    assert send_v2(c, "Gone", b"x", queue_id=0).code == RC.SUCCESS
    assert c.call(DELETE_TOPIC_IN_BROKER, {"topic": "Gone"}).code == RC.SUCCESS
    topics = json.loads(c.call(C.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    assert "Gone" not in topics and "Stays" in topics
    assert c.call(C.GET_TOPIC_STATS_INFO, {"topic": "Gone"}).code == RC.TOPIC_NOT_EXIST
    r = c.call(DELETE_TOPIC_IN_BROKER, {"topic": " "})
    assert (r.code, r.remark) == (RC.INVALID_PARAMETER, "The specified topic is blank.")
    r = c.call(DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"})
    assert (r.code, r.remark) == (RC.INVALID_PARAMETER, "The topic[TBW102] is conflict with system topic.")
    assert "TBW102" in json.loads(c.call(C.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]


def test_delete_topic_as_mqadmin_does_on_the_one_process_broker(start_broker, connect):
    """``deleteTopic``: DELETE_TOPIC_IN_BROKER to the master, then DELETE_TOPIC_IN_NAMESRV (216) to the
    name server, which ``rmqstore serve`` embeds; the topic then leaves GET_ALL_TOPIC_LIST_FROM_NAMESERVER
    (206) and its route."""
    b = start_broker()
    c = connect(b.address)
    assert _create_topic(c, "Gone").code == RC.SUCCESS
    assert "Gone" in json.loads(c.call(206).body)["topicList"]
    assert c.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "Gone"}).code == RC.SUCCESS
    assert c.call(DELETE_TOPIC_IN_BROKER, {"topic": "Gone"}).code == RC.SUCCESS
    assert c.call(216, {"topic": "Gone", "clusterName": "DefaultCluster"}).code == RC.SUCCESS
    assert "Gone" not in json.loads(c.call(206).body)["topicList"]
    assert c.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "Gone"}).code == RC.TOPIC_NOT_EXIST


def _properties(text: str) -> dict[str, str]:
    """``MixAll.string2Properties``, as ``mqadmin getBrokerConfig`` reads the body."""
    return javaproperties.loads(text)


def test_get_and_update_broker_config(start_broker, connect):
    b = start_broker()
    c = connect(b.address)
    r = c.call(26)
    assert r.code == RC.SUCCESS
    text = r.body.decode()
    lines = text.splitlines()
    assert text.endswith("\n") and lines == sorted(lines) and all("=" in ln for ln in lines)  # sorted key=value lines
    props = _properties(text)
    assert props["brokerName"] == "broker-a" and props["longPollingEnable"] == "true"
    assert props["brokerIP1"] == "" and props["transactionTimeOut"] == "6000"
    assert int(props["mappedFileSizeCommitLog"]) == b.store.cfg.mapped_file_size_commit_log
    version = json.loads(r.ext["version"])
    assert list(version) == ["counter", "stateVersion", "timestamp"] and version["counter"] == 0
    # UPDATE_BROKER_CONFIG: mqadmin's body is properties2String of the one key=value
    r = c.call(25, None, b"longPollingEnable=false\nshortPollingTimeMills=200\nnoSuchKey=1\n")
    assert r.code == RC.SUCCESS, r.remark
    assert b.cfg.long_polling_enable is False and b.cfg.short_polling_time_mills == 200
    props = _properties(c.call(26).body.decode())
    assert props["longPollingEnable"] == "false" and "noSuchKey" not in props
    assert json.loads(c.call(26).ext["version"])["counter"] == 1
    r = c.call(25, None, b"rocketmqHome=/tmp\n")
    assert (r.code, r.remark) == (RC.NO_PERMISSION, "Can not update config in black list.")
    r = c.call(25, None, b"brokerName=other\n")  # read once at start: refused, not silently ignored
    assert r.code == RC.NO_PERMISSION and "brokerName" in r.remark and b.cfg.broker_name == "broker-a"
    r = c.call(25, None, b"transactionCheckMax=lots\n")
    assert r.code == RC.SYSTEM_ERROR and "transactionCheckMax" in r.remark and b.cfg.transaction_check_max == 15


def _consumer_heartbeat(client_id: str, group: str, topic: str) -> dict:
    return {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
                                 "classFilterMode": False, "expressionType": "TAG"}]}]}


def _next_request(c, code: int):
    for _ in range(20):  # a few stray frames at most (notices of member changes)
        cmd = c.read()
        if cmd.code == code:
            return cmd
    raise AssertionError(f"no request {code} from the broker")


def test_reset_offset_by_time_commits_and_tells_live_consumers(start_broker, connect, send_v2):
    """``mqadmin resetOffsetByTime``: INVOKE_BROKER_TO_RESET_OFFSET (222) with ResetOffsetRequestHeader."""
    b = start_broker()
    c, consumer = connect(b.address), connect(b.address)
    assert _create_topic(c, "T").code == RC.SUCCESS
    for i in range(4):
        assert send_v2(c, "T", b"m%d" % i, queue_id=i % 2).code == RC.SUCCESS
    b.store.wait_dispatched(10)
    assert consumer.json_call(C.HEART_BEAT, None, _consumer_heartbeat("c1@1", "G", "T"))[0].code == RC.SUCCESS
    for q in (0, 1):
        c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": q, "commitOffset": 2})
    r = c.call(222, {"topic": "T", "group": "G", "timestamp": 0, "isForce": "true", "queueId": -1})
    assert r.code == RC.SUCCESS, r.remark
    assert r.body == (b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:0,'
                      b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:0}}')
    assert b.store.consumer_offsets.query_offsets("G", "T") == {0: 0, 1: 0}
    told = _next_request(consumer, 220)  # RESET_CONSUMER_CLIENT_OFFSET, one way
    assert told.ext == {"topic": "T", "group": "G", "timestamp": "0", "isForce": "true"} and told.body == r.body
    # one queue to an explicit offset, range-checked as upstream
    r = c.call(222, {"topic": "T", "group": "G", "timestamp": 0, "isForce": "true", "queueId": 1, "offset": 1})
    assert r.code == RC.SUCCESS and b.store.consumer_offsets.query_offsets("G", "T") == {0: 0, 1: 1}
    r = c.call(222, {"topic": "T", "group": "G", "timestamp": 0, "isForce": "true", "queueId": 1, "offset": 9})
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "Target offset 9 not in consume queue range [0-2]")
    # to the end (timestamp -1)
    assert c.call(222, {"topic": "T", "group": "G", "timestamp": -1, "isForce": "true"}).code == RC.SUCCESS
    assert b.store.consumer_offsets.query_offsets("G", "T") == {0: 2, 1: 2}
    r = c.call(222, {"topic": "Nope", "group": "G", "timestamp": 0, "isForce": "true"})
    assert (r.code, r.remark) == (RC.TOPIC_NOT_EXIST, "Topic Nope does not exist")
    r = c.call(222, {"topic": "T", "group": "NoGroup", "timestamp": 0, "isForce": "true"})
    assert (r.code, r.remark) == (RC.SUBSCRIPTION_GROUP_NOT_EXIST, "Group NoGroup does not exist")


def test_broker_consume_stats(start_broker, connect, send_v2):
    """GET_BROKER_CONSUME_STATS (317): ``ConsumeStatsList`` with fastjson's sorted fields and
    ``MessageQueue`` keys; a group's lag per queue and the broker's totals."""
    b = start_broker()
    c = connect(b.address)
    assert _create_topic(c, "T").code == RC.SUCCESS
    for i in range(3):
        assert send_v2(c, "T", b"m%d" % i, queue_id=0).code == RC.SUCCESS
    b.store.wait_dispatched(10)
    assert c.json_call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, {"groupName": "G"})[0].code == RC.SUCCESS
    c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": 0, "commitOffset": 1})
    last = b.store.get_message_store_timestamp("T", 0, 0)
    r = c.call(GET_BROKER_CONSUME_STATS, {"isOrder": "false"})
    assert r.code == RC.SUCCESS
    body = r.body.decode()
    g = ('{"G":[{"consumeTps":0.0,"offsetTable":{'
         '{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"brokerOffset":3,"consumerOffset":1,'
         f'"lastTimestamp":{last},"pullOffset":0}},'
         '{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"brokerOffset":0,"consumerOffset":0,'
         '"lastTimestamp":0,"pullOffset":0}}}]}')
    assert body.startswith('{"brokerAddr":"%s","consumeStatsList":[' % b.address)
    assert g in body and body.endswith('],"totalDiff":2,"totalInflightDiff":-1}')
    # only ordered topics: T is not one, so G's list is empty
    assert '{"G":[]}' in c.call(GET_BROKER_CONSUME_STATS, {"isOrder": "true"}).body.decode()


def test_get_topic_config(start_broker, connect):
    """GET_TOPIC_CONFIG (351): the ``TopicConfig`` as fastjson writes it (properties sorted)."""
    b = start_broker()
    c = connect(b.address)
    assert _create_topic(c, "T", queues=3).code == RC.SUCCESS
    r = c.call(351, {"topic": "T", "lo": "true"})
    assert r.code == RC.SUCCESS
    assert r.body == (b'{"attributes":{},"order":false,"perm":6,"readQueueNums":3,"topicFilterType":"SINGLE_TAG",'
                      b'"topicName":"T","topicSysFlag":0,"writeQueueNums":3}')
    r = c.call(351, {"topic": "Nope"})
    assert (r.code, r.remark) == (RC.TOPIC_NOT_EXIST, "No topic in this broker. topic: Nope")


def test_namesrv_config_standalone_and_embedded(start_broker, connect):
    """GET_NAMESRV_CONFIG (319) / UPDATE_NAMESRV_CONFIG (318), as ``mqadmin getNamesrvConfig`` and
    ``updateNamesrvConfig`` send them, to ``rmqstore namesrv`` and to ``rmqstore serve``'s own name server."""
    with NameServer("127.0.0.1:0", scan_interval_s=5.0) as ns:
        c = connect(ns.address)
        r = c.call(319)
        assert r.code == RC.SUCCESS
        assert r.body.decode() == ("bindAddress=127.0.0.1\nlistenPort=%s\nscanNotActiveBrokerInterval=5000\n"
                                   % ns.address.rsplit(":", 1)[1])
        r = c.call(318, None, b"kvConfigPath=/tmp/kv.json\n")
        assert (r.code, r.remark) == (RC.NO_PERMISSION, "Can not update config in black list.")
        r = c.call(318, None, b"listenPort=1\n")
        assert r.code == RC.NO_PERMISSION and "listenPort" in r.remark
        assert c.call(318, None, b"orderMessageEnable=true\n").code == RC.SUCCESS  # not ours: ignored
    b = start_broker()
    props = _properties(connect(b.address).call(319).body.decode())
    assert props == {"bindAddress": "127.0.0.1", "listenPort": b.address.rsplit(":", 1)[1]}


def test_human_bytes_and_runtime_as_upstream_formats_them():
    """``MixAll.humanReadableByteCount(n, false)`` and ``StoreStatsService.getFormatRuntime``."""
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 10**9, 5 * 2**40)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "953.7 MiB", "5.0 TiB"]
    assert _runtime(90061.5) == "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"


def test_consume_stats_as_upstream_collects_them(start_broker, connect, send_v2):
    """GET_CONSUME_STATS (208): the group's topics, ``topic``, or ``topicList``; topics the group's
    live consumers do not subscribe to left out; SUCCESS with an empty table for an unknown group."""
    b = start_broker()
    c, consumer = connect(b.address), connect(b.address)
    for t in ("A", "B"):
        assert _create_topic(c, t, queues=1).code == RC.SUCCESS
        assert send_v2(c, t, b"x", queue_id=0).code == RC.SUCCESS
    b.store.wait_dispatched(10)
    for t in ("A", "B"):
        c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": t, "queueId": 0, "commitOffset": 1})

    def table(ext):
        r = c.call(C.GET_CONSUME_STATS, ext)
        assert r.code == RC.SUCCESS, r.remark
        return r.body.decode()

    both = table({"consumerGroup": "G"})
    assert both.startswith('{"consumeTps":0.0,"offsetTable":{')
    assert '"topic":"A"}:{"brokerOffset":1,"consumerOffset":1,"lastTimestamp":' in both and '"topic":"B"}' in both
    assert '"pullOffset":1}' in both
    assert '"topic":"B"}' not in table({"consumerGroup": "G", "topic": "A"})
    assert table({"consumerGroup": "Nobody"}) == '{"consumeTps":0.0,"offsetTable":{}}'
    # a live consumer of A only: B is left out, unless named in topicList
    assert consumer.json_call(C.HEART_BEAT, None, _consumer_heartbeat("c1@1", "G", "A"))[0].code == RC.SUCCESS
    only_a = table({"consumerGroup": "G"})
    assert '"topic":"A"}' in only_a and '"topic":"B"}' not in only_a
    assert '"topic":"B"}' in table({"consumerGroup": "G", "topicList": "A;B"})


def test_read_only_broker_refuses_admin_writes(start_broker, connect, send_v2, stop_broker, vectors):
    w = start_broker()
    c = connect(w.address)
    assert _create_topic(c, "T").code == RC.SUCCESS
    assert c.json_call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, {"groupName": "G"})[0].code == RC.SUCCESS
    path = w.store.path
    stop_broker(w)
    before = vectors.tree_hashes(path)
    b = start_broker(path=path, read_only=True)
    r = connect(b.address)
    for code, ext in ((DELETE_TOPIC_IN_BROKER, {"topic": "T"}), (DELETE_SUBSCRIPTIONGROUP, {"groupName": "G"}),
                      (222, {"topic": "T", "group": "G", "timestamp": 0, "isForce": "true"})):
        resp = r.call(code, ext)
        assert resp.code == RC.NO_PERMISSION and "read-only" in resp.remark, (code, resp.remark)
    assert "T" in b.topics.table and "G" in b.groups.table
    assert r.call(GET_BROKER_RUNTIME_INFO).code == RC.SUCCESS  # reads still answered
    stop_broker(b)
    assert vectors.tree_hashes(path) == before


class _Traffic:
    def __init__(self):
        self.inbound, self.outbound = {}, {}


def test_stats_windows_sample_as_stats_item():
    """Minute samples every 10 s (7 kept), hour every 600 s, day every 3600 s; sum = last - first."""
    t = _Traffic()
    w = StatsWindows(t)
    t.inbound[("T", "normal")] = [5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]  # 5 messages in 2 puts
    t.inbound[("T", "delay")] = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    w.sample(1000.0)
    assert w.broker_stats_data("TOPIC_PUT_NUMS", "T")["statsMinute"] == {"avgpt": 0.0, "sum": 0, "tps": 0.0}
    assert w.broker_stats_data("TOPIC_PUT_NUMS", "Other") is None
    t.inbound[("T", "normal")][0] += 20
    t.inbound[("T", "normal")][-1] += 4
    t.outbound[("T", "G")] = [7, 70]
    w.sample(1005.0)  # not due: nothing sampled
    w.sample(1010.0)
    data = w.broker_stats_data("TOPIC_PUT_NUMS", "T")
    assert data["statsMinute"] == {"avgpt": 5.0, "sum": 20, "tps": 2.0}
    assert data["statsHour"]["sum"] == 0 and data["statsDay"]["sum"] == 0  # one sample each so far
    assert w.broker_stats_data("GROUP_GET_NUMS", "T@G")["statsMinute"]["sum"] == 0  # first seen at 1010
    for i in range(2, 12):
        t.inbound[("T", "normal")][0] += 1
        w.sample(1000.0 + 10 * i)
    minute = w.broker_stats_data("TOPIC_PUT_NUMS", "T")["statsMinute"]
    assert minute["sum"] == 6 and minute["tps"] == 0.1  # the last 7 samples: 60 s, 6 messages
    w.sample(1600.0)
    assert w.broker_stats_data("TOPIC_PUT_NUMS", "T")["statsHour"]["sum"] == 30


def test_view_broker_stats_data(start_broker, connect, send_v2, pull):
    """VIEW_BROKER_STATS_DATA (315) as ``statsAll`` sends it: ``BrokerStatsData``, fields sorted."""
    b = start_broker()
    c = connect(b.address)
    assert _create_topic(c, "T", queues=1).code == RC.SUCCESS
    r = c.call(315, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "T"})
    assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "The stats <TOPIC_PUT_NUMS> <T> not exist")
    now = time.time() + 100  # ahead of the broker's own sampling
    b.admin_ops.windows.sample(now)
    for i in range(4):
        assert send_v2(c, "T", b"m%d" % i, queue_id=0).code == RC.SUCCESS
    b.store.wait_dispatched(10)
    assert pull(c, "G", "T", 0, 0).code == RC.SUCCESS
    b.admin_ops.windows.sample(now + 10)  # T first seen here
    b.admin_ops.windows.sample(now + 20)
    assert send_v2(c, "T", b"late", queue_id=0).code == RC.SUCCESS
    b.admin_ops.windows.sample(now + 30)
    r = c.call(315, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "T"})
    assert r.code == RC.SUCCESS
    assert r.body.startswith(b'{"statsDay":{"avgpt":0.0,"sum":0,"tps":0.0},"statsHour":')
    assert json.loads(r.body)["statsMinute"] == {"avgpt": 1.0, "sum": 1, "tps": 0.05}
    got = json.loads(c.call(315, {"statsName": "GROUP_GET_NUMS", "statsKey": "T@G"}).body)
    assert got["statsMinute"]["sum"] == 0 and set(got) == {"statsDay", "statsHour", "statsMinute"}


def test_offline_reset_offset_answers_what_the_broker_answers(tmp_path, start_broker, connect):
    """`rmqstore reset-offset` on a stopped store moves a group where INVOKE_BROKER_TO_RESET_OFFSET
    moves it on the same store served by a broker (the queues the broker gives an adopted topic, the
    store-time search), for several times; the broker then serves the offsets the command wrote."""
    from click.testing import CliRunner

    from rmqstore import Message, MessageStore
    from rmqstore.cli.main import cli

    from .conftest import broker_store_config

    path, t0 = tmp_path / "store", 1_700_000_000_000
    with MessageStore.open(path, broker_store_config()) as st:
        for i in range(9):  # three queues; store times t0, t0 + 1 s, ...
            m = Message.create("Orders", b"m%d" % i, queue_id=i % 3)
            m.store_timestamp = t0 + 1000 * i
            assert st.put_message(m).ok
        st.wait_dispatched()
        for q in range(3):
            st.consumer_offsets.commit_offset("G", "Orders", q, 3)
    times = [t0 - 5, t0 + 2500, t0 + 4000, t0 + 7999, t0 + 60_000]
    offline = {}
    for ts in times:
        r = CliRunner().invoke(cli, ["reset-offset", "G", "Orders", "-s", str(ts), "--dry-run", "--json",
                                     "--store", str(path)])
        assert r.exit_code == 0, r.output
        offline[ts] = {row["queue_id"]: row["new_offset"] for row in json.loads(r.stdout)["queues"]}
    assert offline[t0 + 2500] == {0: 1, 1: 1, 2: 1} and offline[t0 + 4000] == {0: 2, 1: 1, 2: 1}
    b = start_broker(path=path)
    c = connect(b.address)
    r = c.call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, json.dumps({"groupName": "G"}).encode())
    assert r.code == RC.SUCCESS, r.remark
    for ts in times:
        r = c.call(222, {"topic": "Orders", "group": "G", "timestamp": ts, "isForce": "true"})
        assert r.code == RC.SUCCESS, r.remark
        online = {int(q): int(o) for q, o in re.findall(rb'"queueId":(\d+),"topic":"Orders"\}:(\d+)', r.body)}
        assert online == offline[ts], ts
