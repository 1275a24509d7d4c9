"""The broker's state files under ``<store>/config/``, in RocketMQ's formats:

- ``topics.json`` (``TopicConfigManager``): ``{"topicConfigTable": {name: TopicConfig}, "dataVersion"}``
- ``subscriptionGroup.json`` (``SubscriptionGroupManager``): ``{"subscriptionGroupTable": {...}}``
- ``delayOffset.json`` (``ScheduleMessageService``): ``{"offsetTable": {level: offset}}``

(``consumerOffset.json`` is the store's :class:`~rmqstore.engine.consumer_offsets.ConsumerOffsetManager`.)
Entries are kept as the JSON objects RocketMQ writes, unknown fields included, so a file written by a
Java broker comes back with everything it held. Files are read as fastjson writes them (unquoted
integer keys too) with upstream's fallback to ``.bak``, and written atomically (temporary file, fsync,
rename, the old file kept as ``.bak``). A read-only broker never writes them.
"""
from __future__ import annotations

import json
import logging
import re
import threading
import time

from ..engine.consumer_offsets import parse_broker_json
from ..errors import CorruptRecordError
from ..format.javalang import parse_long
from ..io.mapped_file import atomic_write_text
from ..types import SCHEDULE_TOPIC

log = logging.getLogger(__name__)

PERM_INHERIT, PERM_WRITE, PERM_READ = 1, 2, 4
AUTO_CREATE_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
#: topics clients may not send to (``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``)
NOT_ALLOWED_SEND = frozenset({SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, "TRANS_CHECK_MAX_TIME_TOPIC",
                              "RMQ_SYS_SELF_TEST_TOPIC", "RMQ_SYS_BENCHMARK_TOPIC", "RMQ_SYS_TRACE_TOPIC"})


_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+").fullmatch


def validate_topic(topic: str) -> str | None:
    """``TopicValidator.validateTopic``: None when valid, else the remark upstream answers."""
    if not topic:
        return "The specified topic is blank."
    if len(topic) > 127:
        return "The specified topic is longer than topic max length."
    if not _TOPIC_CHARS(topic):
        return f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return None


class JsonStateFile:
    """One of the broker's JSON files: loaded with the ``.bak`` fallback, persisted atomically."""

    def __init__(self, path: str | None, *, read_only: bool):
        self.path = path
        self.read_only = read_only
        self.lock = threading.RLock()
        self.counter = 0
        #: the ``dataVersion`` timestamp of the last load or write (stable between changes, so that a
        #: slave or a name server comparing versions sees a change only when there was one)
        self.timestamp = int(time.time() * 1000)

    def load(self) -> dict | None:
        if self.path is None:
            return None
        error: Exception | None = None
        for p in (self.path, self.path + ".bak"):
            try:
                with open(p, encoding="utf-8") as fh:
                    text = fh.read()
            except FileNotFoundError:
                continue
            if not text.strip():
                continue
            try:
                doc = parse_broker_json(text)
                if not isinstance(doc, dict):
                    raise ValueError("not a JSON object")
            except ValueError as e:
                error = error or CorruptRecordError(f"cannot parse broker state file: {e}", path=p)
                log.error("%s", error)
                continue
            version = doc.get("dataVersion")
            if isinstance(version, dict) and isinstance(version.get("counter"), int):
                self.counter = version["counter"]
                if isinstance(version.get("timestamp"), int):
                    self.timestamp = version["timestamp"]
            return doc
        if error is not None:
            raise error
        return None

    def data_version(self) -> dict:
        return {"counter": self.counter, "stateVersion": 0, "timestamp": self.timestamp}

    def write(self, doc: dict) -> None:
        if self.path is None or self.read_only:
            return
        self.counter += 1
        self.timestamp = int(time.time() * 1000)
        doc = dict(doc)
        doc["dataVersion"] = self.data_version()
        atomic_write_text(self.path, json.dumps(doc, indent=4, sort_keys=True) + "\n", keep_bak=True)


#: ``TopicAttributes.ALL``: name -> (changeable after creation, the values allowed; None: a long from -1)
TOPIC_ATTRIBUTES = {
    "queue.type": (False, frozenset({"BatchCQ", "SimpleCQ"})),
    "cleanup.policy": (False, frozenset({"DELETE", "COMPACTION"})),
    "message.type": (True, frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"})),
    "reserve.time": (True, None),
}


class MixedTypeRefused(ValueError):
    """A topic may not be made ``message.type=MIXED`` (``enableMixedMessageType`` is false)."""


def parse_attributes(text: str | None) -> dict[str, str]:
    """``AttributeParser.parseToMap``: ``+key=value,-key,...`` as given (signs kept); ValueError with
    upstream's message when malformed."""
    out: dict[str, str] = {}
    for kv in text.split(",") if text else ():
        if "=" in kv:
            parts = kv.split("=")
            while len(parts) > 1 and parts[-1] == "":  # (Java's split drops trailing empty strings)
                parts.pop()
            if len(parts) < 2:
                raise ValueError(f"Index 1 out of bounds for length {len(parts)}")
            key, value = parts[0], parts[1]
            if "+" not in key:
                raise ValueError(f"add/alter attribute format is wrong: {key}")
        else:
            key, value = kv, ""
            if "-" not in key:
                raise ValueError(f"delete attribute format is wrong: {key}")
        if key in out:
            raise ValueError(f"key duplication: {key}")
        out[key] = value
    return out


def alter_attributes(create: bool, current: dict, new: dict[str, str]) -> dict[str, str]:
    """``AttributeUtil.alterCurrentAttributes``: a topic's attributes after the modification ``new``
    (from :func:`parse_attributes`); a new topic takes only ``+`` keys. ValueError with upstream's message."""
    final, seen, deletes = dict(current), set(), []
    for key, value in new.items():
        real = key[1:]
        if not real or "+" in real or "-" in real:
            raise ValueError("kv string format wrong.")
        if real in seen:
            raise ValueError(f"alter duplication key. key: {real}")
        seen.add(real)
        if create and not key.startswith("+"):
            raise ValueError(f"only add attribute is supported while creating topic. key: {real}")
        if not create and not key.startswith(("+", "-")):
            raise ValueError(f"wrong format key: {real}")
        if key.startswith("-") and not create:
            if real not in current:
                raise ValueError(f"attempt to delete a nonexistent key: {real}")
            deletes.append(real)
        _check_attribute(real, value, init=create, delete=key.startswith("-"))
        if key.startswith("+"):
            final[real] = value
    for real in deletes:
        final.pop(real, None)
    return final


def _check_attribute(name: str, value: str, *, init: bool, delete: bool) -> None:
    """``AttributeUtil.validateAlter`` of one attribute (``Attribute.verify``)."""
    known = TOPIC_ATTRIBUTES.get(name)
    if known is None:
        raise ValueError(f"unsupported key: {name}")
    changeable, allowed = known
    if not init and not changeable:
        raise ValueError(f"attempt to update an unchangeable attribute. key: {name}")
    if delete:
        return
    if allowed is not None:
        if value not in allowed:
            raise ValueError(f"value is not in set: [{', '.join(sorted(allowed))}]")
        return
    try:
        number = parse_long(value)
    except ValueError as e:
        raise ValueError(str(e)) from None
    if number < -1:
        raise ValueError(f"value is not in range(-1, {(1 << 63) - 1})")


def topic_config(name: str, queues: int, perm: int = PERM_READ | PERM_WRITE, sys_flag: int = 0) -> dict:
    return {"topicName": name, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": sys_flag, "order": False, "attributes": {}}


class TopicConfigManager:
    """Topic configs (``topics.json``), with the system topics upstream creates at start."""

    def __init__(self, path: str | None, *, read_only: bool, broker_name: str, cluster_name: str,
                 auto_create: bool, default_queue_nums: int):
        self.file = JsonStateFile(path, read_only=read_only)
        doc = self.file.load() or {}
        table = doc.get("topicConfigTable") or {}
        self.table: dict[str, dict] = {str(k): dict(v) for k, v in table.items() if isinstance(v, dict)}
        system = [topic_config(SELF_TEST_TOPIC, 1), topic_config(SCHEDULE_TOPIC, 18),
                  topic_config(OFFSET_MOVED_EVENT, 1), topic_config(cluster_name, 16, PERM_READ | PERM_WRITE),
                  topic_config(broker_name, 1, PERM_READ | PERM_WRITE),
                  # RocketMQ 5's timer topic and the pop revive topic (one revive queue here; upstream 8)
                  topic_config(TIMER_TOPIC, 1), topic_config(REVIVE_TOPIC_PREFIX + cluster_name, 1)]
        if auto_create:
            system.append(topic_config(AUTO_CREATE_TOPIC, default_queue_nums, PERM_READ | PERM_WRITE | PERM_INHERIT))
        changed = False
        for cfg in system:
            if cfg["topicName"] not in self.table:
                self.table[cfg["topicName"]] = cfg
                changed = True
        if changed and not read_only:
            self.persist()

    def adopt(self, store_topics: dict[str, list[int]]) -> None:
        """Topics the store holds messages for but no config names (a store written through the
        embedded API, or a copy without ``config/``): each gets a read-write config with as many
        queues as its highest queue id + 1, so that clients can route to it."""
        with self.file.lock:
            added = [t for t in store_topics if t not in self.table and t and validate_topic(t) is None]
            for t in added:
                self.table[t] = topic_config(t, max(store_topics[t]) + 1)
            if added:
                log.info("topics found in the store without a config: %s", ", ".join(sorted(added)[:20]))
                self.persist()

    def get(self, topic: str) -> dict | None:
        return self.table.get(topic)

    def put(self, cfg: dict) -> None:
        with self.file.lock:
            self.table[cfg["topicName"]] = cfg
            self.persist()

    def update(self, cfg: dict, attributes: str | None, *, mixed_allowed: bool) -> dict:
        """Create or replace a topic's config as ``UPDATE_AND_CREATE_TOPIC`` does: its attributes are
        the current ones altered by ``attributes`` (``+key=value,-key``: :func:`parse_attributes`,
        :func:`alter_attributes`); :class:`MixedTypeRefused` for ``+message.type=MIXED`` unless
        ``mixed_allowed``, ValueError for another refusal (nothing is changed). Returns ``cfg``."""
        change = parse_attributes(attributes)
        if not mixed_allowed and change.get("+message.type") == "MIXED":
            raise MixedTypeRefused("MIXED message type is not supported.")
        with self.file.lock:
            old = self.table.get(cfg["topicName"])
            cfg["attributes"] = alter_attributes(old is None, (old or {}).get("attributes") or {}, change)
            self.put(cfg)
        return cfg

    def create_if_absent(self, topic: str, queues: int, perm: int = PERM_READ | PERM_WRITE, sys_flag: int = 0
                         ) -> dict:
        with self.file.lock:
            cfg = self.table.get(topic)
            if cfg is None:
                cfg = topic_config(topic, queues, perm, sys_flag)
                self.put(cfg)
                log.info("created topic %s (%d queues, perm %d)", topic, queues, perm)
            return cfg

    def persist(self) -> None:
        with self.file.lock:
            self.file.write({"topicConfigTable": self.table})

    def encode(self) -> dict:
        """``TopicConfigSerializeWrapper`` as GET_ALL_TOPIC_CONFIG answers it."""
        return {"topicConfigTable": self.table, "dataVersion": self.file.data_version()}


def subscription_group(name: str) -> dict:
    return {"groupName": name, "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
            "consumeMessageOrderly": False, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True, "groupSysFlag": 0,
            "consumeTimeoutMinute": 15, "attributes": {}}


class SubscriptionGroupManager:
    """Consumer group configs (``subscriptionGroup.json``)."""

    def __init__(self, path: str | None, *, read_only: bool, auto_create: bool):
        self.file = JsonStateFile(path, read_only=read_only)
        self.auto_create = auto_create
        doc = self.file.load() or {}
        table = doc.get("subscriptionGroupTable") or {}
        self.table: dict[str, dict] = {str(k): dict(v) for k, v in table.items() if isinstance(v, dict)}

    def find(self, group: str) -> dict | None:
        """The group's config; created with the defaults when absent and auto-creation is on
        (``findSubscriptionGroupConfig``)."""
        with self.file.lock:
            cfg = self.table.get(group)
            if cfg is None and self.auto_create:
                cfg = self.table[group] = subscription_group(group)
                self.file.write({"subscriptionGroupTable": self.table})
                log.info("created subscription group %s", group)
            return cfg

    def put(self, cfg: dict) -> None:
        """Create or replace a group's config (missing fields get upstream's defaults)."""
        with self.file.lock:
            full = subscription_group(str(cfg["groupName"]))
            full.update(cfg)
            self.table[full["groupName"]] = full
            self.file.write({"subscriptionGroupTable": self.table})

    def encode(self) -> dict:
        return {"subscriptionGroupTable": self.table, "dataVersion": self.file.data_version()}


class DelayOffsets:
    """``delayOffset.json``: per delay level, the next SCHEDULE_TOPIC_XXXX queue offset to deliver."""

    def __init__(self, path: str | None, *, read_only: bool):
        self.file = JsonStateFile(path, read_only=read_only)
        doc = self.file.load() or {}
        table = doc.get("offsetTable") or {}
        self.table: dict[int, int] = {int(k): int(v) for k, v in table.items()}
        self.dirty = False

    def get(self, level: int) -> int:
        return self.table.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        with self.file.lock:
            if self.table.get(level) != offset:
                self.table[level] = offset
                self.dirty = True

    def persist(self) -> None:
        with self.file.lock:
            if self.dirty:
                self.dirty = False
                self.file.write({"offsetTable": {str(k): v for k, v in sorted(self.table.items())}})
