"""Routes for RocketMQ 5 clients, as RocketMQ's proxy running inside a broker (local mode) answers.

A broker that is its own name server answers QueryRoute and QueryAssignment with its own queues. A
broker in a cluster (given name servers) answers with the topic's route from the name servers, as
upstream's ``LocalTopicRouteService`` + ``ProxyTopicRouteData(route, grpcPort)`` do: every broker
group's queues, each broker (master and slaves) named with its remoting address's host and *this*
broker's gRPC port (the brokers of a cluster serve gRPC on one port, as upstream's local proxies).
Clients send to and receive from the masters only. A topic the name servers do not know yet (a
topic just created here, before the next registration) or name servers that do not answer leave the
broker's own queues. Routes are kept :data:`ROUTE_TTL_S` seconds.

Queue ids per queue data follow upstream's ``RouteActivity.genMessageQueueFromQueueData``: the
read-only queues first, then the write-only ones, then the read-write ones (for a topic whose read
and write queue numbers differ, the ids of the write queues are not 0..w-1 there; reproduced).
"""
from __future__ import annotations

import time

from ...format import properties as P
from .. import messages as M
from .. import timer as T
from ..metadata import PERM_READ, PERM_WRITE, TOPIC_ATTRIBUTES
from ..routes import MASTER_ID
from .convert import SHARDING_KEY
from .protocol import pb

#: seconds a topic's route from the name servers is reused
ROUTE_TTL_S = 5.0
#: routes kept at most
MAX_ROUTES = 4096


def local_route(broker_name: str, tc: dict) -> dict:
    """The route of a topic on this broker alone (``LocalTopicRouteService.toTopicRouteData``)."""
    return {"brokerDatas": [{"brokerName": broker_name, "brokerAddrs": {MASTER_ID: None}}],
            "queueDatas": [{"brokerName": broker_name, "perm": tc["perm"], "readQueueNums": tc["readQueueNums"],
                            "writeQueueNums": tc["writeQueueNums"], "topicSysFlag": tc.get("topicSysFlag", 0)}]}


#: ``TopicMessageType``: the values of a topic's ``message.type`` attribute
TOPIC_TYPES = TOPIC_ATTRIBUTES["message.type"][1]
_ACCEPTED = {"NORMAL": [pb.NORMAL], "FIFO": [pb.FIFO], "DELAY": [pb.DELAY], "TRANSACTION": [pb.TRANSACTION],
             "MIXED": [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]}
#: the properties that make a message a DELAY one (``TopicMessageType.parseFromMessageProperty``)
_DELAY_PROPERTIES = (P.DELAY, T.TIMER_DELIVER_MS, T.TIMER_DELAY_SEC, T.TIMER_DELAY_MS)


def topic_message_type(tc: dict) -> str:
    """``TopicConfig.getTopicMessageType``: the topic's ``message.type`` attribute, NORMAL without
    one (a value that is no type reads as UNSPECIFIED, where upstream's ``valueOf`` would throw)."""
    attrs = tc.get("attributes") or {}
    kind = attrs.get("message.type", attrs.get("+message.type"))
    if kind is None:
        return "NORMAL"
    kind = str(kind).upper()
    return kind if kind in TOPIC_TYPES else "UNSPECIFIED"


def accept_types(topic_type: str) -> list[int]:
    """``RouteActivity.parseTopicMessageType``: the message types a topic's queues accept."""
    return _ACCEPTED.get(topic_type, [pb.MESSAGE_TYPE_UNSPECIFIED])


def message_type(props: dict) -> str:
    """``TopicMessageType.parseFromMessageProperty``: TRANSACTION, DELAY, FIFO or NORMAL, in that order."""
    if props.get(M.TRAN_MSG) == "true":
        return "TRANSACTION"
    if any(props.get(name) is not None for name in _DELAY_PROPERTIES):
        return "DELAY"
    return "FIFO" if props.get(SHARDING_KEY) is not None else "NORMAL"


def type_conflict(topic_type: str, props: dict) -> str | None:
    """``DefaultTopicMessageTypeValidator.validate``, as the proxy calls it for a send (unless the
    message carries ``TRANSFER_FLAG``): the refusal's text when the message's type is not the
    topic's and the topic is not MIXED, else None."""
    if "TRANSFER_FLAG" in props:
        return None
    kind = message_type(props)
    if kind != topic_type and topic_type != "MIXED":
        return f"TopicMessageType validate failed, the expected type is {topic_type}, but actual type is {kind}"
    return None


def endpoints(host: str, port: int):
    return pb.Endpoints(scheme=pb.IPv6 if ":" in host else pb.IPv4, addresses=[pb.Address(host=host, port=port)])


def broker_map(route: dict, own: tuple[str, int]) -> dict[str, dict[int, object]]:
    """``RouteActivity.buildBrokerMap``: broker name -> broker id -> ``pb.Broker``. A broker address
    None is this broker (``own``: its gRPC endpoint); another is its host with ``own``'s port."""
    out: dict[str, dict[int, object]] = {}
    for bd in route.get("brokerDatas") or []:
        name = bd.get("brokerName", "")
        ids = out.setdefault(name, {})
        for bid, addr in (bd.get("brokerAddrs") or {}).items():
            host = own[0] if addr is None else str(addr).rpartition(":")[0].strip("[]")
            ids[int(bid)] = pb.Broker(name=name, id=int(bid), endpoints=endpoints(host, own[1]))
    return out


def _permission(perm: int) -> int:
    r, w = perm & PERM_READ, perm & PERM_WRITE
    return pb.READ_WRITE if r and w else pb.READ if r else pb.WRITE if w else pb.NONE


def queues_of(qd: dict, topic, broker, accept: list[int]) -> list:
    """``genMessageQueueFromQueueData``: read-only ids first, then write-only, then read-write; a queue
    data neither readable nor writable gives ``max(1, queues)`` queues without permission."""
    perm, rn, wn = int(qd.get("perm", 0)), int(qd.get("readQueueNums", 0)), int(qd.get("writeQueueNums", 0))
    readable, writable = perm & PERM_READ, perm & PERM_WRITE
    r = w = rw = n = 0
    if readable and writable:
        rw = min(rn, wn)
        r, w = rn - rw, wn - rw
    elif writable:
        w = wn
    elif readable:
        r = rn
    else:
        n = max(1, rn, wn)
    kinds = [pb.READ] * r + [pb.WRITE] * w + [pb.READ_WRITE] * rw + [pb.NONE] * n
    return [pb.MessageQueue(topic=topic, id=i, permission=p, broker=broker, accept_message_types=accept)
            for i, p in enumerate(kinds)]


def route_queues(route: dict, topic, own: tuple[str, int], accept: list[int]) -> list:
    """QueryRoute's queues: every queue data's queues on every broker of its group (upstream stops at
    the first queue data whose group has no broker)."""
    brokers = broker_map(route, own)
    out: list = []
    for qd in route.get("queueDatas") or []:
        ids = brokers.get(qd.get("brokerName", ""))
        if ids is None:
            break
        for broker in ids.values():
            out.extend(queues_of(qd, topic, broker, accept))
    return out


def assignments(route: dict, topic, own: tuple[str, int], fifo: bool) -> list:
    """``RouteActivity.queryAssignment``: per readable queue data with a master, one assignment of
    queue id -1 (the broker picks the queue at each receive), or, for a group that consumes orderly
    (``fifo``), one per read queue with its id. As upstream's, the queues carry no accepted message
    types."""
    brokers = broker_map(route, own)
    out = []
    for qd in route.get("queueDatas") or []:
        master = brokers.get(qd.get("brokerName", ""), {}).get(MASTER_ID)
        perm, reads = int(qd.get("perm", 0)), int(qd.get("readQueueNums", 0))
        if master is None or not perm & PERM_READ or reads <= 0:
            continue
        for qid in range(reads) if fifo else (-1,):
            mq = pb.MessageQueue(topic=topic, id=qid, permission=_permission(perm), broker=master)
            out.append(pb.Assignment(message_queue=mq))
    return out


class RouteCache:
    """Topic routes from the name servers (``BrokerOuterAPI.topic_route``), each kept
    :data:`ROUTE_TTL_S` seconds; a topic they do not know is not kept."""

    def __init__(self, outer, ttl_s: float = ROUTE_TTL_S):
        self.outer = outer
        self.ttl_s = ttl_s
        self._routes: dict[str, tuple[float, dict]] = {}

    async def get(self, topic: str) -> dict | None:
        now = time.monotonic()
        hit = self._routes.get(topic)
        if hit is not None and hit[0] > now:
            return hit[1]
        route = await self.outer.topic_route(topic)
        if route is None:
            self._routes.pop(topic, None)
            return None
        if len(self._routes) >= MAX_ROUTES:  # bounded: drop what expired, or everything
            self._routes = {t: v for t, v in self._routes.items() if v[0] > now}
            if len(self._routes) >= MAX_ROUTES:
                self._routes.clear()
        self._routes[topic] = (now + self.ttl_s, route)
        return route
