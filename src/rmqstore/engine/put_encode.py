"""Encoding puts outside the append lock: the checks a message passes before it is a record, the
general path's encoding (every record shape, through :func:`~rmqstore.format.encode.encode_record`)
and the columns of a vectorised batch. Nothing here knows a field position; :mod:`.commit_log`
stamps what the lock decides through ``format/``.
"""
from __future__ import annotations

import functools
import logging
import operator
import re
import struct
from dataclasses import dataclass

import numpy as np

from ..config import MessageStoreConfig
from ..format import javalang as J
from ..format import message as M
from ..format import properties as P
from ..format.encode import RecordFields
from ..format.msgid import parse_host
from ..types import SCHEDULE_TOPIC, Message, PutMessageResult, PutMessageStatus

#: the encoded property of a message whose put does not wait for the flush (SYNC_FLUSH)
NO_WAIT = b"WAIT\x01false\x02"

log = logging.getLogger("rmqstore.engine.commit_log")  # (append_failed: the commit log's logger)

TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+\Z")  # \Z: "$" would accept a trailing newline
DEFAULT_BORN_HOST = "127.0.0.1:0"
MAX_TOTAL_EXTRA = 65536
INNER_BATCH_FLAG = 0x80
SLOW_SYSFLAGS = M.SYSFLAG_TX_MASK | INNER_BATCH_FLAG | M.SYSFLAG_BORNHOST_V6 | M.SYSFLAG_STOREHOST_V6


def props_bytes(msg: Message) -> bytes:
    p = msg.properties
    if type(p) is dict:
        return "".join([f"{k}\x01{v}\x02" for k, v in p.items() if v is not None]).encode()
    return msg.encoded_properties()


#: the fields a batch usually shares (one set of these tuples of size 1 checks them all at once)
_SHARED_FIELDS = operator.attrgetter("topic", "queue_id", "born_host", "store_host", "flag", "sys_flag",
                                     "reconsume_times", "prepared_transaction_offset")
_BODY = operator.attrgetter("body")
_PROPERTIES = operator.attrgetter("properties")
_BORN = operator.attrgetter("born_timestamp")
_GET_DELAY = operator.methodcaller("get", P.DELAY)


def is_delayed(value: object) -> bool:
    """A DELAY property that asks for a delay, or that Java's ``Integer.parseInt`` rejects (both are
    refused in a batch): upstream's ``getDelayTimeLevel() > 0``; an empty value is ignored (parsing
    drops it) and a None value is not written at all."""
    if value is None:
        return False
    text = value if type(value) is str else format(value, "")
    if text == "":
        return False
    try:
        return J.parse_int(text) > 0
    except ValueError:
        return True


def _is_none(value: object) -> bool:
    return value is None


def message_columns(msgs: list[Message]) -> tuple[list, list, list]:
    """``(bodies, properties, born timestamps)`` of a batch, as given."""
    return list(map(_BODY, msgs)), list(map(_PROPERTIES, msgs)), list(map(_BORN, msgs))


@dataclass(slots=True)
class Encoded:
    """A record encoded by :func:`encode_message`, waiting for the append lock's stamps."""

    rec: bytearray
    total: int
    key: tuple[str, int]
    tx_type: int
    store_timestamp: int | None
    born_unset: bool
    store_host_raw: bytes
    wait: bool


_I32_FIELDS = ("queue_id", "flag", "sys_flag", "reconsume_times")
_I64_FIELDS = ("born_timestamp", "store_timestamp", "prepared_transaction_offset")


def out_of_range(msgs) -> str | None:
    for m in msgs:
        for names, bits in ((_I32_FIELDS, 31), (_I64_FIELDS, 63)):
            for name in names:
                v = getattr(m, name, None)
                if isinstance(v, int) and not -(1 << bits) <= v < (1 << bits):
                    return f"{name}={v} does not fit its signed {bits + 1}-bit field"
    return None


def range_checked(put):
    """An out-of-range fixed-width field gives MESSAGE_ILLEGAL instead of a struct/numpy error
    (looked for only once packing failed: the normal path pays nothing). No record is written."""
    @functools.wraps(put)
    def wrapper(self, arg):
        try:
            return put(self, arg)
        except (struct.error, OverflowError):
            reason = out_of_range(arg if isinstance(arg, list) else [arg])
            if reason is None:
                raise
            return illegal(reason)
    return wrapper


def _checked_parts(msg: Message, cfg: MessageStoreConfig) -> tuple | PutMessageResult:
    """``(topic bytes, v2, body, properties bytes)`` of a message the store takes, or why not."""
    topic = msg.topic
    if not isinstance(topic, str) or not topic or not TOPIC_RE.match(topic):
        return illegal(f"topic {topic!r} does not match ^[%|a-zA-Z0-9_-]+$")
    topic_b = topic.encode("ascii")
    if len(topic_b) > M.MAX_TOPIC_BYTES:
        return illegal(f"topic is {len(topic_b)} bytes, the limit is {M.MAX_TOPIC_BYTES}")
    v2 = len(topic) > 127
    if v2 and not cfg.auto_message_version_on_topic_len:
        return illegal("topic longer than 127 chars needs autoMessageVersionOnTopicLen (V2 magic)")
    body = msg.body
    if body is None:
        return illegal("message body is null")
    if not isinstance(body, (bytes, bytearray)):
        body = bytes(body)
    if not isinstance(msg.queue_id, int) or msg.queue_id < 0:
        return illegal(f"queue id {msg.queue_id!r} must be an int >= 0")
    props = msg.encoded_properties()
    if topic == SCHEDULE_TOPIC and b"DELAY\x01" in props:
        delay = P.parse_properties(props).get(P.DELAY)
        try:
            if delay is not None:
                J.parse_int(delay)
        except ValueError as e:  # RocketMQ's recovery would take the record for invalid and cut there
            return illegal(f"DELAY on {SCHEDULE_TOPIC}: {e}")
    if b"INNER_NUM\x01" in props and not msg.sys_flag & INNER_BATCH_FLAG:
        return illegal("INNER_NUM property without the INNER_BATCH sysflag")
    if msg.sys_flag & INNER_BATCH_FLAG:
        return illegal("INNER_BATCH messages need a BatchCQ topic, which this store does not support")
    if cfg.enabled_append_prop_crc:
        props = P.with_crc_reserved(props)
    if len(props) > P.MAX_PROPERTIES_SIZE:
        return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                error=f"properties are {len(props)} bytes, the limit is {P.MAX_PROPERTIES_SIZE}")
    if len(body) > cfg.max_message_size:
        return illegal(f"body is {len(body)} bytes, maxMessageSize is {cfg.max_message_size}")
    return topic_b, v2, body, props


def encode_message(msg: Message, cfg: MessageStoreConfig, store_host_raw: bytes) -> Encoded | PutMessageResult:
    """Check and encode one message for the general append path (every record shape), its
    offsets and times left for the append lock to stamp; a PutMessageResult says why not."""
    parts = _checked_parts(msg, cfg)
    if isinstance(parts, PutMessageResult):
        return parts
    topic_b, v2, body, props = parts
    topic = msg.topic
    try:
        born_raw = parse_host(msg.born_host or DEFAULT_BORN_HOST)
        store_raw = parse_host(msg.store_host) if msg.store_host else store_host_raw
    except ValueError as e:
        return illegal(f"bad host: {e}")
    sys_flag = M.host_sys_flag(msg.sys_flag, len(born_raw), len(store_raw))
    total = M.record_length(len(body), len(topic_b), len(props), sys_flag, v2)
    if total > cfg.max_message_size + MAX_TOTAL_EXTRA:
        return illegal(f"record is {total} bytes, the limit is maxMessageSize + 65536")
    if total + M.END_FILE_MIN_BLANK_LENGTH > cfg.mapped_file_size_commit_log:
        return illegal(f"record of {total} bytes cannot fit a {cfg.mapped_file_size_commit_log}-byte segment")
    born_unset = msg.born_timestamp is None
    rec = M.encode_record(RecordFields(
        topic=topic_b, body=body, props=props, queue_id=msg.queue_id, flag=msg.flag, sys_flag=sys_flag,
        born_timestamp=0 if born_unset else msg.born_timestamp, born_host=born_raw,
        store_timestamp=msg.store_timestamp or 0, store_host=store_raw,
        reconsume_times=msg.reconsume_times, prepared_transaction_offset=msg.prepared_transaction_offset, v2=v2))
    wait = NO_WAIT not in props
    return Encoded(rec, total, (topic, msg.queue_id), sys_flag & M.SYSFLAG_TX_MASK, msg.store_timestamp,
                   born_unset, store_raw, wait)


def shared_columns(msgs: list[Message]) -> tuple | None:
    """``(flags, sys_flags, reconsume_times, prepared_offsets)`` of a fast batch (an int where all
    messages agree, else columns), or None when topic, queue or hosts differ, a sysflag needs the
    general path or a field is unhashable."""
    try:
        shared = set(map(_SHARED_FIELDS, msgs))
    except TypeError:  # an unhashable field: the general path says what is wrong
        return None
    if len(shared) == 1:  # the usual batch: these fields are the same in every message
        _, _, _, _, flags, sys_flag, reconsume, prepared = next(iter(shared))
        return None if sys_flag & SLOW_SYSFLAGS else (flags, sys_flag, reconsume, prepared)
    (topics, queue_ids, born_hosts, store_hosts, flags, sys_flags, reconsume,
     prepared) = zip(*map(_SHARED_FIELDS, msgs))
    if any(len(set(col)) != 1 for col in (topics, queue_ids, born_hosts, store_hosts)):
        return None
    sys_flags = np.asarray(sys_flags, dtype=np.int32)  # (OverflowError: range_checked answers)
    if (sys_flags & SLOW_SYSFLAGS).any():
        return None
    return flags, sys_flags, reconsume, prepared


def batch_properties(props: list[dict]) -> list[bytes] | None:
    """The encoded properties of a fast batch, or None when one is delayed or has INNER_NUM."""
    pbytes = P.encode_dicts(props)
    joined = b"\x00".join(pbytes) if pbytes is not None else b""
    if pbytes is None or P.NONE_WRITTEN in joined or b"DELAY\x01" in joined:
        # dicts of different sizes, a None value to leave out, or a DELAY property: one by one
        if any(map(is_delayed, filter(None, map(_GET_DELAY, props)))):
            return None
        pbytes = list(map(P.encode_properties, props))
        joined = b"\x00".join(pbytes)
    return None if b"INNER_NUM\x01" in joined else pbytes


def born_columns(born: list) -> tuple:
    """``(born timestamps, born_unset)`` for :func:`~rmqstore.format.record_layout.stamp_batch`:
    None for the column when every born time is unset (True: the store time for all), a mask when
    some are."""
    unset = born.count(None)
    if unset == 0:
        return np.asarray(born, dtype=np.int64), None
    if unset == len(born):
        return None, True
    mask = np.fromiter(map(_is_none, born), dtype=bool, count=len(born))
    return np.asarray([0 if b is None else b for b in born], dtype=np.int64), mask


def illegal(reason: str) -> PutMessageResult:
    return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error=reason)


def append_failed(ex: Exception) -> PutMessageResult:
    """The answer to an append that failed on I/O (no segment could be created)."""
    log.error("append failed: %s", ex)
    return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, error=str(ex))
