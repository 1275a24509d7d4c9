"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and CONSUMER_SEND_MSG_BACK (36):
``SendMessageProcessor`` and ``AbstractSendMessageProcessor`` upstream."""
from __future__ import annotations

import functools
import random
import time

from ..engine.put_batch import RawBatch
from ..format import properties as P
from ..types import Message, PutMessageStatus
from . import messages as M
from .metadata import (DLQ_PREFIX, NOT_ALLOWED_SEND, PERM_INHERIT, PERM_READ, PERM_WRITE, RETRY_PREFIX,
                       TRANS_HALF_TOPIC, topic_config, validate_topic)
from .timer import TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS, TimerError, timer_message
from .remoting import (JSON, RESPONSE_FLAG, Header, HeaderError, RemotingCommand, RequestCode, ResponseCode,
                       json_answer_frame, json_string)

#: V2 header field names (``SendMessageRequestHeaderV2``) -> V1 names
_V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
             "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
             "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}
#: ``MQVersion.Version.V3_4_9.ordinal()``
V3_4_9 = 121
DLQ_NUMS_PER_GROUP = 1
#: at most this many topic names are remembered as valid (the set starts again when full)
_VALID_TOPICS_MAX = 4096
#: the properties that make a send more than a plain put: a delay level, a transaction half, a timer
_SPECIAL_PROPERTIES = frozenset({P.DELAY, M.TRAN_MSG, TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS})

_PUT_OK = PutMessageStatus.PUT_OK
_STATUS_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.OS_PAGE_CACHE_BUSY: ResponseCode.SYSTEM_BUSY,
}


def send_header(cmd: RemotingCommand) -> Header:
    """The send header with V1 names whichever version the client sent."""
    h = Header(cmd)
    if cmd.code != RequestCode.SEND_MESSAGE:
        h.fields = {_V2_NAMES.get(k, k): v for k, v in cmd.ext.items()}
    return h


def _region_ext(region: str, trace_on: bool) -> dict[str, str]:
    """The extFields every send's answer starts with (MSG_REGION, TRACE_ON)."""
    return {"MSG_REGION": region, "TRACE_ON": "true" if trace_on else "false"}


@functools.lru_cache(maxsize=16)
def _ext_head(region: str, trace_on: bool) -> str:
    """The JSON text of :func:`_region_ext`, the object left open (a send answer's extFields start)."""
    return "{" + ",".join(f'"{k}":{json_string(v)}' for k, v in _region_ext(region, trace_on).items())


def _plain_ids(msg_id: str) -> bool:
    """Whether a msgId (a batch's: comma-joined) is ASCII letters, digits and commas: JSON needs no
    escaping of it."""
    return msg_id.isascii() and msg_id.replace(",", "").isalnum()


def _answer_ext_json(head: str, msg_id: str, qid: int, offset: int, uniq: str | None) -> str:
    """The JSON text of a put's answer extFields (MSG_REGION, TRACE_ON, msgId, queueId, queueOffset
    and transactionId, in that order), as the encoder would write them, formatted in one piece for
    :func:`~.remoting.json_answer_frame`; ``msg_id`` needs no escaping (:func:`_plain_ids`)."""
    tail = "}" if uniq is None else f',"transactionId":{json_string(uniq)}}}'
    return f'{head},"msgId":"{msg_id}","queueId":"{qid}","queueOffset":"{offset}"{tail}'


class SendProcessor:
    def __init__(self, broker):
        self.broker = broker
        self.random = random.Random()
        self._valid_topics: set[str] = set()  # topic names that passed validate_topic and NOT_ALLOWED_SEND

    def handlers(self) -> dict:
        return {RequestCode.SEND_MESSAGE: self.send, RequestCode.SEND_MESSAGE_V2: self.send,
                RequestCode.SEND_BATCH_MESSAGE: self.send, RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back}

    # --- checks shared by single and batch sends (msgCheck) ---------------------------------------
    def _check(self, conn, cmd: RemotingCommand, h: Header):
        """``(topic config, queue id)`` to send to, or the response refusing the send."""
        b = self.broker
        topic = h.str("topic")
        if b.read_only:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the broker[{b.advertised_host}] sending message is "
                                "forbidden (read-only)", self._answer_ext())
        if topic not in self._valid_topics:
            bad = validate_topic(topic)
            if bad:
                return cmd.response(ResponseCode.INVALID_PARAMETER, bad, self._answer_ext())
            if topic in NOT_ALLOWED_SEND:
                return cmd.response(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.",
                                    self._answer_ext())
            if len(self._valid_topics) >= _VALID_TOPICS_MAX:
                self._valid_topics.clear()
            self._valid_topics.add(topic)
        tc = b.topics.get(topic)
        if tc is None:
            tc = self._auto_create(topic, h.str("defaultTopic", ""), h.int("defaultTopicQueueNums", 4))
            if tc is None and topic.startswith(RETRY_PREFIX):
                tc = b.topics.create_if_absent(topic, 1, PERM_WRITE | PERM_READ)
            if tc is None:
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!",
                                    self._answer_ext())
        qid = h.int("queueId")
        if qid >= max(tc["writeQueueNums"], tc["readQueueNums"]):
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"request queueId[{qid}] is illegal, {tc} "
                                f"Producer: {conn.peer}", self._answer_ext())
        return tc, qid

    def _answer_ext(self) -> dict:
        """The extFields of every send's answer (MSG_REGION, TRACE_ON)."""
        return _region_ext(self.broker.cfg.region_id, self.broker.cfg.trace_on)

    def _auto_create(self, topic: str, default_topic: str, client_queue_nums: int) -> dict | None:
        """``createTopicInSendMessageMethod``: a new topic inheriting the default topic's config."""
        topics = self.broker.topics
        default = topics.get(default_topic)
        if default is None or not default["perm"] & PERM_INHERIT:
            return None
        queues = max(0, min(client_queue_nums, default["writeQueueNums"]))
        cfg = topic_config(topic, queues, default["perm"] & ~PERM_INHERIT)
        with topics.file.lock:
            if topics.get(topic) is None:
                topics.put(cfg)
        return topics.get(topic)

    # --- SEND_MESSAGE / V2 / BATCH ------------------------------------------------------------------
    def send(self, conn, cmd: RemotingCommand):
        b = self.broker
        h = send_header(cmd)
        checked = self._check(conn, cmd, h)
        if type(checked) is not tuple:
            return checked
        tc, qid = checked
        if h.bool("batch"):
            return self._send_batch(conn, cmd, h, tc, qid)
        topic = h.fields["topic"]
        if qid < 0:
            qid = self.random.randrange(max(1, tc["writeQueueNums"]))
        props = M.parse_properties(h.str("properties", None))
        reconsume = h.int("reconsumeTimes", 0)
        sys_flag = h.int("sysFlag")
        if topic.startswith(RETRY_PREFIX):
            topic_qid = self._retry_or_dlq(cmd, h, topic, reconsume, props)
            if isinstance(topic_qid, RemotingCommand):
                return topic_qid
            if topic_qid is not None:
                topic, qid = topic_qid
        if not props.get(P.UNIQ_KEY):
            props[P.UNIQ_KEY] = b.new_uniq_key()
        props[M.CLUSTER] = b.cfg.broker_cluster_name
        msg = Message(topic=topic, body=cmd.body, queue_id=qid, flag=h.int("flag"), sys_flag=sys_flag,
                      properties=M.java_properties(props), born_timestamp=h.long("bornTimestamp"),
                      born_host=conn.peer, store_host=b.store_host, reconsume_times=reconsume)
        if _SPECIAL_PROPERTIES.isdisjoint(props):  # (no delay, half or timer: the checks below change nothing)
            return self._put_and_answer(cmd, [msg], qid, props.get(P.UNIQ_KEY))
        try:
            level = M.delay_level(props)
        except ValueError as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"DELAY property: {e}")
        prepared = props.get(M.TRAN_MSG, "").lower() == "true" and not (reconsume > 0 and level > 0)
        if prepared:
            if b.cfg.reject_transaction_message:
                return cmd.response(ResponseCode.NO_PERMISSION, f"the broker[{b.advertised_host}] sending transaction "
                                    "message is forbidden")
            b.topics.create_if_absent(TRANS_HALF_TOPIC, 1, PERM_WRITE | PERM_READ)
            msg = M.half_message(msg, props)
        else:
            msg = M.schedule_if_delayed(msg, props, len(b.delay_levels_ms))
            if msg.topic == topic:  # RocketMQ 5's timer properties, when there is no delay level
                try:
                    msg = timer_message(msg, props, int(time.time() * 1000))
                except TimerError as e:
                    return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        return self._put_and_answer(cmd, [msg], qid, props.get(P.UNIQ_KEY))

    def _send_batch(self, conn, cmd: RemotingCommand, h: Header, tc: dict, qid: int):
        b = self.broker
        topic = h.fields["topic"]
        if topic.startswith(RETRY_PREFIX):
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group " + topic)
        if len(cmd.body) > b.store.cfg.max_message_size:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"the message body size over max value, MAX: "
                                f"{b.store.cfg.max_message_size}")
        if qid < 0:
            qid = self.random.randrange(max(1, tc["writeQueueNums"]))
        try:
            flags, bodies, props = M.batch_columns(cmd.body)
        except ValueError as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"batch body: {e}")
        if not bodies:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "batch body holds no message")
        born, sys_flag, reconsume = h.long("bornTimestamp"), h.int("sysFlag"), h.int("reconsumeTimes", 0)
        template = Message(topic=topic, body=b"", queue_id=qid, sys_flag=sys_flag, born_timestamp=born,
                           born_host=conn.peer, store_host=b.store_host, reconsume_times=reconsume)
        # one pass, no Message per message: the store copies the bytes through where it can
        return self._put_and_answer(cmd, RawBatch(template, flags, bodies, props), qid, None)

    def _retry_or_dlq(self, cmd, h: Header, topic: str, reconsume: int, props: dict):
        """``handleRetryAndDLQ``: a retry message past its group's max reconsume times (or of a group
        with live orderly locks) goes to the dead-letter topic."""
        b = self.broker
        group = topic[len(RETRY_PREFIX):]
        sg = b.groups.find(group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        max_times = sg.get("retryMaxTimes", 16)
        if cmd.version >= V3_4_9 and h.str("maxReconsumeTimes", None) is not None:
            max_times = h.int("maxReconsumeTimes")
        if reconsume > max_times or not b.locks.all_expired(group):
            props[P.DELAY] = "-1"
            b.traffic.to_dlq(group, props.get(M.RETRY_TOPIC, topic))
            dlq = DLQ_PREFIX + group
            b.topics.create_if_absent(dlq, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ)
            return dlq, self.random.randrange(DLQ_NUMS_PER_GROUP)
        return None

    def _put_and_answer(self, cmd: RemotingCommand, msgs: "list[Message] | RawBatch", qid: int, uniq: str | None):
        b = self.broker
        first = msgs.template if type(msgs) is RawBatch else msgs[0]  # (the batch's topic and type)
        count = len(msgs)
        as_frame = cmd.serialize == JSON

        def answer(result) -> "RemotingCommand | bytes":
            status = result.status
            if status is _PUT_OK or status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
                b.stats.put(count)
                b.traffic.put(first, count, result.wrote_bytes)
                msg_id = result.msg_id
                if as_frame and msg_id is not None and _plain_ids(msg_id):
                    head = _ext_head(b.cfg.region_id, b.cfg.trace_on)
                    return json_answer_frame(_STATUS_CODES[status], cmd.opaque,
                                             _answer_ext_json(head, msg_id, qid, result.queue_offset, uniq))
                ext = self._answer_ext()
                if msg_id is not None:
                    ext["msgId"] = msg_id
                ext["queueId"], ext["queueOffset"] = str(qid), str(result.queue_offset)
                if uniq is not None:
                    ext["transactionId"] = uniq
                return RemotingCommand(_STATUS_CODES[status], cmd.opaque, RESPONSE_FLAG, None, ext,
                                       serialize=cmd.serialize)
            ext = self._answer_ext()
            code = _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
            remark = result.error or status.value
            if code == ResponseCode.MESSAGE_ILLEGAL:
                remark = (f"the message is illegal, maybe msg body or properties length not matched. msg body length "
                          f"limit {b.store.cfg.max_message_size}B, msg properties length limit 32KB. ({remark})")
            return cmd.response(code, remark, ext)

        return b.put(msgs, answer)

    # --- CONSUMER_SEND_MSG_BACK --------------------------------------------------------------------
    def send_back(self, conn, cmd: RemotingCommand):
        """A consumer gives a message back: to ``%RETRY%group`` with the next delay level, or to
        ``%DLQ%group`` after ``maxReconsumeTimes`` (``consumerSendMsgBack``)."""
        b = self.broker
        h = Header(cmd)
        group, phy, level = h.str("group"), h.long("offset"), h.int("delayLevel")
        sg = b.groups.find(group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        if b.read_only:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the broker[{b.advertised_host}] sending message is "
                                "forbidden (read-only)")
        retry_queues = sg.get("retryQueueNums", 1)
        if retry_queues <= 0:
            return cmd.response(ResponseCode.SUCCESS)
        topic = RETRY_PREFIX + group
        qid = self.random.randrange(retry_queues)
        b.topics.create_if_absent(topic, retry_queues, PERM_WRITE | PERM_READ)
        rec = b.store.look_message_by_offset(phy)
        if rec is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {phy}")
        props = dict(rec.properties)
        props.setdefault(M.RETRY_TOPIC, rec.topic)
        max_times = sg.get("retryMaxTimes", 16)
        if cmd.version >= V3_4_9 and h.str("maxReconsumeTimes", None) is not None:
            max_times = h.int("maxReconsumeTimes")
        if rec.reconsume_times >= max_times or level < 0:
            b.traffic.to_dlq(group, h.str("originTopic", None) or rec.topic)
            topic = DLQ_PREFIX + group
            qid = self.random.randrange(DLQ_NUMS_PER_GROUP)
            b.topics.create_if_absent(topic, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ)
            props[P.DELAY] = "0"
        else:
            props[P.DELAY] = str(level if level != 0 else 3 + rec.reconsume_times)
        if not props.get(M.ORIGIN_MESSAGE_ID):
            props[M.ORIGIN_MESSAGE_ID] = rec.msg_id
        msg = M.copy_of(rec, topic, qid, props, store_host=b.store_host)
        msg.reconsume_times = rec.reconsume_times + 1
        msg = M.schedule_if_delayed(msg, props, len(b.delay_levels_ms))

        def answer(result) -> RemotingCommand:
            if result.status is PutMessageStatus.PUT_OK:
                return cmd.response(ResponseCode.SUCCESS)
            return cmd.response(ResponseCode.SYSTEM_ERROR, result.error or result.status.value)

        return b.put([msg], answer)


__all__ = ["SendProcessor", "send_header", "HeaderError"]
