"""Delivery at a timestamp: RocketMQ 5's timer messages (``TIMER_DELIVER_MS``, ``TIMER_DELAY_SEC``,
``TIMER_DELAY_MS``), as sent by the gRPC clients' ``delivery_timestamp`` and by 5.x remoting clients.

Upstream's put path (``HookUtils.transformTimerMessage``) stores such a message in the topic
``rmq_sys_wheel_timer`` with REAL_TOPIC, REAL_QID and TIMER_OUT_MS (the delivery time) and its timer
wheel stores it again in its real topic when due. Here the message goes to the same topic (queue 0)
with the same properties; :class:`TimerService` reads that queue, keeps the messages not yet due in
a heap ordered by time, and delivers each at its time. Progress is ``timerState.json`` beside
``delayOffset.json``: the timer queue offset below which every message was delivered and the
offsets above it delivered already, written every few seconds and at stop (a crash in between
delivers those again: at least once, as upstream's schedule service).
"""
from __future__ import annotations

import asyncio
import heapq
import logging
import os
import time

from ..format import properties as P
from ..format.javalang import parse_long
from ..types import Message
from . import messages as M
from .metadata import PERM_READ, PERM_WRITE, TIMER_TOPIC, JsonStateFile
from ..io import paths

log = logging.getLogger("rmqstore.broker")

TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_OUT_MS = "TIMER_OUT_MS"
#: the longest delay accepted (``timerMaxDelaySec``, 3 days)
MAX_DELAY_MS = 3 * 24 * 3600 * 1000
TICK_S = 0.05
BATCH = 256


class TimerError(ValueError):
    pass


def deliver_time(props: dict[str, str], now_ms: int) -> int | None:
    """When a message with timer properties is due (None: not a timer message); TimerError when the
    value is not a Java long or the delay is longer than upstream's maximum."""
    try:
        if TIMER_DELIVER_MS in props:
            at = parse_long(props[TIMER_DELIVER_MS])
        elif TIMER_DELAY_SEC in props:
            at = now_ms + parse_long(props[TIMER_DELAY_SEC]) * 1000
        elif TIMER_DELAY_MS in props:
            at = now_ms + parse_long(props[TIMER_DELAY_MS])
        else:
            return None
    except ValueError as e:
        raise TimerError(f"timer property: {e}") from None
    if at - now_ms > MAX_DELAY_MS:
        raise TimerError(f"the delay of {at - now_ms} ms is longer than the maximum {MAX_DELAY_MS} ms")
    return at


def timer_message(msg: Message, props: dict[str, str], now_ms: int) -> Message:
    """The message to store: in the timer topic when it is due later, else unchanged."""
    tran = msg.sys_flag & M.TRANSACTION_MASK
    if tran not in (M.TRANSACTION_NOT_TYPE, M.TRANSACTION_COMMIT_TYPE):
        return msg
    at = deliver_time(props, now_ms)
    if at is None or at <= now_ms:
        return msg
    props[M.REAL_TOPIC] = msg.topic
    props[M.REAL_QID] = str(msg.queue_id)
    props[TIMER_OUT_MS] = str(at)
    msg.topic, msg.queue_id = TIMER_TOPIC, 0
    msg.properties = M.java_properties(props)
    return msg


class TimerService:
    def __init__(self, broker):
        self.broker = broker
        path = None if broker.store.path is None else os.path.join(broker.store.path, paths.TIMER_STATE_FILE)
        self.file = JsonStateFile(path, read_only=broker.read_only)
        doc = self.file.load() or {}
        self.done_below = int(doc.get("offset", 0))
        self.delivered_above: set[int] = {int(x) for x in doc.get("delivered", [])}
        self.read_to = self.done_below
        self._heap: list[tuple[int, int, int]] = []  # (deliver ms, timer queue offset, commitlog offset)
        self.delivered = 0
        self._dirty = False

    def _read_new(self) -> None:
        store = self.broker.store
        end = store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        self.read_to = max(self.read_to, store.get_min_offset_in_queue(TIMER_TOPIC, 0))
        while self.read_to < end:
            r = store.get_message("CID_RMQ_SYS_TIMER", TIMER_TOPIC, 0, self.read_to, BATCH, transfer_limits=False)
            for rec in r.messages:
                if rec.queue_offset in self.delivered_above:
                    continue
                try:
                    at = parse_long(rec.properties.get(TIMER_OUT_MS, "0"))
                except ValueError:
                    at = 0
                heapq.heappush(self._heap, (at, rec.queue_offset, rec.phy_offset))
            if r.next_begin_offset <= self.read_to:
                break
            self.read_to = r.next_begin_offset

    def deliver_due(self, now_ms: int | None = None) -> int:
        b = self.broker
        store = b.store
        self._read_new()
        now = int(time.time() * 1000) if now_ms is None else now_ms
        n = 0
        while self._heap and self._heap[0][0] <= now and n < BATCH:
            at, q, phy = heapq.heappop(self._heap)
            rec = store.look_message_by_offset(phy)
            if rec is not None:
                props = dict(rec.properties)
                topic, qid = props.get(M.REAL_TOPIC), props.get(M.REAL_QID)
                if topic and qid is not None:
                    b.topics.create_if_absent(topic, max(1, int(qid) + 1), PERM_READ | PERM_WRITE)
                    result = store.put_message(M.copy_of(rec, topic, int(qid), props, store_host=b.store_host))
                    if not result.ok:
                        log.warning("timer: delivering %s failed (%s): retrying", props.get(P.UNIQ_KEY),
                                    result.status.value)
                        heapq.heappush(self._heap, (at, q, phy))
                        break
                    self.delivered += 1
                    b.schedule_dispatch()
                else:
                    log.error("timer message at %d has no REAL_TOPIC/REAL_QID: dropped", phy)
            self.delivered_above.add(q)
            n += 1
            self._dirty = True
        if self._dirty:
            pending = [q for _, q, _ in self._heap]
            below = min(pending) if pending else self.read_to
            if below > self.done_below:
                self.done_below = below
                self.delivered_above = {q for q in self.delivered_above if q >= below}
        return n

    async def run(self) -> None:
        last = time.monotonic()
        while True:
            try:
                busy = self.deliver_due() >= BATCH
            except Exception:  # noqa: BLE001 - retried on the next tick
                log.exception("timer delivery failed")
                busy = False
            if time.monotonic() - last > 5:
                last = time.monotonic()
                self.persist()
            await asyncio.sleep(0 if busy else TICK_S)

    def persist(self) -> None:
        if self.broker.read_only or not self._dirty:
            return
        self._dirty = False
        self.file.write({"offset": self.done_below, "delivered": sorted(self.delivered_above)})

    def pending(self) -> int:
        return len(self._heap)
