"""A stored record decoded (``MessageExt``): :class:`MessageRecord`, built by the codecs of
:mod:`rmqstore.format.message`; with the consume-queue ``tagsCode`` rule. Below ``types`` (which
re-exports them), so that ``format/`` imports nothing above it."""
from __future__ import annotations

from typing import Mapping, Sequence

from . import properties as P
from .compression import compression_of, decompress
from .hashes import java_hash_cached
from .javalang import parse_int
from .msgid import format_host4, offset_msg_id4
from .record_layout import V4

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


_RECORD_FIELDS = ("phy_offset", "store_size", "topic", "queue_id", "queue_offset", "flag", "sys_flag", "body_crc",
                  "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
                  "prepared_transaction_offset", "body", "properties", "msg_id", "magic", "tags_code")


class MessageRecord:
    """One stored record, every field decoded (``MessageExt``). ``properties`` parsed as upstream.

    A record read by the store's usual path (V1, IPv4 hosts) has been checked whole (framing, CRC,
    torn end) but decodes ``properties``, ``msg_id``, ``born_host``, ``store_host`` and
    ``tags_code`` on first read: a consumer that wants only the body does not pay for them (what
    the store's pull path spends most of its time on otherwise). Their values are the same either
    way; the fields are plain attributes to the reader (and assignable), as ``__init__`` takes them."""

    __slots__ = ("phy_offset", "store_size", "topic", "queue_id", "queue_offset", "flag", "sys_flag", "body_crc",
                 "born_timestamp", "store_timestamp", "reconsume_times", "prepared_transaction_offset", "body",
                 "magic", "_born_host", "_store_host", "_properties", "_msg_id", "_tags_code", "_lazy")
    __match_args__ = _RECORD_FIELDS

    def __init__(self, phy_offset: int, store_size: int, topic: str, queue_id: int, queue_offset: int, flag: int,
                 sys_flag: int, body_crc: int, born_timestamp: int, born_host: str, store_timestamp: int,
                 store_host: str, reconsume_times: int, prepared_transaction_offset: int, body: bytes,
                 properties: dict[str, str], msg_id: str, magic: int = 0, tags_code: int = 0) -> None:
        self.phy_offset = phy_offset
        self.store_size = store_size
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.flag = flag
        self.sys_flag = sys_flag
        self.body_crc = body_crc
        self.born_timestamp = born_timestamp
        self._born_host = born_host
        self.store_timestamp = store_timestamp
        self._store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body = body
        self._properties = properties
        self._msg_id = msg_id
        self.magic = magic
        self._tags_code = tags_code
        self._lazy = None

    # --- decoded on first read (records of the fast path) ------------------------------------------
    # _lazy = (raw properties bytes, born address, born port, store address, store port), IPv4
    @property
    def properties(self) -> dict[str, str]:
        p = self._properties
        if p is None:
            raw = self._lazy[0]
            p = self._properties = P.parse_properties(raw) if raw else {}
        return p

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value

    @property
    def born_host(self) -> str:
        h = self._born_host
        if h is None:
            h = self._born_host = format_host4(self._lazy[1], self._lazy[2])
        return h

    @born_host.setter
    def born_host(self, value: str) -> None:
        self._born_host = value

    @property
    def store_host(self) -> str:
        h = self._store_host
        if h is None:
            h = self._store_host = format_host4(self._lazy[3], self._lazy[4])
        return h

    @store_host.setter
    def store_host(self, value: str) -> None:
        self._store_host = value

    @property
    def msg_id(self) -> str:
        m = self._msg_id
        if m is None:
            m = self._msg_id = offset_msg_id4(self._lazy[3], self._lazy[4], self.phy_offset)
        return m

    @msg_id.setter
    def msg_id(self, value: str) -> None:
        self._msg_id = value

    @property
    def tags_code(self) -> int:
        t = self._tags_code
        if t is None:  # the TAGS hash; the store sets a delayed SCHEDULE_TOPIC_XXXX record's (delay levels)
            t = self._tags_code = tags_hash(self.properties)
        return t

    @tags_code.setter
    def tags_code(self, value: int) -> None:
        self._tags_code = value

    # --- value semantics, as the dataclass this was ------------------------------------------------
    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in _RECORD_FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # mutable, as the dataclass (eq without frozen) was

    def __repr__(self) -> str:
        return "MessageRecord(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _RECORD_FIELDS) + ")"

    def __getstate__(self) -> dict:
        return {f: getattr(self, f) for f in _RECORD_FIELDS}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def as_dict(self) -> dict:
        """Every field by name (what ``dataclasses.asdict`` gave)."""
        return {f: getattr(self, f) for f in _RECORD_FIELDS}

    @property
    def tags(self) -> str | None:
        return self.properties.get(P.TAGS) or None

    @property
    def keys(self) -> list[str]:
        return P.split_keys(self.properties.get(P.KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(P.UNIQ_KEY)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & 0xC

    @property
    def compression(self) -> str | None:
        """``"zlib"``, ``"lz4"``, ``"zstd"`` when the stored body is compressed (sysFlag bits 0, 8-10)."""
        return compression_of(self.sys_flag)

    @property
    def decoded_body(self) -> bytes:
        """The producer's bytes: ``body`` decompressed when its sysFlag says so (``body`` stays the
        stored bytes, what BODYCRC covers and what replay writes). A body that does not decompress
        raises :class:`~rmqstore.format.compression.CompressionError` (a ``CorruptRecordError``)."""
        return decompress(self.body, self.sys_flag)


_new_record = MessageRecord.__new__


#: the order of the fields in a ``FIXED_V4`` tuple, as :func:`lazy_v1_record` unpacks them
_V4_ORDER = ("total", "magic", "body_crc", "queue_id", "flag", "queue_offset", "phy_offset", "sys_flag",
             "born_timestamp", "born_addr", "born_port", "store_timestamp", "store_addr", "store_port",
             "reconsume_times", "prepared_transaction_offset", "body_len")
assert _V4_ORDER == tuple(V4.formats)


def lazy_v1_record(fixed: tuple, topic: str, body: bytes, raw_props: bytes) -> MessageRecord:
    """A checked V1/IPv4 record from its fixed fields (a ``FIXED_V4`` tuple), topic, body and raw
    properties; its properties, hosts, msgId and ``tags_code`` are decoded on first read."""
    (total, magic, body_crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts, born_a, born_p, store_ts,
     store_a, store_p, reconsume, prepared, _) = fixed
    r = _new_record(MessageRecord)
    r.phy_offset = phy
    r.store_size = total
    r.topic = topic
    r.queue_id = queue_id
    r.queue_offset = queue_offset
    r.flag = flag
    r.sys_flag = sys_flag
    r.body_crc = body_crc
    r.born_timestamp = born_ts
    r.store_timestamp = store_ts
    r.reconsume_times = reconsume
    r.prepared_transaction_offset = prepared
    r.body = body
    r.magic = magic
    r._tags_code = r._properties = r._born_host = r._store_host = r._msg_id = None
    r._lazy = (raw_props, born_a, born_p, store_a, store_p)
    return r


def tags_hash(props: Mapping[str, str]) -> int:
    """tagsCode of a record that is not a delayed SCHEDULE_TOPIC_XXXX one: the Java hash of TAGS."""
    tags = props.get(P.TAGS)
    return java_hash_cached(tags) if tags else 0


def tags_code_of(topic: str, props: Mapping[str, str], store_timestamp: int, delay_levels_ms: Sequence[int]) -> int:
    """CQ tagsCode (FORMAT.md §4.1)."""
    if topic == SCHEDULE_TOPIC:
        d = props.get(P.DELAY)
        if d is not None:
            try:
                level = parse_int(d)  # Java's Integer.parseInt, as the broker's dispatch does
            except ValueError:
                level = 0
            level = min(level, len(delay_levels_ms))
            if level > 0:
                return store_timestamp + delay_levels_ms[level - 1]
    return tags_hash(props)
