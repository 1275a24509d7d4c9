"""Between stored records and ``apache.rocketmq.v2.Message`` (the proxy's ``GrpcConverter`` and
``SendMessageActivity.buildMessageProperty``)."""
from __future__ import annotations

import hashlib
import re

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from ...format import properties as P
from ...types import MessageRecord
from .. import messages as M
from .. import timer as T
from ..pop import DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC
from .protocol import pb

SHARDING_KEY = "__SHARDINGKEY"
TRACE_CONTEXT = "TRACE_CONTEXT"
BORN_HOST = "__BORNHOST"
BORN_TIMESTAMP = "BORN_TIMESTAMP"
RECONSUME_TIME = "RECONSUME_TIME"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"

#: ``MessageConst.STRING_HASH_SET``: properties that are not user properties (note that upstream leaves
#: __SHARDINGKEY, TRACE_CONTEXT and the transaction ids out of it: they reach clients as user properties)
SYSTEM_PROPERTIES = frozenset({
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
    "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK",
    "POP_CK_OFFSET", "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID",
    "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE",
    "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS",
    "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "__BORNHOST",
    "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#",
})

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: the proxy's limits (``ProxyConfig``): user properties, their total size, a message group's size
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTY_SIZE = 16 * 1024
MAX_MESSAGE_GROUP_SIZE = 64


class Refused(Exception):
    """A request the proxy refuses with ``code`` (a ``pb.Code`` value)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _millis(ts) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def _user_properties(m) -> tuple[dict[str, str], int]:
    """The message's user properties, checked, and their size in bytes."""
    user = dict(m.user_properties)
    if len(user) > MAX_USER_PROPERTIES:
        raise Refused(pb.MESSAGE_PROPERTIES_TOO_LARGE, f"too many user properties, max is {MAX_USER_PROPERTIES}")
    size = 0
    for k, v in user.items():
        if k in SYSTEM_PROPERTIES:
            raise Refused(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {k}")
        if _CONTROL.search(k) or _CONTROL.search(v) or "\x01" in k + v or "\x02" in k + v:
            raise Refused(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key or value of a property cannot contain a "
                          "control character")
        size += len(k.encode()) + len(v.encode())
    return user, size


def _add_tag_and_keys(sp, props: dict[str, str]) -> int:
    """TAGS and KEYS into ``props``, checked; their size in bytes."""
    tag = sp.tag
    if tag:
        if not tag.strip() or "|" in tag or _CONTROL.search(tag):
            raise Refused(pb.ILLEGAL_MESSAGE_TAG, "tag cannot be whitespace only, nor contain '|' or a control "
                          "character")
    props[P.TAGS] = tag
    size = len(tag.encode())
    keys = list(sp.keys)
    for key in keys:
        if key and (not key.strip() or _CONTROL.search(key)):
            raise Refused(pb.ILLEGAL_MESSAGE_KEY, "key cannot be whitespace only, nor contain a control character")
        if " " in key:
            raise Refused(pb.ILLEGAL_MESSAGE_KEY, f"key {key!r} holds a space: RocketMQ stores keys space-joined")
        size += len(key.encode())
    if keys:
        props[P.KEYS] = " ".join(keys)
    return size


def _add_message_group(sp, props: dict[str, str]) -> None:
    group = sp.message_group
    if group:
        if not group.strip() or _CONTROL.search(group):
            raise Refused(pb.ILLEGAL_MESSAGE_GROUP, "message group cannot be whitespace only, nor contain a "
                          "control character")
        if len(group.encode()) >= MAX_MESSAGE_GROUP_SIZE:
            raise Refused(pb.ILLEGAL_MESSAGE_GROUP, f"message group exceed the max size {MAX_MESSAGE_GROUP_SIZE}")
        props[SHARDING_KEY] = group


def message_properties(m, producer_group: str, peer: str, now_ms: int) -> dict[str, str]:
    """The stored properties of a gRPC message (``buildMessageProperty``); Refused on bad input."""
    sp = m.system_properties
    props, size = _user_properties(m)
    size += _add_tag_and_keys(sp, props)
    if size > MAX_USER_PROPERTY_SIZE:
        raise Refused(pb.MESSAGE_PROPERTIES_TOO_LARGE, f"the total size of user property is too large, max is "
                      f"{MAX_USER_PROPERTY_SIZE}")
    if not sp.message_id.strip():
        raise Refused(pb.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props[P.UNIQ_KEY] = sp.message_id
    if sp.message_type == pb.TRANSACTION:
        props[M.TRAN_MSG] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            props[CHECK_IMMUNITY] = str(sp.orphaned_transaction_recovery_duration.seconds)
    if sp.HasField("delivery_timestamp"):
        at = _millis(sp.delivery_timestamp)
        if at - now_ms > T.MAX_DELAY_MS:
            raise Refused(pb.ILLEGAL_DELIVERY_TIME, f"the max delay time of message is too large, max is "
                          f"{T.MAX_DELAY_MS}")
        props[T.TIMER_DELIVER_MS] = str(at)
    props[RECONSUME_TIME] = str(sp.delivery_attempt)
    props[M.PRODUCER_GROUP] = producer_group
    _add_message_group(sp, props)
    if sp.trace_context:
        props[TRACE_CONTEXT] = sp.trace_context
    props[BORN_HOST] = sp.born_host.strip() or peer
    if sp.HasField("born_timestamp"):
        props[BORN_TIMESTAMP] = str(_millis(sp.born_timestamp))
    return props


def _timestamp(ms: int):
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration(ms: int):
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def to_message(rec: MessageRecord, topic: str, *, handle: str | None = None, attempt: int | None = None,
               invisible_ms: int | None = None):
    """A stored record as the proxy sends it (``GrpcConverter.buildMessage``). The body is sent
    decompressed (IDENTITY); its digest is the uppercase hex MD5 the proxy sends."""
    props = rec.properties
    body = rec.decoded_body if rec.compression else rec.body
    sp = pb.SystemProperties()
    tag = props.get(P.TAGS)
    if tag is not None:
        sp.tag = tag
    keys = props.get(P.KEYS)
    if keys is not None:
        sp.keys.extend(keys.split(" "))
    sp.message_id = props.get(P.UNIQ_KEY) or rec.msg_id
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    sp.body_encoding = pb.IDENTITY
    if props.get(M.TRAN_MSG) == "true":
        sp.message_type = pb.TRANSACTION
    elif P.DELAY in props or T.TIMER_DELIVER_MS in props or T.TIMER_DELAY_SEC in props:
        sp.message_type = pb.DELAY
    elif SHARDING_KEY in props:
        sp.message_type = pb.FIFO
    else:
        sp.message_type = pb.NORMAL
    sp.born_timestamp.CopyFrom(_timestamp(rec.born_timestamp))
    sp.born_host = props.get(BORN_HOST) or rec.born_host
    sp.store_timestamp.CopyFrom(_timestamp(rec.store_timestamp))
    sp.store_host = rec.store_host
    deliver = props.get(T.TIMER_DELIVER_MS)
    if deliver is not None and deliver.lstrip("-").isdigit():
        sp.delivery_timestamp.CopyFrom(_timestamp(int(deliver)))
    if SHARDING_KEY in props:
        sp.message_group = props[SHARDING_KEY]
    if handle is not None:
        sp.receipt_handle = handle
    if invisible_ms is not None:
        sp.invisible_duration.CopyFrom(duration(invisible_ms))
    sp.queue_id = rec.queue_id
    sp.queue_offset = rec.queue_offset
    sp.delivery_attempt = attempt if attempt is not None else rec.reconsume_times + 1
    if TRACE_CONTEXT in props:
        sp.trace_context = props[TRACE_CONTEXT]
    if DLQ_ORIGIN_TOPIC in props and DLQ_ORIGIN_MESSAGE_ID in props:
        sp.dead_letter_queue.topic = props[DLQ_ORIGIN_TOPIC]
        sp.dead_letter_queue.message_id = props[DLQ_ORIGIN_MESSAGE_ID]
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES}
    return pb.Message(topic=pb.Resource(name=topic), user_properties=user, system_properties=sp, body=body)
