"""What went through the broker: messages and bytes in (per topic and message type, with a size
histogram) and out (per topic and consumer group), and messages sent to a dead-letter queue.

Counted once per put or pull result (a batch counts as one update), in plain dicts of ints: no
metrics library on the hot path and no per-message object. Prometheus reads these at scrape time
(:mod:`rmqstore.broker.http.metrics`); the names and labels it gives them are RocketMQ 5's.
"""
from __future__ import annotations

from bisect import bisect_left

#: ``rocketmq_message_size`` buckets of RocketMQ 5's broker (1 KiB, 4 KiB, 512 KiB, 1, 2, 4 MiB)
SIZE_BUCKETS = (1024.0, 4096.0, 512 * 1024.0, 1024 * 1024.0, 2 * 1024 * 1024.0, 4 * 1024 * 1024.0)
#: ``TopicValidator``'s system topics (and every ``rmq_sys_`` topic)
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
                           "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                           "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC"})
_TX_PREPARED = 0x4  # MessageSysFlag.TRANSACTION_PREPARED_TYPE
#: the properties that make a message FIFO (the sharding key) or delayed (the others)
_TYPED = frozenset({"__SHARDINGKEY", "__STARTDELIVERTIME", "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
                    "TIMER_DELAY_MS"})


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_")


def is_system_group(group: str) -> bool:
    return group.lower().startswith("cid_rmq_sys_")


def is_retry_or_dlq(topic: str) -> bool:
    return topic.startswith("%RETRY%") or topic.startswith("%DLQ%")


def message_type(msg) -> str:
    """``BrokerMetricsManager.getMessageType``: transaction, fifo, delay or normal (one pass over
    the properties: no mapping built per message)."""
    if msg.sys_flag & _TX_PREPARED:
        return "transaction"
    props = msg.properties or ()
    if not isinstance(props, (list, tuple)):  # a mapping
        props = props.items()
    kind = "normal"
    for k, _ in props:
        if k in _TYPED:
            if k == "__SHARDINGKEY":
                return "fifo"
            kind = "delay"
    return kind


class Traffic:
    """Counters the broker updates once per put or pull result."""

    __slots__ = ("inbound", "outbound", "dlq", "puts", "gets")

    def __init__(self) -> None:
        #: (topic, message_type) -> [messages, bytes, bucket counts (len(SIZE_BUCKETS) + 1), size sum, observations]
        self.inbound: dict[tuple[str, str], list[int]] = {}
        #: (topic, consumer_group) -> [messages, bytes]
        self.outbound: dict[tuple[str, str], list[int]] = {}
        #: (consumer_group, original topic) -> messages sent to the group's dead-letter queue
        self.dlq: dict[tuple[str, str], int] = {}
        self.puts = self.gets = 0  # all topics (the console's rates)

    def put(self, msg, count: int, wrote_bytes: int) -> None:
        """A put of ``count`` messages (a batch shares ``msg``'s topic and type) that wrote
        ``wrote_bytes`` to the commit log."""
        key = (msg.topic, message_type(msg))
        row = self.inbound.get(key)
        if row is None:
            row = self.inbound[key] = [0] * (len(SIZE_BUCKETS) + 5)
        row[0] += count
        row[1] += wrote_bytes
        size = wrote_bytes // count if count else 0
        row[2 + bisect_left(SIZE_BUCKETS, size)] += 1
        row[-2] += size
        row[-1] += 1
        self.puts += count

    def out(self, topic: str, group: str, count: int, nbytes: int) -> None:
        """A pull answered with ``count`` messages of ``nbytes``."""
        row = self.outbound.get((topic, group))
        if row is None:
            row = self.outbound[(topic, group)] = [0, 0]
        row[0] += count
        row[1] += nbytes
        self.gets += count

    def to_dlq(self, group: str, topic: str) -> None:
        """A message of ``group`` (from ``topic``) went to the group's dead-letter queue."""
        self.dlq[(group, topic)] = self.dlq.get((group, topic), 0) + 1


__all__ = ["Traffic", "SIZE_BUCKETS", "message_type", "is_system_topic", "is_system_group", "is_retry_or_dlq"]
