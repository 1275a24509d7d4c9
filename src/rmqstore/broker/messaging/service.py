"""``apache.rocketmq.v2.MessagingService`` over the broker core: what RocketMQ 5's proxy answers to the
gRPC clients, on the same topics, groups, offsets and store as the remoting endpoint.

Everything runs on the broker's event loop (``grpc.aio``), so the handlers share the broker's state
with the remoting processors without locks. Bad requests get a ``Status`` with the proxy's code and
a message saying what was wrong; an unexpected error is answered INTERNAL_SERVER_ERROR and logged,
and the server keeps serving.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass, field

from ...format import properties as P
from ...format.hashes import java_hash
from ...format.msgid import MessageIdError, decode_offset_msg_id
from ...types import Message, PutMessageStatus
from .. import messages as M
from .. import timer as T
from ..metadata import (DLQ_PREFIX, NOT_ALLOWED_SEND, PERM_READ, PERM_WRITE, RETRY_PREFIX, TRANS_HALF_TOPIC,
                        validate_topic)
from . import routing
from .consume import ConsumeRpcs
from .convert import Refused, duration, message_properties, to_message
from .protocol import pb, services, status

log = logging.getLogger("rmqstore.broker.grpc")

CLIENT_ID = "x-mq-client-id"
#: the proxy's defaults (``ProxyConfig``)
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF = (10, 1000, 2.0)
RECEIVE_BATCH_SIZE = 32
MAX_TELEMETRY_QUEUE = 1024
#: ``TopicValidator.SYSTEM_TOPIC_SET`` (and every ``rmq_sys_`` topic): the proxy refuses them
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
                           "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                           "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC"})

_PUT_CODES = {PutMessageStatus.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
              PutMessageStatus.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
              PutMessageStatus.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
              PutMessageStatus.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
              PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: pb.MESSAGE_PROPERTIES_TOO_LARGE,
              PutMessageStatus.OS_PAGE_CACHE_BUSY: pb.TOO_MANY_REQUESTS}


def consistent_hash(value: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(long, int)`` (the proxy's queue for a message group)."""
    state = value & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        as_int = (state >> 33) & 0xFFFFFFFF
        if as_int >= 1 << 31:
            as_int -= 1 << 32
        nxt = int((candidate + 1) / ((as_int + 1) / 2147483648.0))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


@dataclass
class GrpcClient:
    client_id: str
    client_type: int = 0
    group: str = ""
    settings: object = None
    topics: set[str] = field(default_factory=set)
    last_seen: float = field(default_factory=time.monotonic)
    outbox: asyncio.Queue | None = None


def _client_id(context) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == CLIENT_ID:
            return v
    return ""


def _peer(context) -> str:
    peer = context.peer() or ""
    for prefix in ("ipv4:", "ipv6:"):
        if peer.startswith(prefix):
            return peer[len(prefix):].replace("%5B", "[").replace("%5D", "]")
    return peer


class MessagingService(ConsumeRpcs, services.MessagingServiceServicer):
    """The gRPC front; the consumer-side RPCs are :class:`~.consume.ConsumeRpcs`'."""

    def __init__(self, broker):
        self.b = broker
        self.clients: dict[str, GrpcClient] = {}
        self._rr = 0
        self.endpoint = ("127.0.0.1", 0)
        cluster = getattr(broker, "cluster", None)
        #: the name servers' routes, in a cluster (None: this broker is its own name server)
        self._routes = None if cluster is None or cluster.embedded else routing.RouteCache(cluster.outer)

    # --- helpers ---------------------------------------------------------------------------------
    def client_of(self, context) -> GrpcClient | None:
        """The client of a call (its ``x-mq-client-id``), None without one."""
        cid = _client_id(context)
        if not cid:
            return None
        c = self.clients.get(cid)
        if c is None:
            c = self.clients[cid] = GrpcClient(cid)
        c.last_seen = time.monotonic()
        return c

    def topic_config(self, name: str, *, write: bool = False, create: bool = True) -> dict:
        """The topic's config, created when the broker auto-creates topics; Refused otherwise."""
        bad = validate_topic(name)
        if bad:
            raise Refused(pb.ILLEGAL_TOPIC, bad)
        if name in SYSTEM_TOPICS or name.startswith("rmq_sys_"):
            raise Refused(pb.ILLEGAL_TOPIC, "cannot access system topic")
        b = self.b
        tc = b.topics.get(name)
        if tc is None and create and b.cfg.auto_create_topic_enable and not b.read_only:
            tc = b.topics.create_if_absent(name, b.cfg.default_topic_queue_nums)
        if tc is None:
            raise Refused(pb.TOPIC_NOT_FOUND, f"topic {name!r} not found")
        if write and (name in NOT_ALLOWED_SEND or not tc["perm"] & PERM_WRITE):
            raise Refused(pb.FORBIDDEN, f"sending to topic {name!r} is forbidden")
        return tc

    def group_config(self, name: str) -> dict:
        """The consumer group's config; Refused when it may not consume here."""
        if not name or validate_topic(name):
            raise Refused(pb.ILLEGAL_CONSUMER_GROUP, f"consumer group {name!r} is not a legal name")
        if name.startswith("CID_RMQ_SYS_"):
            raise Refused(pb.ILLEGAL_CONSUMER_GROUP, "cannot use system consumer group")
        sg = self.b.groups.find(name)
        if sg is None:
            raise Refused(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {name!r} not found")
        if not sg.get("consumeEnable", True):
            raise Refused(pb.FORBIDDEN, f"consumer group {name!r} may not consume")
        return sg

    async def _put(self, msgs: list[Message]):
        result = self.b.put(msgs, lambda r: r)
        if inspect.isawaitable(result):  # a group commit's Deferred (or a put worker's coroutine)
            result = await result
        if result.ok:
            self.b.traffic.put(msgs[0], len(msgs), result.wrote_bytes)
        return result

    # --- route, heartbeat, settings ------------------------------------------------------------------
    async def QueryRoute(self, request, context):
        try:
            tc = self.topic_config(request.topic.name)
        except Refused as e:
            return pb.QueryRouteResponse(status=status(e.code, str(e)))
        route = await self._route(request.topic.name, tc)
        queues = routing.route_queues(route, request.topic, self.endpoint,
                                       routing.accept_types(routing.topic_message_type(tc)))
        return pb.QueryRouteResponse(status=status(pb.OK), message_queues=queues)

    async def _route(self, topic: str, tc: dict) -> dict:
        """The topic's route: the name servers' in a cluster (see :mod:`.routing`), else this broker's."""
        route = None if self._routes is None else await self._routes.get(topic)
        return route if route is not None else routing.local_route(self.b.cfg.broker_name, tc)

    async def Heartbeat(self, request, context):
        c = self.client_of(context)
        if c is None:
            return pb.HeartbeatResponse(status=status(pb.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        c.client_type = request.client_type or c.client_type
        if request.HasField("group") and request.group.name:
            try:
                self.group_config(request.group.name)
            except Refused as e:
                return pb.HeartbeatResponse(status=status(e.code, str(e)))
            c.group = request.group.name
        return pb.HeartbeatResponse(status=status(pb.OK))

    def settings_for(self, settings):
        """The client's settings completed as the proxy completes them (``GrpcClientSettingsManager``)."""
        b = self.b
        out = pb.Settings()
        out.CopyFrom(settings)
        if settings.HasField("publishing"):
            initial, mx, mult = PRODUCER_BACKOFF
            out.backoff_policy.max_attempts = PRODUCER_MAX_ATTEMPTS
            out.backoff_policy.exponential_backoff.initial.CopyFrom(duration(initial))
            out.backoff_policy.exponential_backoff.max.CopyFrom(duration(mx))
            out.backoff_policy.exponential_backoff.multiplier = mult
            out.publishing.validate_message_type = b.cfg.enable_topic_message_type_check
            out.publishing.max_body_size = b.store.cfg.max_message_size
        elif settings.HasField("subscription"):
            sg = b.groups.find(settings.subscription.group.name) or {}
            out.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
            out.subscription.long_polling_timeout.CopyFrom(duration(b.cfg.grpc_client_consumer_max_long_polling_timeout_millis))
            out.subscription.fifo = bool(sg.get("consumeMessageOrderly", False))
            out.backoff_policy.max_attempts = int(sg.get("retryMaxTimes", 16)) + 1
            out.backoff_policy.customized_backoff.next.extend(duration(ms) for ms in b.delay_levels_ms)
        out.metric.on = False
        return out

    def _on_settings(self, c: GrpcClient, settings) -> None:
        c.settings = settings
        if settings.HasField("client_type"):
            c.client_type = settings.client_type
        if settings.HasField("publishing"):
            c.topics = {t.name for t in settings.publishing.topics}
        if settings.HasField("subscription") and settings.subscription.group.name:
            c.group = settings.subscription.group.name

    async def Telemetry(self, request_iterator, context):
        c = self.client_of(context)
        if c is None:
            await context.write(pb.TelemetryCommand(status=status(pb.CLIENT_ID_REQUIRED, "x-mq-client-id is required")))
            return
        outbox: asyncio.Queue = asyncio.Queue(MAX_TELEMETRY_QUEUE)
        c.outbox = outbox

        async def read():
            try:
                async for cmd in request_iterator:
                    c.last_seen = time.monotonic()
                    which = cmd.WhichOneof("command")
                    if which == "settings":
                        self._on_settings(c, cmd.settings)
                        reply = pb.TelemetryCommand(status=status(pb.OK), settings=self.settings_for(cmd.settings))
                        await outbox.put(reply)  # bounded: a client that does not read is not read from
                    # thread stack traces and verify results: nothing to do with them here
            finally:
                try:
                    outbox.put_nowait(None)
                except asyncio.QueueFull:  # the writer is gone or stuck: it is cancelled below anyway
                    pass

        reader = asyncio.ensure_future(read())
        try:
            while True:
                item = await outbox.get()
                if item is None:
                    break
                await context.write(item)
        finally:
            reader.cancel()
            if c.outbox is outbox:
                c.outbox = None

    async def NotifyClientTermination(self, request, context):
        cid = _client_id(context)
        self.clients.pop(cid, None)
        return pb.NotifyClientTerminationResponse(status=status(pb.OK))

    async def QueryAssignment(self, request, context):
        try:
            tc = self.topic_config(request.topic.name)
            sg = self.group_config(request.group.name)
        except Refused as e:
            return pb.QueryAssignmentResponse(status=status(e.code, str(e)))
        route = await self._route(request.topic.name, tc)
        found = routing.assignments(route, request.topic, self.endpoint, bool(sg.get("consumeMessageOrderly", False)))
        if not found:
            return pb.QueryAssignmentResponse(status=status(pb.FORBIDDEN, f"topic {request.topic.name!r} is not "
                                                           "readable"))
        return pb.QueryAssignmentResponse(status=status(pb.OK), assignments=found)

    # --- send -------------------------------------------------------------------------------------------
    async def SendMessage(self, request, context):
        try:
            return await self._send(request, context)
        except Refused as e:
            return pb.SendMessageResponse(status=status(e.code, str(e)))

    async def _send(self, request, context):
        b = self.b
        if not request.messages:
            raise Refused(pb.MESSAGE_CORRUPTED, "no message to send")
        if b.read_only:
            raise Refused(pb.FORBIDDEN, "the broker is read-only")
        topic = request.messages[0].topic
        tc = self.topic_config(topic.name, write=True)
        now = int(time.time() * 1000)
        peer = _peer(context)
        built: list[tuple[Message, dict]] = []
        for m in request.messages:
            if m.topic != topic:
                raise Refused(pb.MESSAGE_CORRUPTED, "topic in message is not same")
            if not m.body:
                raise Refused(pb.MESSAGE_BODY_EMPTY, "message body cannot be empty")
            if len(m.body) > b.store.cfg.max_message_size:
                raise Refused(pb.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max "
                              f"{b.store.cfg.max_message_size}")
            props = message_properties(m, topic.name, peer, now)
            sys_flag = 0
            if m.system_properties.message_type == pb.TRANSACTION:
                sys_flag |= M.TRANSACTION_PREPARED_TYPE
            born = int(props.get("BORN_TIMESTAMP", now))
            props[M.CLUSTER] = b.cfg.broker_cluster_name
            msg = Message(topic=topic.name, body=m.body, sys_flag=sys_flag, born_timestamp=born,
                          born_host=peer if ":" in peer else "127.0.0.1:0", store_host=b.store_host,
                          reconsume_times=int(props.get("RECONSUME_TIME", "0") or 0))
            built.append((msg, props))
        self._check_type(topic.name, tc, built[0][1])
        qid = self._select_queue(tc, request)
        special = any(M.TRAN_MSG in p or T.TIMER_DELIVER_MS in p for _, p in built)
        entries = []
        if len(built) == 1 or special:
            for msg, props in built:
                entries.append(await self._send_one(msg, props, qid, now))
        else:
            msgs = []
            for msg, props in built:
                msg.queue_id = qid
                msg.properties = M.java_properties(props)
                msgs.append(msg)
            result = await self._put(msgs)
            for i, (_, props) in enumerate(built):
                entries.append(self._entry(result, props, result.queue_offset + i if result.ok else 0, None))
        b.stats.put(sum(1 for e in entries if e.status.code == pb.OK))
        codes = {e.status.code for e in entries}
        if len(codes) > 1:
            st = status(pb.MULTIPLE_RESULTS)
        else:
            code = codes.pop()
            st = entries[0].status if code != pb.OK else status(pb.OK)
        return pb.SendMessageResponse(status=st, entries=entries)

    def _check_type(self, topic: str, tc: dict, props: dict) -> None:
        """The proxy's check of a send's first message against the topic's ``message.type``
        (``enableTopicMessageTypeCheck``; not for retry and dead-letter topics)."""
        if self.b.cfg.enable_topic_message_type_check and not topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            conflict = routing.type_conflict(routing.topic_message_type(tc), props)
            if conflict is not None:
                raise Refused(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, conflict)

    def _select_queue(self, tc: dict, request) -> int:
        n = max(1, tc["writeQueueNums"])
        group = request.messages[0].system_properties.message_group if len(request.messages) == 1 else ""
        if group:
            return consistent_hash(java_hash(group), n)
        self._rr += 1
        return self._rr % n

    async def _send_one(self, msg: Message, props: dict, qid: int, now: int):
        b = self.b
        msg.queue_id = qid
        if props.get(M.TRAN_MSG) == "true":
            if b.cfg.reject_transaction_message:
                raise Refused(pb.FORBIDDEN, "transaction messages are rejected by this broker")
            b.topics.create_if_absent(TRANS_HALF_TOPIC, 1, PERM_WRITE | PERM_READ)
            msg = M.half_message(msg, props)
            result = await self._put([msg])
            return self._entry(result, props, 0, result.msg_id if result.ok else None)
        try:
            msg = T.timer_message(msg, props, now)
        except T.TimerError as e:
            raise Refused(pb.ILLEGAL_DELIVERY_TIME, str(e)) from None
        msg.properties = M.java_properties(props)
        result = await self._put([msg])
        return self._entry(result, props, result.queue_offset if result.ok else 0, None)

    def _entry(self, result, props: dict, offset: int, transaction_id: str | None):
        if result.status is PutMessageStatus.PUT_OK:
            return pb.SendResultEntry(status=status(pb.OK), message_id=props[P.UNIQ_KEY], offset=offset,
                                      transaction_id=transaction_id or "")
        code = _PUT_CODES.get(result.status, pb.INTERNAL_SERVER_ERROR)
        return pb.SendResultEntry(status=status(code, f"send message failed, sendStatus={result.status.value}"
                                                f"{': ' + result.error if result.error else ''}"))

    # --- transactions -------------------------------------------------------------------------------
    async def EndTransaction(self, request, context):
        b = self.b
        res = request.resolution
        if res not in (pb.COMMIT, pb.ROLLBACK):
            return pb.EndTransactionResponse(status=status(pb.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK"))
        try:
            _, phy = decode_offset_msg_id(request.transaction_id)
        except (MessageIdError, TypeError):
            return pb.EndTransactionResponse(status=status(pb.INVALID_TRANSACTION_ID, f"transaction id "
                                                           f"{request.transaction_id!r} is not one this broker gave"))
        rec = b.store.look_message_by_offset(phy) if 0 <= phy < b.store.max_phy_offset else None
        if rec is None or rec.topic != TRANS_HALF_TOPIC or rec.properties.get(P.UNIQ_KEY) != request.message_id:
            return pb.EndTransactionResponse(status=status(pb.INVALID_TRANSACTION_ID, f"no half message "
                                                           f"{request.message_id!r} with transaction id "
                                                           f"{request.transaction_id!r}"))
        error = b.transactions.resolve(rec, commit=res == pb.COMMIT)
        if error:
            return pb.EndTransactionResponse(status=status(pb.INTERNAL_SERVER_ERROR, error))
        return pb.EndTransactionResponse(status=status(pb.OK))

    def ask_transaction(self, group: str, rec, phy: int) -> bool:
        """Send RecoverOrphanedTransactionCommand for the half message ``rec`` to a producer whose
        topics include ``group`` (the proxy's producer group of a gRPC message is its topic)."""
        props = rec.properties
        topic = props.get(M.REAL_TOPIC, "")
        targets = [c for c in self.clients.values() if c.outbox is not None and (group in c.topics or topic in c.topics)]
        if not targets:
            return False
        c = targets[self._rr % len(targets)]
        self._rr += 1
        cmd = pb.TelemetryCommand(recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
            message=to_message(rec, topic), transaction_id=rec.msg_id))
        try:
            c.outbox.put_nowait(cmd)
        except asyncio.QueueFull:
            return False
        return True

    # --- upstream RPCs this broker does not offer --------------------------------------------------------
    async def RecallMessage(self, request, context):
        return pb.RecallMessageResponse(status=status(pb.UNSUPPORTED, "RecallMessage is not supported"))

    async def SyncLiteSubscription(self, request, context):
        return pb.SyncLiteSubscriptionResponse(status=status(pb.UNSUPPORTED, "lite topics are not supported"))

    # --- housekeeping ----------------------------------------------------------------------------------
    def client_alive(self, client_id: str) -> bool:
        """Connected: its telemetry stream is open (or it was heard from within the last 30 s)."""
        c = self.clients.get(client_id)
        return c is not None and (c.outbox is not None or time.monotonic() - c.last_seen < 30)

    def expire_clients(self, max_idle_s: float) -> None:
        now = time.monotonic()
        for cid, c in list(self.clients.items()):
            if c.outbox is None and now - c.last_seen > max_idle_s:
                del self.clients[cid]


__all__ = ["MessagingService", "consistent_hash"]
