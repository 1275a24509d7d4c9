"""Pop-style consumption: receive, ack, change invisible time, redelivery and dead letters, with the
in-flight state kept durably in the store (RocketMQ 5's ``PopMessageProcessor``,
``AckMessageProcessor``, ``ChangeInvisibleTimeProcessor``, ``PopReviveService``).

How the state is kept, and why
------------------------------
A receive (a *pop*) reads messages from the group's offset in a queue, advances that offset at once
(non-FIFO; the same offset a remoting consumer of the group uses) and writes a **checkpoint** record
(tag ``ck``) to the revive topic ``rmq_sys_REVIVE_LOG_<cluster>``, queue 0: group, topic, queue, the
queue offsets handed out, their delivery attempts, the pop time and the invisible time. An ack
writes an **ack** record (tag ``ack``) naming the checkpoint and the offsets. Both are ordinary
records of the commitlog, so they are exactly as durable as the messages themselves (same flush
policy, same recovery), need no file format of their own, and are written before the client is
answered. This is RocketMQ's own design (checkpoint and ack messages in a revive topic); the record
bodies are JSON with RocketMQ's ``PopCheckPoint``/``AckMsg`` field names (``so``, ``pt``, ``it``,
``q``, ``t``, ``c``, ``bn``, ``ao``) plus ``d`` (offset differences) and ``rt`` (reconsume times).

In memory the broker keeps only the checkpoints still open (received, not acked, not yet revived): a
bound of what clients hold, not of the store. When a checkpoint's invisible time has passed, each
offset not acked is *revived*: a non-FIFO message is stored again in the pop retry topic
``%RETRY%<group>_<topic>`` with RECONSUME_TIME + 1 (or in ``%DLQ%<group>`` once it has been delivered
the group's max attempts, ``retryMaxTimes + 1``), and an ack record closes the checkpoint. A FIFO
queue is locked for the group while one of its checkpoints is open; when it expires the group's
offset stays at the first offset not acked, so the same messages are received again, in order, with
the attempt counted up (the next checkpoint records it).

The *revive offset* (the group ``CID_RMQ_SYS_REVIVE_GROUP`` in consumerOffset.json, as upstream) is
the revive queue position below which no checkpoint is open. On start the broker reads the revive
queue from there and rebuilds the open checkpoints: a message received but not acked before a restart
is delivered again after its invisible time, an acked one is not.

A receipt handle has upstream's layout, ``startOffset popTime invisibleTime reviveQueueId topicType
brokerName queueId offset commitLogOffset``; it is only accepted while the checkpoint it names is open
and the offset is not acked (a stale, expired or forged handle is refused).
"""
from __future__ import annotations

import heapq
import json
import logging
import time

from ..format import properties as P
from ..types import GetMessageStatus, Message, MessageRecord
from . import messages as M
from .metadata import DLQ_PREFIX, PERM_READ, PERM_WRITE, RETRY_PREFIX, REVIVE_TOPIC_PREFIX
from .pop_records import (ACK_TAG, CK_TAG, NORMAL_TOPIC, RETRY_TOPIC, Checkpoint, PopError, Popped, PopRequest,
                          decode_handle, encode_handle, retry_topic)

__all__ = ["ACK_TAG", "CK_TAG", "NORMAL_TOPIC", "RETRY_TOPIC", "Checkpoint", "PopError", "PopRequest", "PopService",
           "Popped", "decode_handle", "encode_handle", "retry_topic"]

log = logging.getLogger("rmqstore.broker")

REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
FIRST_POP_TIME = "1ST_POP_TIME"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
#: ms a message stays invisible when the client asked for auto-renew (the proxy's default)
DEFAULT_INVISIBLE_MS = 60_000
MIN_INVISIBLE_MS, MAX_INVISIBLE_MS = 1_000, 12 * 3600 * 1000
#: pops that look at the retry topic first (one in five, as upstream)
RETRY_FIRST_EVERY = 5
#: auto-renew (push consumers): renew this long before the invisible time ends, for at most this long
#: after the receive, while the client is connected (the proxy's renewAheadTimeMillis, and a cap)
RENEW_AHEAD_MS = 10_000
RENEW_MAX_MS = 3 * 3600 * 1000


class PopService:
    def __init__(self, broker):
        self.broker = broker
        self.revive_topic = REVIVE_TOPIC_PREFIX + broker.cfg.broker_cluster_name
        self.open: dict[tuple, Checkpoint] = {}
        #: FIFO (group, topic, queue) -> keys of its open checkpoints (the queue is held while any is open)
        self.fifo_open: dict[tuple, set[tuple]] = {}
        #: FIFO (group, topic, queue) -> its expired checkpoint, until the queue is received again (it
        #: holds the revive offset back: its record carries the attempts a restart must not forget)
        self.fifo_expired: dict[tuple, Checkpoint] = {}
        #: FIFO (group, topic, queue) -> {offset: reconsume times} of offsets whose checkpoint expired
        self.fifo_attempts: dict[tuple, dict[int, int]] = {}
        self._heap: list[tuple[int, int, tuple]] = []
        self._seq = 0
        self._pops = 0
        self.revived = 0
        self.dead_lettered = 0
        self._watermark: int | None = None
        self._end = 0  # the revive queue offset after the last record written or replayed

    # --- the durable records --------------------------------------------------------------------------
    def _write(self, tag: str, body: bytes) -> int:
        """Store one revive record; its revive queue offset (raises on a failed put)."""
        b = self.broker
        b.topics.create_if_absent(self.revive_topic, 1, PERM_READ | PERM_WRITE)
        props = {P.TAGS: tag}  # no UNIQ_KEY: revive records stay out of the index
        now = int(time.time() * 1000)
        result = b.store.put_message(Message(topic=self.revive_topic, body=body, queue_id=0,
                                             properties=M.java_properties(props), born_timestamp=now,
                                             born_host=b.store_host, store_host=b.store_host))
        if not result.ok:
            raise PopError("internal", f"writing a {tag} record to {self.revive_topic} failed: {result.status.value}")
        b.schedule_dispatch()
        self._end = max(self._end, result.queue_offset + 1)
        return result.queue_offset

    def _write_ack(self, ck: Checkpoint, offsets: list[int]) -> None:
        body = json.dumps({"ao": offsets, "so": ck.start, "pt": ck.pop_time, "c": ck.group, "t": ck.topic,
                           "q": ck.queue_id, "bn": self.broker.cfg.broker_name}, separators=(",", ":")).encode()
        self._write(ACK_TAG, body)

    def _add(self, ck: Checkpoint) -> None:
        self.open[ck.key] = ck
        self._seq += 1
        heapq.heappush(self._heap, (ck.deadline, self._seq, ck.key))
        if ck.fifo:
            self.fifo_open.setdefault((ck.group, ck.topic, ck.queue_id), set()).add(ck.key)

    def _close(self, ck: Checkpoint) -> None:
        self.open.pop(ck.key, None)
        if ck.fifo:
            keys = self.fifo_open.get((ck.group, ck.topic, ck.queue_id))
            if keys is not None:
                keys.discard(ck.key)
                if not keys:
                    del self.fifo_open[(ck.group, ck.topic, ck.queue_id)]

    # --- recovery -------------------------------------------------------------------------------------
    def recover(self) -> int:
        """Rebuild the open checkpoints from the revive queue (before serving); returns how many."""
        store = self.broker.store
        offsets = store.consumer_offsets
        q = max(offsets.query_offset(REVIVE_GROUP, self.revive_topic, 0) or 0,
                store.get_min_offset_in_queue(self.revive_topic, 0))
        end = store.get_max_offset_in_queue(self.revive_topic, 0)
        while q < end:
            r = store.get_message(REVIVE_GROUP, self.revive_topic, 0, q, 256, transfer_limits=False)
            for rec in r.messages:
                try:
                    self._replay(rec)
                except (ValueError, KeyError, TypeError) as e:
                    log.error("revive record at queue offset %d (commitlog %d) is not readable: %s: skipped",
                              rec.queue_offset, rec.phy_offset, e)
            if r.next_begin_offset <= q:
                break
            q = r.next_begin_offset
        self._watermark = None
        self._end = max(self._end, q)
        return len(self.open)

    def _replay(self, rec: MessageRecord) -> None:
        tag = rec.properties.get(P.TAGS)
        if tag == CK_TAG:
            ck = Checkpoint.from_body(rec.body, rec.queue_offset)
            known = self.open.get(ck.key)
            if known is not None:  # an auto-renewal of an open checkpoint
                known.invisible_ms = max(known.invisible_ms, ck.invisible_ms)
                self._seq += 1
                heapq.heappush(self._heap, (known.deadline, self._seq, known.key))
                return
            lock_key = (ck.group, ck.topic, ck.queue_id)
            if ck.fifo and not ck.renewed:
                # a new receive of the queue: the checkpoints before it had expired
                for key in list(self.fifo_open.get(lock_key, ())):
                    self._close(self.open[key])
            self._add(ck)
            if not ck.fifo:
                self._commit_at_least(ck.group, ck.topic, ck.queue_id, ck.offsets[-1] + 1)
        elif tag == ACK_TAG:
            d = json.loads(rec.body)
            ck = self.open.get((d["c"], d["t"], int(d["q"]), int(d["so"]), int(d["pt"])))
            if ck is not None:
                ao = d["ao"]
                ck.acked.update(int(x) for x in (ao if isinstance(ao, list) else [ao]))
                self._after_ack(ck)

    # --- offsets ----------------------------------------------------------------------------------------
    def _commit_at_least(self, group: str, topic: str, qid: int, offset: int) -> None:
        offsets = self.broker.store.consumer_offsets
        current = offsets.query_offset(group, topic, qid)
        if current is None or current < offset:
            offsets.commit_offset(group, topic, qid, offset)

    def _start_offset(self, group: str, topic: str, qid: int) -> int:
        """The group's offset in the queue, initialised as upstream's ``getInitOffset`` (ConsumeInitMode.MAX):
        0 when the queue's first message is in memory, else the last message."""
        b = self.broker
        store = b.store
        offset = store.consumer_offsets.query_offset(group, topic, qid)
        if offset is not None and offset >= 0:
            return offset
        if topic.startswith(RETRY_PREFIX):
            offset = store.get_min_offset_in_queue(topic, qid)
        elif store.get_min_offset_in_queue(topic, qid) <= 0 and b.pulls.first_in_memory(topic, qid):
            offset = 0
        else:
            offset = max(0, store.get_max_offset_in_queue(topic, qid) - 1)
        store.consumer_offsets.commit_offset(group, topic, qid, offset)
        return offset

    # --- receive ------------------------------------------------------------------------------------------
    def pop(self, req: PopRequest) -> list[Popped]:
        """Receive up to ``req.batch`` messages of ``req.topic`` (its queues ``req.queue_ids``, then the
        pop retry topic)."""
        b = self.broker
        found: list[Popped] = []
        retry = retry_topic(req.group, req.topic)
        sources = [(req.topic, q) for q in req.queue_ids]
        self._pops += 1
        if req.queue_ids:
            k = self._pops % len(req.queue_ids)
            sources = sources[k:] + sources[:k]
        if b.topics.get(retry) is not None:
            if self._pops % RETRY_FIRST_EVERY == 0:
                sources.insert(0, (retry, 0))
            else:
                sources.append((retry, 0))
        for source, qid in sources:
            if len(found) >= req.batch:
                break
            found += self._pop_queue(req, source, qid, req.batch - len(found))
        return found

    def _pop_queue(self, req: PopRequest, topic: str, qid: int, n: int) -> list[Popped]:
        """Receive up to ``n`` messages of the queue ``(topic, qid)`` (one of ``req.topic`` or its pop
        retry topic)."""
        b = self.broker
        store = b.store
        group, origin, fifo, subscription = req.group, req.topic, req.fifo, req.subscription
        lock_key = (group, topic, qid)
        if fifo and lock_key in self.fifo_open:
            return []  # a FIFO queue is held until its messages are acked or their invisible time passed
        offset = self._start_offset(group, topic, qid)
        if offset >= store.get_max_offset_in_queue(topic, qid):
            return []
        r = store.get_message(group, topic, qid, offset, n, subscription)
        if r.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
            store.consumer_offsets.commit_offset(group, topic, qid, r.next_begin_offset)
            r = store.get_message(group, topic, qid, r.next_begin_offset, n, subscription)
        records = r.messages
        attempts = self.fifo_attempts.get(lock_key, {}) if fifo else {}
        now = int(time.time() * 1000)
        keep: list[tuple[MessageRecord, int]] = []
        dead: list[MessageRecord] = []
        for rec in records:
            reconsume = attempts.get(rec.queue_offset, rec.reconsume_times) if fifo else rec.reconsume_times
            if reconsume >= req.max_attempts:
                dead.append(rec)
            else:
                keep.append((rec, reconsume))
        for rec in dead:
            self._to_dlq(group, origin, rec)
        if fifo:
            self.fifo_expired.pop(lock_key, None)
            self.fifo_attempts.pop(lock_key, None)
        if not keep:
            if fifo and dead:
                self._commit_at_least(group, topic, qid, dead[-1].queue_offset + 1)
            elif not fifo and r.next_begin_offset > offset:
                self._commit_at_least(group, topic, qid, r.next_begin_offset)
            return []
        ck = Checkpoint(group=group, topic=topic, origin=origin, queue_id=qid, start=offset, pop_time=now,
                        invisible_ms=req.invisible_ms, offsets=[rec.queue_offset for rec, _ in keep],
                        reconsume=[rc for _, rc in keep], fifo=fifo, renew_client=req.renew_client)
        ck.position = self._write(CK_TAG, ck.body(b.cfg.broker_name))
        self._add(ck)
        if fifo:
            # offsets before the first kept message (filtered out, or dead-lettered) are done
            self._commit_at_least(group, topic, qid, ck.offsets[0])
        else:
            self._commit_at_least(group, topic, qid, r.next_begin_offset)
        bn = b.cfg.broker_name
        return [Popped(rec, origin, encode_handle(ck, rec.queue_offset, rec.phy_offset, bn), rc + 1, req.invisible_ms)
                for rec, rc in keep]

    def _to_dlq(self, group: str, origin: str, rec: MessageRecord) -> None:
        b = self.broker
        dlq = DLQ_PREFIX + group
        b.topics.create_if_absent(dlq, 1, PERM_READ | PERM_WRITE)
        props = dict(rec.properties)
        uniq = props.get(P.UNIQ_KEY) or rec.msg_id
        props.setdefault(DLQ_ORIGIN_TOPIC, origin)
        props.setdefault(DLQ_ORIGIN_MESSAGE_ID, uniq)
        props.pop(P.DELAY, None)
        msg = M.copy_of(rec, dlq, 0, props, store_host=b.store_host)
        result = b.store.put_message(msg)
        if not result.ok:
            raise PopError("internal", f"dead-lettering {uniq} failed: {result.status.value}")
        b.schedule_dispatch()
        self.dead_lettered += 1
        b.traffic.to_dlq(group, origin)
        log.info("message %s of %s delivered the max attempts for group %s: moved to %s", uniq, origin, group, dlq)

    # --- ack / change invisible time / DLQ ------------------------------------------------------------
    def _find(self, group: str, topic: str, handle: str, now: int | None = None) -> tuple[Checkpoint, int]:
        start, pop_time, invisible, kind, qid, offset = decode_handle(handle)
        queue_topic = retry_topic(group, topic) if kind == RETRY_TOPIC else topic
        ck = self.open.get((group, queue_topic, qid, start, pop_time))
        now = int(time.time() * 1000) if now is None else now
        if ck is None or offset not in ck.offsets:
            if pop_time + invisible <= now:
                raise PopError("expired", "receipt handle is expired")
            raise PopError("invalid_handle", "receipt handle is invalid: no message received with it is "
                           "waiting for an ack (acked already, or never handed out)")
        if offset in ck.acked:
            raise PopError("invalid_handle", "receipt handle is invalid: the message was acked already")
        if ck.deadline <= now:
            raise PopError("expired", "receipt handle is expired")
        return ck, offset

    def ack(self, group: str, topic: str, handle: str) -> None:
        ck, offset = self._find(group, topic, handle)
        self._write_ack(ck, [offset])
        ck.acked.add(offset)
        self._after_ack(ck)

    def _after_ack(self, ck: Checkpoint) -> None:
        if len(ck.acked) >= len(ck.offsets):
            self._close(ck)
        if ck.fifo:
            lock_key = (ck.group, ck.topic, ck.queue_id)
            left = self._open_offsets(lock_key)
            self._commit_at_least(ck.group, ck.topic, ck.queue_id, min(left) if left else ck.offsets[-1] + 1)
            if not left:
                self.broker.pulls.notify({(ck.topic, ck.queue_id), (ck.origin, ck.queue_id)})

    def _open_offsets(self, lock_key: tuple) -> list[int]:
        """The offsets of a FIFO queue handed out and not acked, over its open checkpoints."""
        return [o for key in self.fifo_open.get(lock_key, ()) for o in self.open[key].open_offsets()]

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        """A new receipt handle for the message, invisible for ``invisible_ms`` from now; the old one
        is closed (upstream: a new checkpoint, then an ack of the old one)."""
        b = self.broker
        ck, offset = self._find(group, topic, handle)
        i = ck.offsets.index(offset)
        phy = int(handle.split(" ")[8]) if handle.count(" ") >= 8 else None
        new = Checkpoint(group=group, topic=ck.topic, origin=ck.origin, queue_id=ck.queue_id, start=offset,
                         pop_time=int(time.time() * 1000), invisible_ms=invisible_ms, offsets=[offset],
                         reconsume=[ck.reconsume[i]], fifo=ck.fifo, renewed=True)
        if new.key == ck.key:  # the same millisecond as the receive: keep keys unique
            new.pop_time += 1
        new.position = self._write(CK_TAG, new.body(b.cfg.broker_name))
        self._write_ack(ck, [offset])
        ck.acked.add(offset)
        self._add(new)
        if len(ck.acked) >= len(ck.offsets):
            self._close(ck)
        if phy is None or phy < 0:
            phy = b.store.get_commit_log_offset_in_queue(new.topic, new.queue_id, offset)
        return encode_handle(new, offset, phy, b.cfg.broker_name)

    def forward_to_dlq(self, group: str, topic: str, handle: str) -> None:
        ck, offset = self._find(group, topic, handle)
        rec = self._record(ck.topic, ck.queue_id, offset)
        if rec is not None:
            self._to_dlq(group, ck.origin, rec)
        self._write_ack(ck, [offset])
        ck.acked.add(offset)
        self._after_ack(ck)

    def _record(self, topic: str, qid: int, offset: int) -> MessageRecord | None:
        store = self.broker.store
        phy = store.get_commit_log_offset_in_queue(topic, qid, offset)
        return store.look_message_by_offset(phy) if phy >= 0 else None

    # --- revive -------------------------------------------------------------------------------------------
    def revive_due(self, now_ms: int | None = None, alive=None) -> int:
        """Renew the auto-renew checkpoints of connected clients (``alive(client id)``) that are about
        to end, revive the checkpoints whose invisible time has passed; returns how many messages
        were revived."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        n = 0
        later = []
        while self._heap and self._heap[0][0] <= now + RENEW_AHEAD_MS:
            deadline, seq, key = heapq.heappop(self._heap)
            ck = self.open.get(key)
            if ck is None or ck.deadline != deadline:
                continue
            if (ck.renew_client is not None and alive is not None and alive(ck.renew_client)
                    and now - ck.pop_time < RENEW_MAX_MS):
                self._renew(ck, now)
            elif deadline <= now:
                n += self._revive(ck)
            else:
                later.append((deadline, seq, key))
        for item in later:
            heapq.heappush(self._heap, item)
        self._advance_watermark()
        return n

    def _renew(self, ck: Checkpoint, now: int) -> None:
        """Extend an auto-renew checkpoint by the default invisible time (a CK record with the same
        key and the longer invisible time; the client's receipt handles stay valid)."""
        ck.invisible_ms = now + DEFAULT_INVISIBLE_MS - ck.pop_time
        self._write(CK_TAG, ck.body(self.broker.cfg.broker_name))
        self._seq += 1
        heapq.heappush(self._heap, (ck.deadline, self._seq, ck.key))

    def _revive(self, ck: Checkpoint) -> int:
        b = self.broker
        left = ck.open_offsets()
        max_attempts = self.max_attempts(ck.group)
        if ck.fifo:
            lock_key = (ck.group, ck.topic, ck.queue_id)
            attempts = self.fifo_attempts.setdefault(lock_key, {})
            for o in left:
                attempts[o] = ck.reconsume[ck.offsets.index(o)] + 1
            self._close(ck)
            if lock_key not in self.fifo_open:
                self.fifo_expired[lock_key] = ck
            b.pulls.notify({(ck.topic, ck.queue_id), (ck.origin, ck.queue_id)})
            return len(left)
        retry = retry_topic(ck.group, ck.origin)
        notify = set()
        for o in left:
            rec = self._record(ck.topic, ck.queue_id, o)
            if rec is None:
                log.warning("revive: %s queue %d offset %d is gone: not redelivered", ck.topic, ck.queue_id, o)
                continue
            reconsume = ck.reconsume[ck.offsets.index(o)] + 1
            if reconsume >= max_attempts:
                self._to_dlq(ck.group, ck.origin, rec)
                continue
            b.topics.create_if_absent(retry, 1, PERM_READ | PERM_WRITE)
            props = dict(rec.properties)
            props.setdefault(M.RETRY_TOPIC, ck.origin)
            props.setdefault(FIRST_POP_TIME, str(ck.pop_time))
            msg = M.copy_of(rec, retry, 0, props, store_host=b.store_host)
            msg.reconsume_times = reconsume
            result = b.store.put_message(msg)
            if not result.ok:
                log.error("revive: storing %s again failed (%s): retried on the next round", rec.msg_id,
                          result.status.value)
                self._seq += 1
                heapq.heappush(self._heap, (ck.deadline + 1000, self._seq, ck.key))
                ck.invisible_ms += 1000
                return 0
            notify.add((retry, 0))
            self.revived += 1
        if left:
            self._write_ack(ck, left)
        ck.acked.update(left)
        self._close(ck)
        b.schedule_dispatch()
        return len(left)

    def max_attempts(self, group: str) -> int:
        sg = self.broker.groups.find(group) or {}
        return int(sg.get("retryMaxTimes", 16)) + 1

    def _advance_watermark(self) -> None:
        store = self.broker.store
        positions = [ck.position for ck in self.open.values() if ck.position is not None]
        positions += [ck.position for ck in self.fifo_expired.values() if ck.position is not None]
        wm = min(positions) if positions else self._end
        if wm != self._watermark and wm >= 0:
            self._watermark = wm
            store.consumer_offsets.commit_offset(REVIVE_GROUP, self.revive_topic, 0, wm)

    def in_flight_by_queue(self) -> dict[tuple[str, str, int], int]:
        """(group, queue's topic, queue id) -> messages received and not acked yet (upstream's
        ``PopInflightMessageCounter``), counted over the open checkpoints when asked (a scrape): no
        work on the receive or ack path, and as many entries as clients hold."""
        out: dict[tuple[str, str, int], int] = {}
        for ck in list(self.open.values()):
            n = len(ck.offsets) - len(ck.acked)
            if n > 0:
                key = (ck.group, ck.topic, ck.queue_id)
                out[key] = out.get(key, 0) + n
        return out

    def in_flight(self, group: str | None = None) -> int:
        return sum(len(ck.open_offsets()) for ck in self.open.values() if group is None or ck.group == group)
