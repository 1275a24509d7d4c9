"""Value types of the public API: messages, stored records, statuses and results."""
from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from .format import properties as P
from .format.compression import compression_of, decompress
from .format.javalang import parse_int
from .format.hashes import java_hash_cached
from .format.msgid import UniqKeyGenerator, format_host4, offset_msg_id4

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


class PutMessageStatus(enum.Enum):
    """Mirrors ``org.apache.rocketmq.store.PutMessageStatus``."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    PUT_TO_REMOTE_BROKER_FAIL = "PUT_TO_REMOTE_BROKER_FAIL"
    LMQ_CONSUME_QUEUE_NUM_EXCEEDED = "LMQ_CONSUME_QUEUE_NUM_EXCEEDED"
    WHEEL_TIMER_FLOW_CONTROL = "WHEEL_TIMER_FLOW_CONTROL"
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"


class GetMessageStatus(enum.Enum):
    """Mirrors ``org.apache.rocketmq.store.GetMessageStatus``."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_RESET = "OFFSET_RESET"


_UNIQ = UniqKeyGenerator()
_uniq_lock = threading.Lock()


@dataclass(slots=True)
class Message:
    """A message to store (``MessageExtBrokerInner``). Every stored field can be given for replay.

    ``properties`` is a mapping or a sequence of ``(name, value)`` pairs, written in that order;
    ``put_message`` adds no property. ``None`` for ``store_timestamp``/``store_host`` lets the store
    fill them; ``None`` for ``born_timestamp`` means the store time, for ``born_host`` 127.0.0.1:0.
    """

    topic: str
    body: bytes = b""
    queue_id: int = 0
    flag: int = 0
    sys_flag: int = 0
    properties: Mapping[str, object] | Sequence[tuple[str, object]] | None = None
    born_timestamp: int | None = None
    born_host: str | None = None
    store_host: str | None = None
    store_timestamp: int | None = None
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    def __post_init__(self) -> None:
        """Input is checked at the door: wrong types raise ``TypeError``, property names or values
        that hold the ``\x01``/``\x02`` separators (they would corrupt the stored properties)
        raise ``ValueError``. A ``bytearray`` or ``memoryview`` body is kept as ``bytes``."""
        if type(self.topic) is not str:
            raise TypeError(f"topic must be a str, got {type(self.topic).__name__}")
        if type(self.body) is not bytes:
            self.body = _body_bytes(self.body)
        if (type(self.queue_id) is not int or type(self.flag) is not int or type(self.sys_flag) is not int
                or type(self.reconsume_times) is not int or type(self.prepared_transaction_offset) is not int):
            for name in _INT_FIELDS:
                setattr(self, name, _as_int(name, getattr(self, name)))
        if self.properties:
            check_properties(self.properties)

    @classmethod
    def create(cls, topic: str, body: bytes, *, tags: str | None = None, keys: str | Iterable[str] | None = None,
               queue_id: int = 0, properties: Mapping[str, object] | None = None, flag: int = 0,
               born_host: str = "127.0.0.1:0", born_timestamp: int | None = None,
               uniq_key: str | None = None) -> "Message":
        """Like a RocketMQ producer: adds TAGS, KEYS (space-joined) and a new UNIQ_KEY.

        ``keys`` is one key or an iterable of keys; a key holding a space is refused with
        ``ValueError`` (RocketMQ stores KEYS space-joined and splits it on spaces, so such a key
        would silently become two)."""
        props: dict[str, object] = {}
        if tags:
            if type(tags) is not str:
                raise TypeError(f"tags must be a str, got {type(tags).__name__}")
            props[P.TAGS] = tags
        if keys:
            props[P.KEYS] = _join_keys(keys)
        props[P.UNIQ_KEY] = uniq_key or _UNIQ.new()
        if properties:
            props.update(properties)
        return cls(topic=topic, body=body, queue_id=queue_id, flag=flag, properties=props,
                   born_timestamp=born_timestamp, born_host=born_host)

    def encoded_properties(self) -> bytes:
        return P.encode_properties(self.properties)


_INT_FIELDS = ("queue_id", "flag", "sys_flag", "reconsume_times", "prepared_transaction_offset")


def _as_int(name: str, value: object) -> int:
    """An integer field: ``int`` or any integer type (numpy's), never ``bool``, ``float`` or ``str``."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    return value.__index__()


def _body_bytes(body: object) -> bytes:
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    hint = " (encode it first, e.g. text.encode())" if isinstance(body, str) else ""
    raise TypeError(f"body must be bytes, bytearray or memoryview, got {type(body).__name__}{hint}")


def _check_text(what: str, text: str) -> None:
    if "\x01" in text or "\x02" in text:
        raise ValueError(f"{what} {text!r} contains a property separator (\\x01 or \\x02), "
                         "which would corrupt the stored properties")


def check_properties(props: Mapping[str, object] | Sequence[tuple[str, object]]) -> None:
    """``TypeError`` unless names are non-empty ``str``; ``ValueError`` when a name or a value (as
    it would be written: ``str(value)``) holds ``\x01`` or ``\x02``."""
    if type(props) is dict and "" not in props:  # the usual case, in C: every name and value a str
        try:
            text = "".join(props) + "".join(props.values())
        except TypeError:
            pass
        else:
            if "\x01" not in text and "\x02" not in text:
                return
    try:
        items = props.items() if hasattr(props, "items") else props
        pairs = [(k, v) for k, v in items]
    except (TypeError, ValueError) as e:
        raise TypeError(f"properties must be a mapping or (name, value) pairs, got {type(props).__name__}") from e
    for k, v in pairs:
        if type(k) is not str:
            raise TypeError(f"property names must be str, got {type(k).__name__} ({k!r})")
        if not k:
            raise ValueError("property names must not be empty")
        _check_text("property name", k)
        if v is not None:
            _check_text(f"value of property {k!r}", v if type(v) is str else format(v, ""))


def _join_keys(keys: str | Iterable[str]) -> str:
    parts = [keys] if type(keys) is str else list(keys)
    try:
        joined = P.KEY_SEPARATOR.join(parts)
    except TypeError:
        bad = next(k for k in parts if not isinstance(k, str))
        raise TypeError(f"keys must be str, got {type(bad).__name__} ({bad!r})") from None
    if joined.count(P.KEY_SEPARATOR) != len(parts) - 1:
        bad = next(k for k in parts if P.KEY_SEPARATOR in k)
        raise ValueError(f"key {bad!r} contains a space: RocketMQ splits KEYS on spaces, so it would be stored as "
                         "several keys; pass the keys as a list of strings without spaces")
    return joined


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
        if t is None:  # never a SCHEDULE_TOPIC_XXXX record (its code needs the delay levels: eager)
            tags = self.properties.get(P.TAGS)
            t = self._tags_code = java_hash_cached(tags) if tags else 0
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


def lazy_v1_record(phy: int, total: int, topic: str, queue_id: int, queue_offset: int, flag: int, sys_flag: int,
                   body_crc: int, born_ts: int, store_ts: int, reconsume: int, prepared: int, body: bytes,
                   magic: int, tags_code: int | None, lazy: tuple) -> MessageRecord:
    """A checked V1/IPv4 record whose properties, hosts, msgId (and ``tags_code`` when None) are
    decoded on first read from ``lazy`` = (raw properties, born addr, born port, store addr, store port)."""
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
    r._tags_code = tags_code
    r._properties = r._born_host = r._store_host = r._msg_id = None
    r._lazy = lazy
    return r


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
    tags = props.get(P.TAGS)
    return java_hash_cached(tags) if tags else 0


class PutMessageResult:
    """``PutMessageResult`` + ``AppendMessageResult``. For batches ``msg_id`` joins ids with ','.

    ``msg_id`` may be given as a callable that returns it: it is then computed on first read (as
    upstream's ``AppendMessageResult`` takes a ``msgIdSupplier``), so a batch producer that never
    reads the ids does not pay for formatting them."""

    __slots__ = ("status", "_msg_id", "phy_offset", "wrote_bytes", "queue_offset", "store_timestamp", "msg_num",
                 "error")
    _FIELDS = ("status", "msg_id", "phy_offset", "wrote_bytes", "queue_offset", "store_timestamp", "msg_num", "error")

    def __init__(self, status: PutMessageStatus, msg_id: str | Callable[[], str] | None = None, phy_offset: int = -1,
                 wrote_bytes: int = 0, queue_offset: int = -1, store_timestamp: int = 0, msg_num: int = 0,
                 error: str | None = None) -> None:
        self.status = status
        self._msg_id = msg_id
        self.phy_offset = phy_offset
        self.wrote_bytes = wrote_bytes
        self.queue_offset = queue_offset
        self.store_timestamp = store_timestamp
        self.msg_num = msg_num
        self.error = error

    @property
    def msg_id(self) -> str | None:
        m = self._msg_id
        if callable(m):
            m = self._msg_id = m()
        return m

    @msg_id.setter
    def msg_id(self, value: str | None) -> None:
        self._msg_id = value

    def _astuple(self) -> tuple:
        return tuple(getattr(self, f) for f in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._astuple() == other._astuple()

    __hash__ = None  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return f"PutMessageResult({', '.join(f'{f}={getattr(self, f)!r}' for f in self._FIELDS)})"

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageRecord] = field(default_factory=list)
    filtered: int = 0
    #: damaged messages the pull stepped over (never served; ``next_begin_offset`` is past them)
    skipped: list["SkippedMessage"] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SkippedMessage:
    """A queue unit whose message a pull could not serve: the record fails its checks, or the unit
    does not point at its record. ``path``/``offset`` locate the damage (commitlog segment or
    consume-queue file), ``reason`` says what failed."""

    queue_offset: int
    phy_offset: int
    path: str | None
    offset: int | None
    reason: str


@dataclass(slots=True)
class QueryMessageResult:
    """Answer of ``query_message``: the records, whether ``max_num`` cut the result, and the index
    file's last update (``indexLastUpdateTimestamp``/``PhyOffset`` upstream)."""

    messages: list[MessageRecord]
    truncated: bool = False
    index_last_update_timestamp: int = 0
    index_last_update_phy_offset: int = 0
