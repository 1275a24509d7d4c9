"""Clients (34, 35, 38, 46, 41, 42), operator queries (12, 33)
and admin requests (17, 21, 202, 203, 300); more admin requests in :mod:`.admin_ops`."""
from __future__ import annotations

import json

from ..errors import RmqStoreError
from .metadata import PERM_READ, PERM_WRITE, RETRY_PREFIX, MixedTypeRefused, topic_config, validate_topic
from .remoting import Header, RemotingCommand, RequestCode, ResponseCode


def to_json(doc) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def _loads(body: bytes):
    try:
        return json.loads(body.decode("utf-8")) if body else {}
    except (ValueError, UnicodeDecodeError) as e:
        raise RmqStoreError(f"request body is not JSON: {e}") from None


def _mq_key(topic: str, broker: str, qid: int) -> str:
    """A ``MessageQueue`` as a map key the way fastjson writes one (an object as the key)."""
    return to_json({"brokerName": broker, "queueId": qid, "topic": topic}).decode()


def _mq_map(entries: list[tuple[str, dict]]) -> str:
    return "{" + ",".join(f"{k}:{to_json(v).decode()}" for k, v in entries) + "}"


class AdminProcessor:
    def __init__(self, broker):
        self.broker = broker

    def handlers(self) -> dict:
        C = RequestCode
        return {C.HEART_BEAT: self.heartbeat, C.UNREGISTER_CLIENT: self.unregister,
                C.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list, C.CHECK_CLIENT_CONFIG: self.check_client_config,
                C.LOCK_BATCH_MQ: self.lock, C.UNLOCK_BATCH_MQ: self.unlock,
                C.QUERY_MESSAGE: self.query_message, C.VIEW_MESSAGE_BY_ID: self.view_message,
                C.UPDATE_AND_CREATE_TOPIC: self.create_topic, C.GET_ALL_TOPIC_CONFIG: self.all_topics,
                C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.create_group,
                C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_groups,
                C.GET_TOPIC_STATS_INFO: self.topic_stats, C.GET_CONSUMER_CONNECTION_LIST: self.connection_list,
                C.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by}

    # --- clients ------------------------------------------------------------------------------------
    def heartbeat(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """Register the client's producer and consumer groups; a consumer group gets its config and
        its retry topic, and its other members are told when the members change."""
        b = self.broker
        data = _loads(cmd.body)
        conn.client_id = str(data.get("clientID") or conn.client_id or conn.peer)
        conn.language, conn.version = cmd.language, cmd.version
        for p in data.get("producerDataSet") or []:
            if isinstance(p, dict) and p.get("groupName"):
                b.clients.register_producer(conn, str(p["groupName"]))
        for c in data.get("consumerDataSet") or []:
            if not isinstance(c, dict) or not c.get("groupName"):
                continue
            group = str(c["groupName"])
            sg = b.groups.find(group)
            if sg is None:
                continue
            if str(c.get("messageModel", "CLUSTERING")) == "CLUSTERING" and sg.get("retryQueueNums", 1) > 0:
                b.topics.create_if_absent(RETRY_PREFIX + group, sg.get("retryQueueNums", 1), PERM_READ | PERM_WRITE)
            if b.clients.register_consumer(conn, c):
                b.notify_consumer_ids_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    def unregister(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        group = h.str("consumerGroup", None)
        if self.broker.clients.unregister(conn, h.str("producerGroup", None), group):
            self.broker.notify_consumer_ids_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    def consumer_list(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        group = Header(cmd).str("consumerGroup")
        ids = self.broker.clients.consumer_ids(group)
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return cmd.response(ResponseCode.SUCCESS, None, None, to_json({"consumerIdList": ids}))

    def check_client_config(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        sub = (_loads(cmd.body) or {}).get("subscriptionData") or {}
        kind = str(sub.get("expressionType") or "TAG").upper()
        if kind != "TAG":
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"The broker does not support consumer to "
                                f"filter message by {kind}")
        return cmd.response(ResponseCode.SUCCESS)

    def lock(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        req = _loads(cmd.body)
        locked = self.broker.locks.try_lock(str(req.get("consumerGroup")), list(req.get("mqSet") or []),
                                            str(req.get("clientId")))
        return cmd.response(ResponseCode.SUCCESS, None, None, to_json({"lockOKMQSet": locked}))

    def unlock(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        req = _loads(cmd.body)
        self.broker.locks.unlock(str(req.get("consumerGroup")), list(req.get("mqSet") or []), str(req.get("clientId")))
        return cmd.response(ResponseCode.SUCCESS)

    # --- operator queries -------------------------------------------------------------------------
    def query_message(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_MESSAGE by key, or by unique key (``_UNIQUE_KEY_QUERY``): the index's matches as
        upstream answers them (hash collisions included: the client checks the keys)."""
        b = self.broker
        h = Header(cmd)
        topic, key = h.str("topic"), h.str("key")
        max_num = h.int("maxNum")
        if h.bool("_UNIQUE_KEY_QUERY"):
            max_num = b.store.cfg.default_query_max_num
        r = b.store.query_message(topic, key, max_num, h.long("beginTimestamp"), h.long("endTimestamp"), exact=False)
        ext = {"indexLastUpdateTimestamp": r.index_last_update_timestamp,
               "indexLastUpdatePhyoffset": r.index_last_update_phy_offset}
        if not r.messages:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext)
        body = b.store.records_bytes(r.messages)
        return cmd.response(ResponseCode.SUCCESS, None, ext, body)

    def view_message(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        phy = Header(cmd).long("offset")
        rec = self.broker.store.look_message_by_offset(phy)
        if rec is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {phy}")
        return cmd.response(ResponseCode.SUCCESS, None, None, self.broker.store.records_bytes([rec]))

    # --- admin --------------------------------------------------------------------------------------
    def create_topic(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        b = self.broker
        h = Header(cmd)
        topic = h.str("topic")
        bad = validate_topic(topic)
        if bad:
            return cmd.response(ResponseCode.INVALID_PARAMETER, bad)
        if b.read_only:
            return cmd.response(ResponseCode.NO_PERMISSION, "the broker is read-only: topics cannot be created")
        cfg = topic_config(topic, 0, h.int("perm", PERM_READ | PERM_WRITE), h.int("topicSysFlag", 0))
        cfg.update(readQueueNums=h.int("readQueueNums"), writeQueueNums=h.int("writeQueueNums"),
                   topicFilterType=h.str("topicFilterType", "SINGLE_TAG"), order=h.bool("order"))
        try:
            b.topics.update(cfg, h.str("attributes", ""), mixed_allowed=b.cfg.enable_mixed_message_type)
        except MixedTypeRefused as e:
            return cmd.response(ResponseCode.INVALID_PARAMETER, str(e))
        except ValueError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        return cmd.response(ResponseCode.SUCCESS)

    def create_group(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the body is a ``SubscriptionGroupConfig``."""
        b = self.broker
        doc = _loads(cmd.body)
        if not isinstance(doc, dict) or not doc.get("groupName"):
            return cmd.response(ResponseCode.SYSTEM_ERROR, "the body is not a SubscriptionGroupConfig with a groupName")
        if b.read_only:
            return cmd.response(ResponseCode.NO_PERMISSION, "the broker is read-only: groups cannot be changed")
        b.groups.put(doc)
        return cmd.response(ResponseCode.SUCCESS)

    def all_groups(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, to_json(self.broker.groups.encode()))

    def all_topics(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, to_json(self.broker.topics.encode()))

    def topic_stats(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        b = self.broker
        topic = Header(cmd).str("topic")
        tc = b.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        entries = []
        for qid in range(tc["writeQueueNums"]):
            mx = b.store.get_max_offset_in_queue(topic, qid)
            last = b.store.get_message_store_timestamp(topic, qid, mx - 1) if mx > 0 else 0
            entries.append((_mq_key(topic, b.cfg.broker_name, qid),
                            {"minOffset": b.store.get_min_offset_in_queue(topic, qid), "maxOffset": mx,
                             "lastUpdateTimestamp": max(0, last)}))
        body = '{"offsetTable":' + _mq_map(entries) + "}"
        return cmd.response(ResponseCode.SUCCESS, None, None, body.encode())

    def connection_list(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        group = Header(cmd).str("consumerGroup")
        g = self.broker.clients.consumers.get(group)
        if g is None or not g.channels:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        doc = {"connectionSet": [{"clientId": c.client_id, "clientAddr": c.peer, "language": c.language,
                                  "version": c.version} for c in g.channels],
               "subscriptionTable": g.subscriptions, "consumeType": g.consume_type, "messageModel": g.message_model,
               "consumeFromWhere": g.consume_from_where}
        return cmd.response(ResponseCode.SUCCESS, None, None, to_json(doc))

    def consumed_by(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        topic = Header(cmd).str("topic")
        groups = self.broker.store.consumer_offsets.groups_of_topic(topic) | self.broker.clients.groups_of_topic(topic)
        return cmd.response(ResponseCode.SUCCESS, None, None, to_json({"groupList": sorted(groups)}))

