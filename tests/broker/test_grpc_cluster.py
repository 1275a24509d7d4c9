"""RocketMQ 5's gRPC clients in a cluster of two broker groups behind one name server: each broker
answers routes from the name server, as RocketMQ's proxy inside a broker does (every group's queues,
each broker at its own host with the one gRPC port), so the unmodified Python client sends to both
groups through one endpoint and a simple consumer receives from both. The two brokers listen on
127.0.0.1 and 127.0.0.2 (one port, two loopback addresses), as two hosts would."""
from __future__ import annotations

import socket

import pytest

from rmqstore import MessageStore
from rmqstore.broker import Broker, BrokerConfig
from rmqstore.broker import remoting as R
from rmqstore.broker.messaging import routing
from rmqstore.broker.messaging.protocol import pb
from rmqstore.broker.namesrv import NamesrvCode as N
from rmqstore.engine.consumer_offsets import parse_broker_json

from tests.broker.conftest import broker_store_config
from tests.kit import wait_for

FAST = {"minInvisibleTimeMillsForRecv": "1000", "grpcClientConsumerMinLongPollingTimeoutMillis": "1000"}


def _port_free_on_both() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as t:
                t.bind(("127.0.0.2", port))
            return port
        except OSError:
            continue
    raise AssertionError("no port free on both 127.0.0.1 and 127.0.0.2")


@pytest.fixture
def cluster(tmp_path, namesrv):
    ns = namesrv()
    port = _port_free_on_both()
    started = []
    for name, host in (("broker-a", "127.0.0.1"), ("broker-b", "127.0.0.2")):
        st = MessageStore.open(tmp_path / name, broker_store_config())
        cfg = BrokerConfig.from_properties({"brokerName": name, "brokerClusterName": "c1", **FAST})
        b = Broker(st, cfg, listen=f"{host}:0", grpc_listen=f"{host}:{port}", namesrv_addr=ns.address)
        b.start()
        started.append(b)
    yield ns, started
    for b in reversed(started):
        b.stop()
        b.store.close()


def _in_route(ns, brokers, topic: str, connect) -> dict:
    """Create ``topic`` (4 queues) on every broker and wait until the name server routes it to all."""
    for b in brokers:
        b.topics.create_if_absent(topic, 4)
    c = connect(ns.address)

    def routed():
        r = c.call(N.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        doc = parse_broker_json(r.body.decode()) if r.code == R.ResponseCode.SUCCESS else {}
        return doc if len(doc.get("queueDatas") or []) == len(brokers) else None

    return wait_for(routed, what=f"the name server routing {topic} to every broker")


def test_one_endpoint_sends_to_and_receives_from_both_groups(cluster, grpc_py, connect):
    ns, (a, b) = cluster
    _in_route(ns, (a, b), "Spread", connect)
    c = grpc_py()
    c.call("producer", endpoints=a.grpc_address, topics=["Spread"])
    sent = c.call("send_many", topic="Spread", n=40, prefix="m-")["ids"]
    on_a = sum(a.store.get_max_offset_in_queue("Spread", q) for q in range(4))
    on_b = sum(b.store.get_max_offset_in_queue("Spread", q) for q in range(4))
    assert on_a + on_b == 40 and on_a > 0 and on_b > 0  # the client spread its sends over both groups
    c.call("consumer", endpoints=a.grpc_address, group="GSpread", topic="Spread", await_s=1)
    counts = c.call("receive_all", n_expected=40, invisible_s=30, ack=True, timeout_s=60)["counts"]
    assert sorted(counts) == sorted(sent) and set(counts.values()) == {1}


def test_routes_name_every_broker_and_assignments_only_masters(cluster, connect):
    from tests.broker.test_grpc_protocol import Api
    from tests.broker.test_namesrv import register, topic

    ns, (a, b) = cluster
    _in_route(ns, (a, b), "Routed", connect)
    slave = "127.0.0.3:10921"  # a slave of broker-b (registered by hand: its host has no broker here)
    assert register(connect(ns.address), "broker-b", slave, 1, [topic("Routed"), topic("c1", 16, 7)],
                    cluster="c1").code == 0
    port = int(a.grpc_address.rsplit(":", 1)[1])
    api = Api(a.grpc_address)
    try:
        r = api.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="Routed")))
        assert r.status.code == pb.OK
        got = sorted({(q.broker.name, q.broker.id, q.broker.endpoints.addresses[0].host,
                       q.broker.endpoints.addresses[0].port) for q in r.message_queues})
        assert got == [("broker-a", 0, "127.0.0.1", port), ("broker-b", 0, "127.0.0.2", port),
                       ("broker-b", 1, "127.0.0.3", port)]
        assert len(r.message_queues) == 12 and {q.permission for q in r.message_queues} == {pb.READ_WRITE}
        r = api.QueryAssignment(pb.QueryAssignmentRequest(topic=pb.Resource(name="Routed"),
                                                          group=pb.Resource(name="G")))
        assert sorted((x.message_queue.broker.name, x.message_queue.broker.id, x.message_queue.id)
                      for x in r.assignments) == [("broker-a", 0, -1), ("broker-b", 0, -1)]
        # a topic the name server does not know yet (created here by the query): this broker's queues
        r = api.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="OnlyHere")))
        assert r.status.code == pb.OK and {q.broker.name for q in r.message_queues} == {"broker-a"}
        assert [q.id for q in r.message_queues] == list(range(a.topics.get("OnlyHere")["readQueueNums"]))
    finally:
        api.close()


def test_queue_ids_follow_upstreams_order_for_uneven_read_and_write_queues():
    def kinds(perm, rn, wn):
        qs = routing.queues_of({"perm": perm, "readQueueNums": rn, "writeQueueNums": wn},
                               pb.Resource(name="T"), pb.Broker(name="b"), [pb.NORMAL])
        return [(q.id, q.permission) for q in qs]

    # read-only ids first, then write-only, then read-write (RouteActivity.genMessageQueueFromQueueData)
    assert kinds(6, 6, 4) == [(0, pb.READ), (1, pb.READ)] + [(i, pb.READ_WRITE) for i in range(2, 6)]
    assert kinds(6, 2, 4) == [(0, pb.WRITE), (1, pb.WRITE), (2, pb.READ_WRITE), (3, pb.READ_WRITE)]
    assert kinds(2, 8, 3) == [(i, pb.WRITE) for i in range(3)]
    assert kinds(4, 3, 8) == [(i, pb.READ) for i in range(3)]
    assert kinds(0, 0, 0) == [(0, pb.NONE)] and kinds(1, 2, 3) == [(i, pb.NONE) for i in range(3)]
