"""Building the messages the broker stores, as RocketMQ's broker builds them.

Upstream keeps a message's properties in a ``HashMap`` (``string2messageProperties`` creates it with
capacity 128) and re-serializes the map whenever the broker adds a property (CLUSTER on send,
RETRY_TOPIC/ORIGIN_MESSAGE_ID on a send-back, REAL_TOPIC/REAL_QID when a delayed message goes to
SCHEDULE_TOPIC_XXXX). The stored order is therefore the map's iteration order, which
:func:`java_properties` reproduces, so that a record written here equals the one a Java broker writes.
"""
from __future__ import annotations

import struct

from ..format import properties as P
from ..format.javalang import hashmap_order, parse_int
from ..types import SCHEDULE_TOPIC, Message, MessageRecord
from .metadata import TRANS_HALF_TOPIC

CLUSTER = "CLUSTER"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
TRAN_MSG = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
TRANSACTION_ID = "__transactionId__"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
#: ``MessageSysFlag``: bits 2-3 hold the transaction type
TRANSACTION_MASK = 0x3 << 2
TRANSACTION_NOT_TYPE, TRANSACTION_PREPARED_TYPE = 0, 1 << 2
TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE = 2 << 2, 3 << 2
#: ``HashMap`` capacity of ``MessageDecoder.string2messageProperties``
PROPERTIES_MAP_CAPACITY = 128


def java_properties(props: dict[str, str]) -> list[tuple[str, str]]:
    """``messageProperties2String`` of a ``HashMap(128)`` holding ``props`` (inserted in dict order)."""
    return [(k, props[k]) for k in hashmap_order(list(props), PROPERTIES_MAP_CAPACITY)]


def parse_properties(text: str | None) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties`` (entries without a name or value are dropped)."""
    return P.parse_properties(text) if text else {}


def delay_level(props: dict[str, str]) -> int:
    """``Message.getDelayTimeLevel``: ``Integer.parseInt`` of DELAY, 0 when absent (ValueError when
    Java would throw)."""
    v = props.get(P.DELAY)
    return 0 if v is None else parse_int(v)


def schedule_if_delayed(msg: Message, props: dict[str, str], max_level: int) -> Message:
    """What upstream's put path does to a delayed message (``HookUtils.handleScheduleMessage``): a
    message that is not a transaction half/rollback with DELAY > 0 goes to SCHEDULE_TOPIC_XXXX,
    queue ``level - 1`` (the level capped at the highest configured), with REAL_TOPIC and REAL_QID."""
    tran = msg.sys_flag & TRANSACTION_MASK
    if tran not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
        return msg
    level = delay_level(props)
    if level <= 0:
        return msg
    if level > max_level:
        level = max_level
        props[P.DELAY] = str(level)
    props[REAL_TOPIC] = msg.topic
    props[REAL_QID] = str(msg.queue_id)
    msg.topic, msg.queue_id = SCHEDULE_TOPIC, level - 1
    msg.properties = java_properties(props)
    return msg


def half_message(msg: Message, props: dict[str, str]) -> Message:
    """``TransactionalMessageBridge.parseHalfMessageInner``: a prepared message is stored in
    RMQ_SYS_TRANS_HALF_TOPIC queue 0 with its real topic and queue in properties and no
    transaction type."""
    uniq = props.get(P.UNIQ_KEY)
    if uniq is not None:
        props[TRANSACTION_ID] = uniq
    props[REAL_TOPIC] = msg.topic
    props[REAL_QID] = str(msg.queue_id)
    msg.sys_flag &= ~TRANSACTION_MASK
    msg.topic, msg.queue_id = TRANS_HALF_TOPIC, 0
    msg.properties = java_properties(props)
    return msg


def copy_of(rec: MessageRecord, topic: str, queue_id: int, props: dict[str, str], *, store_host: str) -> Message:
    """A new message from a stored one (send-back, delay delivery, transaction commit), with its
    flag, sysFlag, reconsume times, born time and host (a caller sets what differs on the result)."""
    return Message(topic=topic, body=rec.body, queue_id=queue_id, flag=rec.flag, sys_flag=rec.sys_flag,
                   properties=java_properties(props), born_timestamp=rec.born_timestamp, born_host=rec.born_host,
                   store_host=store_host, reconsume_times=rec.reconsume_times)


def decode_batch(body: bytes) -> list[tuple[int, bytes, str]]:
    """The messages of a SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessages``): per message
    totalSize i32, magic i32, bodyCRC i32, flag i32, bodyLen i32, body, propertiesLen i16, properties.
    Returns ``(flag, body, properties)``; ValueError when the bytes do not hold whole messages."""
    flags, bodies, props = batch_columns(body)
    return [(f, b, p.decode("utf-8", "replace")) for f, b, p in zip(flags, bodies, props)]


_HEAD = struct.Struct(">i8xii")  # totalSize, (magic, bodyCRC), flag, bodyLen
_I16 = struct.Struct(">h")


def batch_columns(body: bytes) -> tuple[list[int], list[bytes], list[bytes]]:
    """:func:`decode_batch` as columns, in one pass: the flags, the bodies and the encoded properties
    (bytes, as sent); ValueError when the bytes do not hold whole messages (:func:`_checked_columns`
    says where and why)."""
    flags: list[int] = []
    bodies: list[bytes] = []
    props: list[bytes] = []
    add_flag, add_body, add_props = flags.append, bodies.append, props.append
    head, i16 = _HEAD.unpack_from, _I16.unpack_from
    pos, n = 0, len(body)
    try:
        while pos < n:
            total, flag, blen = head(body, pos)
            p = pos + 20 + blen
            end = pos + total
            if blen < 0 or end > n or end < p + 2 or total != 22 + blen + i16(body, p)[0]:
                raise ValueError
            add_flag(flag)
            add_body(body[pos + 20:p])
            add_props(body[p + 2:end])
            pos = end
    except (ValueError, struct.error):
        return _checked_columns(body)
    return flags, bodies, props


def _checked_columns(body: bytes) -> tuple[list[int], list[bytes], list[bytes]]:
    """:func:`batch_columns` with a check and its own message for each field."""
    flags, bodies, props = [], [], []
    pos, n = 0, len(body)
    while pos < n:
        if n - pos < 22:
            raise ValueError(f"batch message at byte {pos}: {n - pos} bytes left, a message needs at least 22")
        total, flag, blen = _HEAD.unpack_from(body, pos)
        if blen < 0 or pos + 22 + blen > n:
            raise ValueError(f"batch message at byte {pos}: body length {blen} runs past the batch")
        p = pos + 20 + blen
        plen = _I16.unpack_from(body, p)[0]
        if plen < 0 or p + 2 + plen > n:
            raise ValueError(f"batch message at byte {pos}: properties length {plen} runs past the batch")
        if total != 22 + blen + plen:
            raise ValueError(f"batch message at byte {pos}: totalSize {total}, its fields take {22 + blen + plen}")
        flags.append(flag)
        bodies.append(body[pos + 20:p])
        props.append(body[p + 2:p + 2 + plen])
        pos = p + 2 + plen
    return flags, bodies, props
