"""The delay service (``ScheduleMessageService``): delivers SCHEDULE_TOPIC_XXXX messages when due.

Queue ``level - 1`` of SCHEDULE_TOPIC_XXXX holds the messages of delay level ``level``; each unit's
tagsCode is its delivery time. When that time has come the message is stored again in its REAL_TOPIC
and REAL_QID with the properties it had (upstream leaves DELAY, REAL_TOPIC and REAL_QID in the stored
properties too), and ``delayOffset.json`` records how far each level got. A message is delivered
at least once: a crash between the put and the offset's write delivers it again, as upstream.
"""
from __future__ import annotations

import asyncio
import logging
import time

from ..types import SCHEDULE_TOPIC
from . import messages as M

log = logging.getLogger("rmqstore.broker")

TICK_S = 0.1
BATCH = 256


class ScheduleService:
    def __init__(self, broker):
        self.broker = broker
        self.delivered = 0

    async def run(self) -> None:
        while True:
            busy = False
            for level in range(1, len(self.broker.delay_levels_ms) + 1):
                try:
                    busy |= self.deliver_due(level)
                except Exception:  # noqa: BLE001 - a failed round is retried on the next tick
                    log.exception("delay level %d: delivery failed, retrying", level)
            await asyncio.sleep(0 if busy else TICK_S)

    def deliver_due(self, level: int, now_ms: int | None = None) -> bool:
        """Deliver up to ``BATCH`` due messages of one level; True when it stopped at the batch size."""
        b = self.broker
        store = b.store
        qid = level - 1
        q = b.delay_offsets.get(level)
        max_q = store.get_max_offset_in_queue(SCHEDULE_TOPIC, qid)
        if q >= max_q:
            return False
        q = max(q, store.get_min_offset_in_queue(SCHEDULE_TOPIC, qid))
        units = store.find_consume_queue(SCHEDULE_TOPIC, qid).iterate_from(q, BATCH)
        if units is None or not len(units):
            return False
        now = int(time.time() * 1000) if now_ms is None else now_ms
        span = b.delay_levels_ms[level - 1]
        done = 0
        for phy, deliver_at in zip(units["phy_offset"].tolist(), units["tags_code"].tolist()):
            if deliver_at > now + span:  # a clock moved back: deliver now (correctDeliverTimestamp)
                deliver_at = now
            if deliver_at > now:
                break
            rec = store.look_message_by_offset(phy)
            if rec is not None:
                props = dict(rec.properties)
                topic, real_qid = props.get(M.REAL_TOPIC), props.get(M.REAL_QID)
                if topic and real_qid is not None:
                    msg = M.copy_of(rec, topic, int(real_qid), props, store_host=b.store_host)
                    result = store.put_message(msg)
                    if not result.ok:
                        log.warning("delay level %d: delivering %s failed (%s): retrying", level, rec.msg_id,
                                    result.status.value)
                        break
                    self.delivered += 1
                    b.schedule_dispatch()
                else:
                    log.error("delay level %d: message at %d has no REAL_TOPIC/REAL_QID: dropped", level, phy)
            done += 1
            b.delay_offsets.set(level, q + done)
        return done == BATCH
