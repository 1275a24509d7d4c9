"""Who is connected: producer and consumer groups from heartbeats (``ProducerManager``,
``ConsumerManager``), and the queue locks of orderly consumers (``RebalanceLockManager``)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

#: upstream's ``rocketmq.broker.rebalance.lockMaxLiveTime`` default
LOCK_MAX_LIVE_MS = 60_000


@dataclass
class ConsumerGroup:
    name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    #: connection -> last heartbeat (monotonic s)
    channels: dict = field(default_factory=dict)
    #: topic -> SubscriptionData as the client sent it (JSON object)
    subscriptions: dict[str, dict] = field(default_factory=dict)


class ClientManager:
    """Groups and their connections, from HEART_BEAT and UNREGISTER_CLIENT."""

    def __init__(self) -> None:
        self.consumers: dict[str, ConsumerGroup] = {}
        self.producers: dict[str, dict] = {}

    def register_consumer(self, conn, data: dict) -> bool:
        """Record a consumer's heartbeat; True when the group's members changed."""
        name = str(data.get("groupName") or "")
        group = self.consumers.get(name)
        if group is None:
            group = self.consumers[name] = ConsumerGroup(name)
        group.consume_type = str(data.get("consumeType") or group.consume_type)
        group.message_model = str(data.get("messageModel") or group.message_model)
        group.consume_from_where = str(data.get("consumeFromWhere") or group.consume_from_where)
        subs = {}
        for sub in data.get("subscriptionDataSet") or []:
            if isinstance(sub, dict) and sub.get("topic"):
                subs[str(sub["topic"])] = sub
        group.subscriptions.update(subs)
        new = conn not in group.channels
        group.channels[conn] = time.monotonic()
        return new

    def register_producer(self, conn, group: str) -> None:
        self.producers.setdefault(group, {})[conn] = time.monotonic()

    def unregister(self, conn, producer_group: str | None, consumer_group: str | None) -> bool:
        """Remove one client's registration; True when a consumer group's members changed."""
        if producer_group and producer_group in self.producers:
            self.producers[producer_group].pop(conn, None)
        if consumer_group and consumer_group in self.consumers:
            group = self.consumers[consumer_group]
            if group.channels.pop(conn, None) is not None:
                if not group.channels:
                    del self.consumers[consumer_group]
                return True
        return False

    def remove_connection(self, conn) -> list[str]:
        """Forget a closed connection; the consumer groups whose members changed."""
        for chans in self.producers.values():
            chans.pop(conn, None)
        changed = []
        for name, group in list(self.consumers.items()):
            if group.channels.pop(conn, None) is not None:
                changed.append(name)
                if not group.channels:
                    del self.consumers[name]
        return changed

    def expire(self, max_idle_s: float) -> list:
        """Connections silent for longer than ``max_idle_s`` (upstream closes them)."""
        now = time.monotonic()
        stale = set()
        for chans in list(self.producers.values()) + [g.channels for g in self.consumers.values()]:
            stale.update(c for c, t in chans.items() if now - t > max_idle_s)
        return list(stale)

    def consumer_ids(self, group: str) -> list[str]:
        g = self.consumers.get(group)
        return sorted(c.client_id for c in g.channels if c.client_id) if g else []

    def producer_connections(self, group: str) -> list:
        return [c for c in self.producers.get(group, {}) if not c.closed]

    def groups_of_topic(self, topic: str) -> set[str]:
        return {name for name, g in self.consumers.items() if topic in g.subscriptions}


class RebalanceLocks:
    """Queue locks of orderly consumers: one client per (group, queue), expiring after 60 s."""

    def __init__(self, max_live_ms: int = LOCK_MAX_LIVE_MS):
        self.max_live_s = max_live_ms / 1000
        self._locks: dict[str, dict[tuple, tuple[str, float]]] = {}

    def _mq_key(self, mq: dict) -> tuple:
        return str(mq.get("topic")), str(mq.get("brokerName")), int(mq.get("queueId", 0))

    def try_lock(self, group: str, mqs: list[dict], client_id: str) -> list[dict]:
        now = time.monotonic()
        table = self._locks.setdefault(group, {})
        locked = []
        for mq in mqs:
            key = self._mq_key(mq)
            owner = table.get(key)
            if owner is None or owner[0] == client_id or now - owner[1] > self.max_live_s:
                table[key] = (client_id, now)
                locked.append(mq)
        return locked

    def unlock(self, group: str, mqs: list[dict], client_id: str) -> None:
        table = self._locks.get(group, {})
        for mq in mqs:
            key = self._mq_key(mq)
            if table.get(key, ("",))[0] == client_id:
                del table[key]

    def all_expired(self, group: str) -> bool:
        now = time.monotonic()
        return all(now - t > self.max_live_s for _, t in self._locks.get(group, {}).values())
