"""Value types of the public API: messages, stored records, statuses and results."""
from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from .format import properties as P
from .format.msgid import UniqKeyGenerator
from .format.record import SCHEDULE_TOPIC, MessageRecord, lazy_v1_record, tags_code_of

__all__ = ["SCHEDULE_TOPIC", "GetMessageResult", "GetMessageStatus", "Message", "MessageRecord", "PutMessageResult",
           "PutMessageStatus", "QueryMessageResult", "SkippedMessage", "check_properties", "lazy_v1_record",
           "tags_code_of"]


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
    elif type(props) is list:  # (name, value) pairs of str, as the broker builds them: also in C
        try:
            names = [k for k, _ in props]
            text = "".join(names) + "".join([v for _, v in props])
        except (TypeError, ValueError):
            pass
        else:
            if "" not in names and "\x01" not in text and "\x02" not in text:
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
