"""The records and receipt handles of pop-style consumption (:mod:`rmqstore.broker.pop`): a receive's
checkpoint (``ck`` records in the revive topic, RocketMQ's ``PopCheckPoint`` field names), a message
handed out, the request of a receive, and the receipt handle's layout."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..types import MessageRecord
from .metadata import RETRY_PREFIX

CK_TAG, ACK_TAG = "ck", "ack"
NORMAL_TOPIC, RETRY_TOPIC = "0", "1"


class PopError(Exception):
    """A request refused; ``kind`` is one of ``invalid_handle``, ``expired``, ``not_found``, ``bad_request``."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def retry_topic(group: str, topic: str) -> str:
    """The pop retry topic of a group and topic (``KeyBuilder.buildPopRetryTopicV1``)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


@dataclass(slots=True)
class Checkpoint:
    group: str
    topic: str          # the queue's topic: the real topic or the pop retry topic
    origin: str         # the topic the client asked for
    queue_id: int
    start: int
    pop_time: int
    invisible_ms: int
    offsets: list[int]
    reconsume: list[int]
    fifo: bool
    renewed: bool = False  # written by a change of invisible time (not by a receive)
    position: int | None = None  # the checkpoint's offset in the revive queue (None: not written yet)
    acked: set[int] = field(default_factory=set)
    #: the client whose receive asked for auto-renew (kept in memory only: after a restart the
    #: message is redelivered when its invisible time ends)
    renew_client: str | None = None

    @property
    def key(self) -> tuple:
        return (self.group, self.topic, self.queue_id, self.start, self.pop_time)

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms

    def open_offsets(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]

    def body(self, broker_name: str) -> bytes:
        return json.dumps({"so": self.start, "pt": self.pop_time, "it": self.invisible_ms, "n": len(self.offsets),
                           "q": self.queue_id, "t": self.topic, "c": self.group, "o": self.origin,
                           "d": [o - self.start for o in self.offsets], "rt": self.reconsume, "f": self.fifo, "r": self.renewed,
                           "bn": broker_name}, separators=(",", ":")).encode()

    @classmethod
    def from_body(cls, body: bytes, position: int) -> "Checkpoint":
        d = json.loads(body)
        start = int(d["so"])
        return cls(group=d["c"], topic=d["t"], origin=d.get("o", d["t"]), queue_id=int(d["q"]), start=start,
                   pop_time=int(d["pt"]), invisible_ms=int(d["it"]), offsets=[start + int(x) for x in d["d"]],
                   reconsume=[int(x) for x in d["rt"]], fifo=bool(d.get("f")), renewed=bool(d.get("r")), position=position)


@dataclass(slots=True)
class Popped:
    """A received message: the record, its receipt handle and delivery attempt."""

    record: MessageRecord
    topic: str  # the topic the client asked for
    handle: str
    attempt: int
    invisible_ms: int


def encode_handle(ck: Checkpoint, offset: int, phy: int, broker_name: str) -> str:
    kind = RETRY_TOPIC if ck.topic != ck.origin else NORMAL_TOPIC
    return (f"{ck.start} {ck.pop_time} {ck.invisible_ms} 0 {kind} {broker_name} {ck.queue_id} {offset} {phy}")


def decode_handle(handle: str) -> tuple[int, int, int, str, int, int]:
    """(start, pop time, invisible ms, topic type, queue id, offset); PopError when malformed."""
    parts = handle.split(" ")
    if len(parts) < 8:
        raise PopError("invalid_handle", f"receipt handle is invalid: {len(parts)} fields, expected 8 or 9")
    try:
        start, pop_time, invisible = int(parts[0]), int(parts[1]), int(parts[2])
        kind, qid, offset = parts[4], int(parts[6]), int(parts[7])
    except ValueError:
        raise PopError("invalid_handle", "receipt handle is invalid: a number field is not a number") from None
    if kind not in (NORMAL_TOPIC, RETRY_TOPIC):
        raise PopError("invalid_handle", f"receipt handle is invalid: topic type {kind!r}")
    return start, pop_time, invisible, kind, qid, offset


@dataclass(frozen=True, slots=True)
class PopRequest:
    """A receive: up to ``batch`` messages of ``topic`` (its queues ``queue_ids``, then the group's
    pop retry topic) for ``group``, invisible for ``invisible_ms``; a message already delivered
    ``max_attempts`` times goes to the dead-letter topic instead. ``renew_client``: the client whose
    receive asked for auto-renew."""

    group: str
    topic: str
    queue_ids: list[int]
    batch: int
    invisible_ms: int
    fifo: bool
    subscription: str | None
    max_attempts: int
    renew_client: str | None = None
