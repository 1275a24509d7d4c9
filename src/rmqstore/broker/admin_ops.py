"""Operator requests ``mqadmin`` sends beyond the client protocol: the broker's runtime info (28,
``brokerStatus`` / ``clusterList``), a producer group's connections (204), deleting a subscription
group (207) or a topic (215), and reading (26) or changing (25) the broker's configuration. Bodies
are fastjson as ``AdminBrokerProcessor`` writes them (``KVTable``, ``ProducerConnection``), or
properties text for the configuration."""
from __future__ import annotations

import dataclasses
import json
import shutil
import time

from ..config import camel_name, coerce_value
from ..errors import OffsetError, RmqStoreError
from .config import java_key
from .remoting import Header, RemotingCommand, ResponseCode, config_text, config_update
from .routes import encode_fastjson
from .stats_windows import GROUP_GET_NUMS, StatsWindows
from .traffic import is_system_topic

GET_BROKER_RUNTIME_INFO = 28
GET_PRODUCER_CONNECTION_LIST = 204
DELETE_SUBSCRIPTIONGROUP = 207
DELETE_TOPIC_IN_BROKER = 215
UPDATE_BROKER_CONFIG = 25
GET_BROKER_CONFIG = 26
INVOKE_BROKER_TO_RESET_OFFSET = 222
GET_BROKER_CONSUME_STATS = 317
GET_CONSUME_STATS = 208
VIEW_BROKER_STATS_DATA = 315
GET_TOPIC_CONFIG = 351
#: ``TopicConfig``'s serialized properties (what GET_TOPIC_CONFIG writes)
TOPIC_CONFIG_FIELDS = ("attributes", "order", "perm", "readQueueNums", "topicFilterType", "topicName", "topicSysFlag",
                       "writeQueueNums")
#: ``RequestCode.RESET_CONSUMER_CLIENT_OFFSET``: the broker tells a consumer its new offsets
RESET_CONSUMER_CLIENT_OFFSET = 220

#: ``BrokerConfig`` keys an UPDATE_BROKER_CONFIG takes effect with at once (the broker reads them at
#: each use); others are refused, naming the key, instead of being accepted without effect
RUNTIME_KEYS = frozenset({"longPollingEnable", "shortPollingTimeMills", "rejectTransactionMessage",
                          "transactionTimeOut", "transactionCheckMax", "transactionCheckInterval",
                          "channelExpiredTimeout", "traceOn", "autoCreateSubscriptionGroup",
                          "enableMixedMessageType", "enableTopicMessageTypeCheck"})
#: ``validateBlackListConfigExist``'s default ``configBlackList`` and the keys always in it
BLACK_LIST = frozenset({"brokerConfigPath", "rocketmqHome", "configBlackList"})

#: ``MQVersion.getVersionDesc(CURRENT_VERSION)`` of the RocketMQ release whose protocol we speak
BROKER_VERSION_DESC = "V5_3_0"


def human_bytes(n: int) -> str:
    """``MixAll.humanReadableByteCount(bytes, false)``: binary units, one decimal (``1.5 GiB``)."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    v = float(n)
    while v >= 1024 and exp < 6:
        v /= 1024
        exp += 1
    return f"{v:.1f} {'KMGTPE'[exp - 1]}iB"


class AdminOps:
    def __init__(self, broker):
        self.broker = broker
        self.boot_ms = int(time.time() * 1000)
        self.config_version = 0
        self.windows = StatsWindows(broker.traffic, self._totals)

    def _totals(self) -> tuple[int, int, int, int]:
        """Messages put, messages pulled, pulls answered with messages, without (sampled each second)."""
        b = self.broker
        return b.stats.puts, b.stats.gets, b.pulls.calls[0], b.pulls.calls[1]

    def handlers(self) -> dict:
        return {GET_BROKER_RUNTIME_INFO: self.runtime_info, GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
                DELETE_SUBSCRIPTIONGROUP: self.delete_group, DELETE_TOPIC_IN_BROKER: self.delete_topic,
                GET_BROKER_CONFIG: self.get_config, UPDATE_BROKER_CONFIG: self.update_config,
                INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset, GET_BROKER_CONSUME_STATS: self.broker_consume_stats,
                GET_TOPIC_CONFIG: self.topic_config, GET_CONSUME_STATS: self.consume_stats,
                VIEW_BROKER_STATS_DATA: self.broker_stats_data}

    def runtime_table(self) -> dict[str, str]:
        """The keys ``mqadmin brokerStatus`` prints and ``clusterList`` parses, under RocketMQ's names.
        Message totals count from the broker's start (``...YesterdayMorning`` / ``...TodayMorning``
        stay 0, as upstream's before its first midnight roll); rates are ``StoreStatsService``'s, over
        the last 10, 60 and 600 s of per-second samples of the broker's counters."""
        b = self.broker
        store, cl = b.store, b.store.commit_log
        now_ms = int(time.time() * 1000)
        up_s = (now_ms - self.boot_ms) / 1000
        usage = shutil.disk_usage(store.path)
        puts, gets = b.stats.puts, b.stats.gets
        w = self.windows
        reput = getattr(store, "reput", None)
        t = {"brokerActive": "true", "brokerVersionDesc": BROKER_VERSION_DESC, "bootTimestamp": str(self.boot_ms),
             "runtime": _runtime(up_s),
             "msgPutTotalYesterdayMorning": "0", "msgPutTotalTodayMorning": "0", "msgPutTotalTodayNow": str(puts),
             "msgGetTotalYesterdayMorning": "0", "msgGetTotalTodayMorning": "0", "msgGetTotalTodayNow": str(gets),
             "putMessageTimesTotal": str(puts), "putTps": w.rates("puts"), "getTransferredTps": w.rates("gets"),
             "getFoundTps": w.rates("found"), "getMissTps": w.rates("miss"), "getTotalTps": w.rates("found+miss"),
             "dispatchBehindBytes": str(reput.behind_bytes() if reput is not None else 0),
             "pageCacheLockTimeMills": "0",
             "earliestMessageTimeStamp": str(store.get_earliest_message_time()),
             "startAcceptSendRequestTimeStamp": "0",
             "commitLogMinOffset": str(store.min_phy_offset), "commitLogMaxOffset": str(store.max_phy_offset),
             "commitLogDiskRatio": str((usage.total - usage.free) / usage.total if usage.total else 0.0),
             "commitLogDirCapacity": f"Total : {human_bytes(usage.total)}, Free : {human_bytes(usage.free)}.",
             "remainTransientStoreBufferNumbs": "2147483647",
             "remainHowManyDataToFlush": human_bytes(max(0, cl.confirm_offset - cl.flushed_offset)),
             "timerReadBehind": "0", "timerOffsetBehind": "0", "timerCongestNum": "0",
             "timerEnqueueTps": "0.0", "timerDequeueTps": "0.0"}
        for pool in ("send", "pull", "litePull", "query", "ack"):
            t[f"{pool}ThreadPoolQueueSize"] = "0"
            t[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = "0"
        return t

    def broker_stats_data(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA (``statsAll``): ``BrokerStatsData`` of ``TOPIC_PUT_NUMS`` (a topic) or
        ``GROUP_GET_NUMS`` (``topic@group``)."""
        h = Header(cmd)
        name, key = h.str("statsName"), h.str("statsKey")
        data = self.windows.broker_stats_data(name, key)
        if data is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        return cmd.response(ResponseCode.SUCCESS, None, None, encode_fastjson(data))

    def runtime_info(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, encode_fastjson({"table": self.runtime_table()}))

    def producer_connections(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        group = Header(cmd).str("producerGroup")
        chans = self.broker.clients.producers.get(group)
        if chans is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        conns = [{"clientAddr": c.peer, "clientId": c.client_id, "language": c.language, "version": c.version}
                 for c in list(chans)]
        return cmd.response(ResponseCode.SUCCESS, None, None, encode_fastjson({"connectionSet": conns}))

    def delete_group(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """The group's config, and with ``cleanOffset`` its committed offsets."""
        b = self.broker
        h = Header(cmd)
        group = h.str("groupName")
        if b.read_only:
            return cmd.response(ResponseCode.NO_PERMISSION, "the broker is read-only: groups cannot be changed")
        with b.groups.file.lock:
            if b.groups.table.pop(group, None) is not None:
                b.groups.file.write({"subscriptionGroupTable": b.groups.table})
        if h.bool("cleanOffset"):
            b.store.consumer_offsets.remove_group(group)
        return cmd.response(ResponseCode.SUCCESS)

    def delete_topic(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """The topic's config; its messages stay in the commit log until retention removes them."""
        b = self.broker
        topic = Header(cmd).str("topic", "") or ""
        if not topic.strip():
            return cmd.response(ResponseCode.INVALID_PARAMETER, "The specified topic is blank.")
        if is_system_topic(topic):
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
        if b.read_only:
            return cmd.response(ResponseCode.NO_PERMISSION, "the broker is read-only: topics cannot be deleted")
        with b.topics.file.lock:
            existed = b.topics.table.pop(topic, None) is not None
        if existed:
            b.topics.persist()
        return cmd.response(ResponseCode.SUCCESS)

    def topic_config(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """GET_TOPIC_CONFIG: ``TopicConfigAndQueueMapping`` (no static-topic mapping here, so only the
        ``TopicConfig``)."""
        topic = Header(cmd).str("topic")
        tc = self.broker.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        doc = {k: tc[k] for k in TOPIC_CONFIG_FIELDS if k in tc}
        return cmd.response(ResponseCode.SUCCESS, None, None, encode_fastjson(doc))

    # --- configuration ------------------------------------------------------------------------------
    def config_properties(self) -> dict[str, str]:
        """The broker's and the store's settings under their broker.conf keys, values as Java's
        ``toString`` writes them."""
        out = {}
        for cfg, name in ((self.broker.store.cfg, camel_name), (self.broker.cfg, java_key)):
            for f in dataclasses.fields(cfg):
                v = getattr(cfg, f.name)
                if isinstance(v, bool):
                    out[name(f.name)] = "true" if v else "false"
                elif isinstance(v, (int, float, str)):
                    out[name(f.name)] = str(v)
                elif isinstance(v, tuple):
                    out[name(f.name)] = ",".join(map(str, v))
        return out

    def get_config(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """``Configuration.getAllConfigsFormatString``: sorted ``key=value`` lines; the response header's
        ``version`` is the configuration's ``DataVersion``."""
        version = encode_fastjson({"counter": self.config_version, "stateVersion": 0, "timestamp": self.boot_ms})
        return cmd.response(ResponseCode.SUCCESS, None, {"version": version.decode()},
                            config_text(self.config_properties()))

    def update_config(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """The body is properties text; keys this broker does not have are ignored (upstream's
        ``mergeIfExist``), keys in the black list refused as upstream refuses them."""
        b = self.broker
        props, refused = config_update(cmd, BLACK_LIST)
        if refused is not None:
            return refused
        by_key = {java_key(f.name): f for f in dataclasses.fields(b.cfg)}
        fixed = sorted(k for k in props if k in by_key and k not in RUNTIME_KEYS)
        if fixed:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                f"cannot change {', '.join(fixed)} while the broker runs: set it in broker.conf and "
                                f"restart (run-time keys: {', '.join(sorted(RUNTIME_KEYS))})")
        changes = {}
        try:
            for k, v in props.items():
                if k in by_key:
                    changes[by_key[k].name] = coerce_value(by_key[k], v)
            if changes:
                b.cfg = b.cfg.replace(**changes)
        except RmqStoreError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        if "auto_create_subscription_group" in changes:
            b.groups.auto_create = b.cfg.auto_create_subscription_group
        self.config_version += 1
        return cmd.response(ResponseCode.SUCCESS)

    # --- offsets ------------------------------------------------------------------------------------
    def reset_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET as RocketMQ 5 answers it (``useServerSideResetOffset``): every
        read queue (or ``queueId`` alone, to ``offset`` if given) to the first message stored at or
        after ``timestamp`` (< 0: the queue's end), committed here; the group's live consumers are
        told (RESET_CONSUMER_CLIENT_OFFSET) so they drop what they hold. Answers ``ResetOffsetBody``."""
        b = self.broker
        h = Header(cmd)
        topic, group, ts = h.str("topic"), h.str("group"), h.long("timestamp")
        qid, offset = h.int("queueId", -1), h.long("offset", None)
        if b.cluster.is_slave:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "Can not reset offset in slave broker")
        if b.read_only:
            return cmd.response(ResponseCode.NO_PERMISSION, "the broker is read-only: offsets cannot be reset")
        tc = b.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} does not exist")
        if group not in b.groups.table:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} does not exist")
        try:
            offsets = reset_target_offsets(b.store, topic, int(tc["readQueueNums"]), ts, qid, offset)
        except OffsetError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, e.args[0])
        for q, o in offsets.items():
            b.commit_offset(group, topic, q, o)
        b.store.consumer_offsets.clear_pull_offsets(group, topic)  # what was pulled before no longer counts
        tell_consumers_to_reset(b, group, topic, ts, offsets)
        return cmd.response(ResponseCode.SUCCESS, None, None, reset_offset_body(b.cfg.broker_name, topic, offsets))

    def consume_stats(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUME_STATS (``consumerProgress``): one ``ConsumeStats`` over the group's topics (or
        ``topic``, or the ``;``-separated ``topicList``), answered SUCCESS even when empty (mqadmin
        itself then says the group has no consume stats)."""
        b = self.broker
        h = Header(cmd)
        group, only = h.str("consumerGroup"), (h.str("topic", "") or "").strip()
        listed = [t for t in (h.str("topicList", "") or "").split(";") if t.strip()]
        if listed:
            topics = set(listed)
        else:
            topics = {only} if only else set(b.store.consumer_offsets.topics_of_group(group))
            topics = {t for t in topics if self._subscribed(group, t)}
        entries, tps = [], 0.0
        for topic in sorted(topics):
            tc = b.topics.get(topic)
            if tc is not None:
                entries += self._offset_entries(group, topic, int(tc["readQueueNums"]))[0]
                tps += self.consume_tps(group, topic)
        body = f'{{"consumeTps":{tps!r},"offsetTable":{{' + ",".join(entries) + "}}"
        return cmd.response(ResponseCode.SUCCESS, None, None, body.encode())

    def consume_tps(self, group: str, topic: str) -> float:
        """``BrokerStatsManager.tpsGroupGetNums``: messages pulled per second by ``group`` from ``topic``
        over the last minute (``GROUP_GET_NUMS``'s minute window; 0.0 before two samples)."""
        data = self.windows.broker_stats_data(GROUP_GET_NUMS, f"{topic}@{group}")
        return float(data["statsMinute"]["tps"]) if data else 0.0

    def _subscribed(self, group: str, topic: str) -> bool:
        """Upstream's check: a topic the group's live consumers do not subscribe to is left out (a
        group with no live subscriptions keeps all)."""
        live = self.broker.clients.consumers.get(group)
        return live is None or not live.subscriptions or topic in live.subscriptions

    def broker_consume_stats(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS (``mqadmin brokerConsumeStats``): ``ConsumeStatsList``, one
        ``{group: [ConsumeStats per topic]}`` per subscription group, as ``fetchAllConsumeStatsInBroker``
        builds it (``pullOffset`` left 0, so ``totalInflightDiff`` is minus the committed offsets, as
        upstream's arithmetic gives)."""
        b = self.broker
        only_order = Header(cmd).bool("isOrder")
        groups, total_diff, inflight = [], 0, 0
        for group in sorted(b.groups.table):
            stats = []
            for topic in sorted(b.store.consumer_offsets.topics_of_group(group)):
                tc = b.topics.get(topic)
                if tc is None or (only_order and not tc.get("order")) or not self._subscribed(group, topic):
                    continue
                entries, diff, committed = self._offset_entries(group, topic, int(tc["writeQueueNums"]), pull=False)
                stats.append(f'{{"consumeTps":{self.consume_tps(group, topic)!r},"offsetTable":{{' + ",".join(entries)
                             + "}}")
                total_diff += diff
                inflight -= committed
            groups.append("{" + json.dumps(group, ensure_ascii=False) + ":[" + ",".join(stats) + "]}")
        body = (f'{{"brokerAddr":{json.dumps(b.advertised)},"consumeStatsList":[{",".join(groups)}],'
                f'"totalDiff":{total_diff},"totalInflightDiff":{inflight}}}')
        return cmd.response(ResponseCode.SUCCESS, None, None, body.encode())

    def _offset_entries(self, group: str, topic: str, queues: int, *, pull: bool = True
                        ) -> tuple[list[str], int, int]:
        """A ``ConsumeStats``'s ``MessageQueue`` -> ``OffsetWrapper`` entries as fastjson writes them,
        their lag and the sum of the committed offsets; ``pullOffset`` is where the group's consumer
        pulls next, never below the committed offset (``pull``, GET_CONSUME_STATS:
        ``max(consumerOffset, queryPullOffset)``) or 0 (GET_BROKER_CONSUME_STATS leaves it unset)."""
        b = self.broker
        store = b.store
        committed = store.consumer_offsets.query_offsets(group, topic)
        pulled = store.consumer_offsets.query_pull_offsets(group, topic) if pull else {}
        entries, diff, total = [], 0, 0
        for q in range(queues):
            mx = max(0, store.get_max_offset_in_queue(topic, q))
            c = max(0, committed.get(q, 0))
            last = store.get_message_store_timestamp(topic, q, c - 1) if c > 0 else 0
            key = json.dumps({"brokerName": b.cfg.broker_name, "queueId": q, "topic": topic}, separators=(",", ":"))
            entries.append(f'{key}:{{"brokerOffset":{mx},"consumerOffset":{c},"lastTimestamp":{max(0, last)},'
                           f'"pullOffset":{max(c, pulled.get(q, c)) if pull else 0}}}')
            diff += mx - c
            total += c
        return entries, diff, total


def reset_target_offsets(store, topic: str, read_queues: int, timestamp: int, queue_id: int = -1,
                         offset: int | None = None) -> dict[int, int]:
    """The offsets a reset of ``topic`` moves a group to, as RocketMQ 5's ``resetOffsetInner``
    computes them: with ``queue_id`` >= 0 and ``offset`` given (not -1), that queue to ``offset``
    (:class:`OffsetError` "Target offset N not in consume queue range [min-max]" outside
    ``[min, max + 1]``); otherwise each queue (``queue_id`` alone, or ``0 .. read_queues - 1``) to
    ``getOffsetInQueueByTime(timestamp)`` -- the first message stored at or after it, clamped to the
    queue's range -- or with ``timestamp`` < 0 to the queue's end. The broker's
    INVOKE_BROKER_TO_RESET_OFFSET and the offline ``rmqstore reset-offset`` both use it."""
    def by_time(q: int) -> int:
        if timestamp < 0:
            return store.get_max_offset_in_queue(topic, q)
        return store.get_offset_in_queue_by_time(topic, q, timestamp)

    if queue_id >= 0 and offset is not None and offset != -1:
        lo, hi = store.get_min_offset_in_queue(topic, queue_id), store.get_max_offset_in_queue(topic, queue_id)
        if (lo >= 0 and offset < lo) or offset > hi + 1:
            raise OffsetError(f"Target offset {offset} not in consume queue range [{lo}-{hi}]")
        return {queue_id: offset}
    return {q: by_time(q) for q in ([queue_id] if queue_id >= 0 else range(read_queues))}


def reset_offset_body(broker_name: str, topic: str, offsets: dict[int, int], *, cpp: bool = False) -> bytes:
    """``ResetOffsetBody`` as the Java broker writes it (fastjson: ``MessageQueue`` objects as map keys),
    or with ``cpp`` as RocketMQ's C++ client 1.x reads it (``ResetOffsetBodyForC``: a list of queues
    with their offsets; it cannot parse object keys)."""
    if cpp:
        rows = [{"brokerName": broker_name, "queueId": q, "topic": topic, "offset": o}
                for q, o in sorted(offsets.items())]
        return json.dumps({"offsetTable": rows}, separators=(",", ":")).encode()

    def key(q: int) -> str:
        return json.dumps({"brokerName": broker_name, "queueId": q, "topic": topic}, separators=(",", ":"))
    return ('{"offsetTable":{' + ",".join(f"{key(q)}:{o}" for q, o in sorted(offsets.items())) + "}}").encode()


def tell_consumers_to_reset(b, group: str, topic: str, timestamp: int, offsets: dict[int, int]) -> int:
    """RESET_CONSUMER_CLIENT_OFFSET to each live consumer of the group, one way, in the body its
    language reads; the number told."""
    live = b.clients.consumers.get(group)
    ext = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true"}
    told = 0
    for conn in list(live.channels) if live else []:
        body = reset_offset_body(b.cfg.broker_name, topic, offsets, cpp=conn.language == "CPP")
        conn.send_request_oneway(RESET_CONSUMER_CLIENT_OFFSET, ext, body)
        told += 1
    return told


def _runtime(seconds: float) -> str:
    """``StoreStatsService.getFormatRuntime``: ``[ d days, h hours, m minutes, s seconds ]``."""
    s = int(seconds)
    return f"[ {s // 86400} days, {s // 3600 % 24} hours, {s // 60 % 60} minutes, {s % 60} seconds ]"
