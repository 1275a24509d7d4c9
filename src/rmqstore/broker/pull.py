"""PULL_MESSAGE (11, and LITE_PULL_MESSAGE 361) with long polling, and the offset requests: QUERY/UPDATE
_CONSUMER_OFFSET (14/15), GET_MAX/MIN_OFFSET (30/31), SEARCH_OFFSET_BY_TIMESTAMP (29),
GET_EARLIEST_MSG_STORETIME (32). Upstream: ``PullMessageProcessor``, ``PullRequestHoldService``,
``ConsumerManageProcessor``, ``AdminBrokerProcessor``."""
from __future__ import annotations

import asyncio
import time
from collections import defaultdict

from ..types import GetMessageStatus
from .metadata import PERM_READ
from .remoting import Header, RemotingCommand, RequestCode, ResponseCode

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 1, 2, 4

_NOT_FOUND = (GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.OFFSET_OVERFLOW_ONE)
_RETRY = (GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MATCHED_MESSAGE)
_MOVED = (GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.OFFSET_TOO_SMALL)


class PullProcessor:
    def __init__(self, broker):
        self.broker = broker
        #: (topic, queue id) -> futures of held pulls waiting for a new message there
        self.waiters: dict[tuple[str, int], set[asyncio.Future]] = defaultdict(set)
        #: pulls answered [with messages, without]: brokerStatus's getFoundTps / getMissTps
        self.calls = [0, 0]

    def handlers(self) -> dict:
        return {RequestCode.PULL_MESSAGE: self.pull, RequestCode.LITE_PULL_MESSAGE: self.pull,
                RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
                RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
                RequestCode.GET_MAX_OFFSET: self.max_offset, RequestCode.GET_MIN_OFFSET: self.min_offset,
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
                RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_time}

    # --- long polling ----------------------------------------------------------------------------
    def notify(self, queues) -> None:
        """Dispatch added messages to ``queues``: wake the pulls held on them (event loop thread)."""
        for key in queues:
            for fut in self.waiters.pop(key, ()) if key in self.waiters else ():
                if not fut.done():
                    fut.set_result(True)

    async def wait_any(self, keys, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a message dispatched to any of the (topic, queue) ``keys`` (or
        for :meth:`notify` of one of them); True when woken."""
        fut = asyncio.get_running_loop().create_future()
        for key in keys:
            self.waiters[key].add(fut)
        try:
            return bool(await asyncio.wait_for(fut, timeout))
        except asyncio.TimeoutError:
            return False
        finally:
            for key in keys:
                waiting = self.waiters.get(key)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self.waiters[key]

    def wake_all(self) -> None:
        for futs in self.waiters.values():
            for fut in futs:
                if not fut.done():
                    fut.set_result(False)
        self.waiters.clear()

    # --- PULL_MESSAGE -----------------------------------------------------------------------------
    def pull(self, conn, cmd: RemotingCommand):
        h = Header(cmd)
        req = _PullRequest(h)
        response = self._check(cmd, req)
        if response is not None:
            return response
        response = self._pull_once(cmd, req)
        if response is not None:
            return response
        return self._hold(cmd, req)

    def _check(self, cmd: RemotingCommand, req: "_PullRequest") -> RemotingCommand | None:
        b = self.broker
        sg = b.groups.find(req.group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{req.group}] does "
                                "not exist")
        req.group_cfg = sg
        if not sg.get("consumeEnable", True):
            return cmd.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {req.group}")
        tc = b.topics.get(req.topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{req.topic}] not exist, apply first please!")
        if not tc["perm"] & PERM_READ:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{req.topic}] pulling message is forbidden")
        if req.queue_id < 0 or req.queue_id >= tc["readQueueNums"]:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"queueId[{req.queue_id}] is illegal, topic:[{req.topic}] "
                                f"topicConfig.readQueueNums:[{tc['readQueueNums']}]")
        if not req.flag & FLAG_SUBSCRIPTION:
            group = b.clients.consumers.get(req.group)
            sub = group.subscriptions.get(req.topic) if group else None
            if sub is None:
                return cmd.response(ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's subscription not exist, "
                                    f"group: {req.group}")
            req.subscription = str(sub.get("subString") or "*")
        if req.expression_type not in ("TAG", ""):
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"expression type {req.expression_type} is "
                                "not supported by this broker (TAG only)")
        return None

    def _pull_once(self, cmd: RemotingCommand, req: "_PullRequest", final: bool = False) -> RemotingCommand | None:
        """The response to the pull, or None when it should be held for new messages."""
        b = self.broker
        store = b.store
        r = store.get_message(req.group, req.topic, req.queue_id, req.offset, req.max_nums, req.subscription)
        status = r.status
        body = b""
        if status is GetMessageStatus.FOUND and r.messages:
            body = store.records_bytes(r.messages)
            code = ResponseCode.SUCCESS
            b.stats.got(len(r.messages))
            b.traffic.out(req.topic, req.group, len(r.messages), len(body))
        elif status is GetMessageStatus.FOUND or status in _RETRY:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
            code = ResponseCode.PULL_OFFSET_MOVED if req.offset != 0 else ResponseCode.PULL_NOT_FOUND
        elif status in _NOT_FOUND:
            code = ResponseCode.PULL_NOT_FOUND
        elif status in _MOVED:
            code = ResponseCode.PULL_OFFSET_MOVED
        else:
            code = ResponseCode.PULL_NOT_FOUND
        if code == ResponseCode.PULL_NOT_FOUND and req.suspend and not final:
            return None
        if req.flag & FLAG_COMMIT_OFFSET and not final and req.commit_offset >= 0:
            b.commit_offset(req.group, req.topic, req.queue_id, req.commit_offset)
        # upstream's tryCommitOffset: where the group's consumer will pull next (the inflight metric)
        store.consumer_offsets.commit_pull_offset(req.group, req.topic, req.queue_id, r.next_begin_offset)
        self.calls[0 if code == ResponseCode.SUCCESS else 1] += 1
        return cmd.response(code, None if code == ResponseCode.SUCCESS else status.value,
                            {"suggestWhichBrokerId": b.cluster.suggest_broker_id(req.group_cfg, _end(r)),
                             "nextBeginOffset": r.next_begin_offset,
                             "minOffset": r.min_offset, "maxOffset": r.max_offset}, body)

    async def _hold(self, cmd: RemotingCommand, req: "_PullRequest") -> RemotingCommand:
        """``PullRequestHoldService``: wait for a message in the queue up to the client's suspend time
        (``shortPollingTimeMills`` without long polling), then answer the pull again."""
        b = self.broker
        if req.flag & FLAG_COMMIT_OFFSET and req.commit_offset >= 0:
            b.commit_offset(req.group, req.topic, req.queue_id, req.commit_offset)
        timeout_ms = req.suspend_ms if b.cfg.long_polling_enable else b.cfg.short_polling_time_mills
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        loop = asyncio.get_running_loop()
        key = (req.topic, req.queue_id)
        while not b.stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            fut = loop.create_future()
            self.waiters[key].add(fut)
            # a message dispatched between the pull and now must not be missed
            if b.store.get_max_offset_in_queue(req.topic, req.queue_id) > req.offset:
                self.waiters[key].discard(fut)
                if not self.waiters[key]:
                    del self.waiters[key]
            else:
                try:
                    await asyncio.wait_for(fut, left)
                except asyncio.TimeoutError:
                    break
                finally:
                    waiting = self.waiters.get(key)
                    if waiting is not None:
                        waiting.discard(fut)
                        if not waiting:
                            del self.waiters[key]
            response = self._pull_once(cmd, req, final=False) if not b.stopping else None
            if response is not None:
                return response
        return self._pull_once(cmd, req, final=True)

    # --- offsets ------------------------------------------------------------------------------------
    def query_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """The group's committed offset; for a group without one, 0 when the queue still starts at 0
        and its first message is in memory (a new group then reads from the start), else
        QUERY_NOT_FOUND (the client then starts where its consumeFromWhere says)."""
        h = Header(cmd)
        group, topic, qid = h.str("consumerGroup"), h.str("topic"), h.int("queueId")
        store = self.broker.store
        offset = store.consumer_offsets.query_offset(group, topic, qid)
        if offset is not None and offset >= 0:
            return cmd.response(ResponseCode.SUCCESS, None, {"offset": offset})
        zero_if_not_found = h.str("setZeroIfNotFound", None)
        if zero_if_not_found is None or zero_if_not_found.lower() == "true":
            if store.get_min_offset_in_queue(topic, qid) <= 0 and self.first_in_memory(topic, qid):
                return cmd.response(ResponseCode.SUCCESS, None, {"offset": 0})
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot "
                            "first")

    def first_in_memory(self, topic: str, qid: int) -> bool:
        """``checkInMemByConsumeOffset(topic, qid, 0, 1)``: the queue's message 0 is within the last
        ``accessMessageInMemoryMaxRatio`` % of RAM worth of commitlog."""
        store = self.broker.store
        if store.get_max_offset_in_queue(topic, qid) <= 0:
            return False
        try:
            phy = store.get_commit_log_offset_in_queue(topic, qid, 0)
        except Exception:  # noqa: BLE001 - a unit that cannot be read is not "in memory"
            return False
        return phy >= 0 and store.max_phy_offset - phy <= store.memory_limit_bytes()

    def update_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        self.broker.commit_offset(h.str("consumerGroup"), h.str("topic"), h.int("queueId"), h.long("commitOffset"))
        return cmd.response(ResponseCode.SUCCESS)

    def max_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        return cmd.response(ResponseCode.SUCCESS, None, {
            "offset": self.broker.store.get_max_offset_in_queue(h.str("topic"), h.int("queueId"))})

    def min_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        return cmd.response(ResponseCode.SUCCESS, None, {
            "offset": self.broker.store.get_min_offset_in_queue(h.str("topic"), h.int("queueId"))})

    def search_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        boundary = "upper" if h.str("boundaryType", "LOWER").upper() == "UPPER" else "lower"
        offset = self.broker.store.get_offset_in_queue_by_time(h.str("topic"), h.int("queueId"), h.long("timestamp"),
                                                               boundary)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": offset})

    def earliest_time(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = Header(cmd)
        ts = self.broker.store.get_earliest_message_time(h.str("topic"), h.int("queueId"))
        if ts < 0:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"Find earliest msg store time failed, topic: "
                                f"{h.str('topic')}, queueId: {h.int('queueId')}")
        return cmd.response(ResponseCode.SUCCESS, None, {"timestamp": ts})


class _PullRequest:
    __slots__ = ("group", "topic", "queue_id", "offset", "max_nums", "flag", "commit_offset", "suspend_ms",
                 "subscription", "expression_type", "suspend", "group_cfg")

    def __init__(self, h: Header):
        self.group = h.str("consumerGroup")
        self.topic = h.str("topic")
        self.queue_id = h.int("queueId")
        self.offset = h.long("queueOffset")
        self.max_nums = max(0, h.int("maxMsgNums"))
        self.flag = h.int("sysFlag")
        self.commit_offset = h.long("commitOffset", -1)
        self.suspend_ms = h.long("suspendTimeoutMillis", 0)
        self.subscription = h.str("subscription", None)
        self.expression_type = (h.str("expressionType", "TAG") or "TAG").upper()
        self.suspend = bool(self.flag & FLAG_SUSPEND)
        self.group_cfg: dict = {}


def _end(r) -> int | None:
    """Where the pulled messages end in the commitlog (None when none were pulled)."""
    if not r.messages:
        return None
    last = r.messages[-1]
    return last.phy_offset + last.store_size
