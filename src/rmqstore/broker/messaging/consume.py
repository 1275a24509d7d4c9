"""The consumer-side RPCs of ``apache.rocketmq.v2.MessagingService``: receive, ack, change invisible
duration, forward to the dead-letter queue, offsets and pull.

:class:`ConsumeRpcs` is a part of :class:`~rmqstore.broker.messaging.service.MessagingService`, which
provides ``b`` (the broker) and the request checks ``client_of``, ``topic_config`` and
``group_config`` (each raises :class:`~.convert.Refused`).
"""
from __future__ import annotations

import time

from ...types import GetMessageStatus
from ..metadata import PERM_READ
from ..pop import DEFAULT_INVISIBLE_MS, MAX_INVISIBLE_MS, PopError, PopRequest, retry_topic
from .convert import Refused, to_message
from .protocol import pb, status

#: the proxy's largest receive batch (``ProxyConfig``)
MAX_BATCH_SIZE = 32
#: ms a failed delivery (the stream broke) is made invisible for before it is received again
NACK_INVISIBLE_MS = 1000
_POP_CODES = {"invalid_handle": pb.INVALID_RECEIPT_HANDLE, "expired": pb.INVALID_RECEIPT_HANDLE,
              "bad_request": pb.BAD_REQUEST, "internal": pb.INTERNAL_SERVER_ERROR}


class ConsumeRpcs:
    """Receive / ack and offsets / pull (see the module's docstring for what it needs of its class)."""

    @staticmethod
    def _consumer_settings(sg: dict) -> tuple[bool, int]:
        """FIFO and max attempts: the group's (the settings the proxy sends a client say the same)."""
        return bool(sg.get("consumeMessageOrderly", False)), int(sg.get("retryMaxTimes", 16)) + 1

    def _receive_request(self, request, context) -> tuple[PopRequest, int]:
        """The pop request of a ReceiveMessage and how long it may wait for messages (ms); Refused
        when the request is not one to serve."""
        b = self.b
        c = self.client_of(context)
        if c is None:
            raise Refused(pb.CLIENT_ID_REQUIRED, "x-mq-client-id is required")
        tc = self.topic_config(request.message_queue.topic.name, create=False)
        sg = self.group_config(request.group.name)
        if not tc["perm"] & PERM_READ:
            raise Refused(pb.FORBIDDEN, f"topic {request.message_queue.topic.name!r} is not readable")
        poll_ms = self._polling_ms(request, context)
        if request.auto_renew:
            invisible = DEFAULT_INVISIBLE_MS
        else:
            invisible = request.invisible_duration.seconds * 1000 + request.invisible_duration.nanos // 1_000_000
            self._check_invisible(invisible, b.cfg.min_invisible_time_mills_for_recv)
        if not 0 < request.batch_size <= MAX_BATCH_SIZE:
            raise Refused(pb.BAD_REQUEST, f"batch size must be 1 to {MAX_BATCH_SIZE}, got {request.batch_size}")
        subscription = _subscription(request.filter_expression)
        fifo, max_attempts = self._consumer_settings(sg)
        return PopRequest(request.group.name, request.message_queue.topic.name, list(range(tc["readQueueNums"])),
                          request.batch_size, invisible, fifo, subscription, max_attempts,
                          c.client_id if request.auto_renew else None), poll_ms

    async def _pop_waiting(self, req: PopRequest, poll_ms: int) -> list:
        """Pop, waiting up to ``poll_ms`` for messages to arrive (raises PopError)."""
        b = self.b
        deadline = time.monotonic() + poll_ms / 1000
        while True:
            found = b.pops.pop(req)
            if found or b.stopping:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                return found
            keys = [(req.topic, q) for q in req.queue_ids] + [(retry_topic(req.group, req.topic), 0)]
            await b.pulls.wait_any(keys, min(left, 1.0))  # re-checked each second: a wake-up lost
            # to the dispatch thread costs at most a second

    async def ReceiveMessage(self, request, context):
        b = self.b
        try:
            req, poll_ms = self._receive_request(request, context)
        except Refused as e:
            yield pb.ReceiveMessageResponse(status=status(e.code, str(e)))
            yield _done()
            return
        try:
            found = await self._pop_waiting(req, poll_ms)
        except PopError as e:
            yield pb.ReceiveMessageResponse(status=status(_POP_CODES.get(e.kind, pb.INTERNAL_SERVER_ERROR), str(e)))
            yield _done()
            return
        if not found:
            yield pb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))
            yield _done()
            return
        sent = 0
        try:
            yield pb.ReceiveMessageResponse(status=status(pb.OK))
            for p in found:
                yield pb.ReceiveMessageResponse(message=to_message(p.record, p.topic, handle=p.handle,
                                                                   attempt=p.attempt, invisible_ms=p.invisible_ms))
                sent += 1
            b.stats.got(sent)
            b.traffic.out(req.topic, req.group, sent, sum(p.record.store_size for p in found[:sent]))
            yield _done()
        finally:
            if sent < len(found):  # the client went away: receive them again soon
                for p in found[sent:]:
                    try:
                        b.pops.change_invisible(req.group, req.topic, p.handle, NACK_INVISIBLE_MS)
                    except PopError:
                        pass

    def _polling_ms(self, request, context) -> int:
        cfg = self.b.cfg
        remaining = context.time_remaining()
        remaining_ms = int(remaining * 1000) if remaining is not None else 1 << 40
        if request.HasField("long_polling_timeout"):
            poll = request.long_polling_timeout.seconds * 1000 + request.long_polling_timeout.nanos // 1_000_000
        else:
            poll = remaining_ms - 1500
        poll = max(poll, cfg.grpc_client_consumer_min_long_polling_timeout_millis)
        poll = min(poll, cfg.grpc_client_consumer_max_long_polling_timeout_millis)
        if poll > remaining_ms:
            if remaining_ms >= cfg.grpc_client_consumer_min_long_polling_timeout_millis:
                poll = remaining_ms
            else:
                raise Refused(pb.ILLEGAL_POLLING_TIME, "The deadline time remaining is not enough for polling, please "
                              "check network condition")
        return max(0, poll - 200)  # answer before the client's deadline

    @staticmethod
    def _check_invisible(ms: int, minimum: int) -> None:
        if ms < minimum:
            raise Refused(pb.ILLEGAL_INVISIBLE_TIME, f"the invisible time {ms} ms is shorter than the minimum "
                          f"{minimum} ms")
        if ms > MAX_INVISIBLE_MS:
            raise Refused(pb.ILLEGAL_INVISIBLE_TIME, f"the invisible time {ms} ms is longer than the maximum "
                          f"{MAX_INVISIBLE_MS} ms")

    async def AckMessage(self, request, context):
        b = self.b
        try:
            self.group_config(request.group.name)
        except Refused as e:
            return pb.AckMessageResponse(status=status(e.code, str(e)))
        entries = []
        for e in request.entries:
            try:
                b.pops.ack(request.group.name, request.topic.name, e.receipt_handle)
                st = status(pb.OK)
            except PopError as err:
                st = status(_POP_CODES.get(err.kind, pb.INTERNAL_SERVER_ERROR), str(err))
            entries.append(pb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=st))
        codes = {e.status.code for e in entries}
        if not entries:
            st = status(pb.BAD_REQUEST, "no entry to ack")
        elif len(codes) > 1:
            st = status(pb.MULTIPLE_RESULTS)
        else:
            st = entries[0].status
        return pb.AckMessageResponse(status=st, entries=entries)

    async def ChangeInvisibleDuration(self, request, context):
        b = self.b
        ms = request.invisible_duration.seconds * 1000 + request.invisible_duration.nanos // 1_000_000
        try:
            self.group_config(request.group.name)
            self._check_invisible(ms, 0)
            handle = b.pops.change_invisible(request.group.name, request.topic.name, request.receipt_handle, ms)
        except Refused as e:
            return pb.ChangeInvisibleDurationResponse(status=status(e.code, str(e)))
        except PopError as e:
            return pb.ChangeInvisibleDurationResponse(status=status(_POP_CODES.get(e.kind, pb.INTERNAL_SERVER_ERROR),
                                                                    str(e)))
        return pb.ChangeInvisibleDurationResponse(status=status(pb.OK), receipt_handle=handle)

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        b = self.b
        try:
            self.group_config(request.group.name)
            b.pops.forward_to_dlq(request.group.name, request.topic.name, request.receipt_handle)
        except Refused as e:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(e.code, str(e)))
        except PopError as e:
            return pb.ForwardMessageToDeadLetterQueueResponse(
                status=status(_POP_CODES.get(e.kind, pb.INTERNAL_SERVER_ERROR), str(e)))
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.OK))

    # --- offsets and pull --------------------------------------------------------------------------------
    def _queue(self, mq) -> tuple[str, int]:
        tc = self.topic_config(mq.topic.name, create=False)
        if not 0 <= mq.id < max(tc["readQueueNums"], tc["writeQueueNums"]):
            raise Refused(pb.BAD_REQUEST, f"queue {mq.id} of topic {mq.topic.name!r} does not exist")
        return mq.topic.name, mq.id

    async def GetOffset(self, request, context):
        try:
            self.group_config(request.group.name)
            topic, qid = self._queue(request.message_queue)
        except Refused as e:
            return pb.GetOffsetResponse(status=status(e.code, str(e)))
        offset = self.b.store.consumer_offsets.query_offset(request.group.name, topic, qid)
        if offset is None or offset < 0:
            return pb.GetOffsetResponse(status=status(pb.OFFSET_NOT_FOUND, f"group {request.group.name!r} has no "
                                                      f"offset in {topic} queue {qid}"))
        return pb.GetOffsetResponse(status=status(pb.OK), offset=offset)

    async def UpdateOffset(self, request, context):
        try:
            self.group_config(request.group.name)
            topic, qid = self._queue(request.message_queue)
            if request.offset < 0:
                raise Refused(pb.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        except Refused as e:
            return pb.UpdateOffsetResponse(status=status(e.code, str(e)))
        self.b.commit_offset(request.group.name, topic, qid, request.offset)
        return pb.UpdateOffsetResponse(status=status(pb.OK))

    async def QueryOffset(self, request, context):
        store = self.b.store
        try:
            topic, qid = self._queue(request.message_queue)
        except Refused as e:
            return pb.QueryOffsetResponse(status=status(e.code, str(e)))
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            offset = store.get_min_offset_in_queue(topic, qid)
        elif policy == pb.END:
            offset = store.get_max_offset_in_queue(topic, qid)
        else:
            if not request.HasField("timestamp"):
                return pb.QueryOffsetResponse(status=status(pb.BAD_REQUEST, "policy TIMESTAMP needs a timestamp"))
            ms = request.timestamp.seconds * 1000 + request.timestamp.nanos // 1_000_000
            offset = store.get_offset_in_queue_by_time(topic, qid, ms)
        return pb.QueryOffsetResponse(status=status(pb.OK), offset=offset)

    async def PullMessage(self, request, context):
        b = self.b
        try:
            self.group_config(request.group.name)
            topic, qid = self._queue(request.message_queue)
            subscription = _subscription(request.filter_expression)
            if not 0 < request.batch_size <= 1024:
                raise Refused(pb.BAD_REQUEST, f"batch size must be 1 to 1024, got {request.batch_size}")
            if request.offset < 0:
                raise Refused(pb.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        except Refused as e:
            yield pb.PullMessageResponse(status=status(e.code, str(e)))
            return
        poll = request.long_polling_timeout
        deadline = time.monotonic() + (poll.seconds + poll.nanos / 1e9)
        remaining = context.time_remaining()
        if remaining is not None:
            deadline = min(deadline, time.monotonic() + max(0.0, remaining - 0.2))
        while True:
            r = b.store.get_message(request.group.name, topic, qid, request.offset, request.batch_size, subscription)
            left = deadline - time.monotonic()
            if r.messages or r.status is not GetMessageStatus.OFFSET_OVERFLOW_ONE or left <= 0 or b.stopping:
                break
            await b.pulls.wait_any([(topic, qid)], left)
        if r.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
            yield pb.PullMessageResponse(status=status(pb.ILLEGAL_OFFSET, f"offset {request.offset} is out of "
                                                       f"[{r.min_offset}, {r.max_offset}]"))
            yield pb.PullMessageResponse(next_offset=r.next_begin_offset)
            return
        if r.messages:
            yield pb.PullMessageResponse(status=status(pb.OK))
            for rec in r.messages:
                yield pb.PullMessageResponse(message=to_message(rec, topic))
            b.stats.got(len(r.messages))
            b.traffic.out(topic, request.group.name, len(r.messages), sum(rec.store_size for rec in r.messages))
        else:
            yield pb.PullMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))
        b.pulls.calls[0 if r.messages else 1] += 1  # brokerStatus' getFoundTps / getMissTps, as a remoting pull
        b.store.consumer_offsets.commit_pull_offset(request.group.name, topic, qid, r.next_begin_offset)  # inflight
        yield pb.PullMessageResponse(next_offset=r.next_begin_offset)


def _done():
    now = int(time.time() * 1000)
    resp = pb.ReceiveMessageResponse()
    resp.delivery_timestamp.seconds = now // 1000
    resp.delivery_timestamp.nanos = (now % 1000) * 1_000_000
    return resp


def _subscription(expr) -> str:
    if expr.type == pb.SQL:
        raise Refused(pb.ILLEGAL_FILTER_EXPRESSION, "SQL92 filter expressions are not supported by this broker "
                      "(TAG only)")
    text = expr.expression.strip() or "*"
    if text != "*" and any(not part.strip() for part in text.split("||")):
        raise Refused(pb.ILLEGAL_FILTER_EXPRESSION, f"tag expression {expr.expression!r} is not legal")
    return text
