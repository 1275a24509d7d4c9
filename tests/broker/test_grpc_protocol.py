"""The gRPC ``MessagingService`` at the protocol level (grpcio stubs from the same .proto files):
routes, the settings handshake, sends, the receive stream, receipt handles, offsets, pull, TLS, and
bad input (malformed protobufs, unknown topics and groups, oversized bodies, forged handles,
clients that go away mid-stream)."""
from __future__ import annotations

import hashlib
import subprocess
import threading
import time

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from rmqstore.broker.messaging.protocol import pb, services
from rmqstore.broker.messaging.service import consistent_hash
from rmqstore.broker.metadata import topic_config

FAST = {"minInvisibleTimeMillsForRecv": 1000, "grpcClientConsumerMinLongPollingTimeoutMillis": 200,
        "grpcClientConsumerMaxLongPollingTimeoutMillis": 3000}
META = (("x-mq-client-id", "test-client-1"), ("x-mq-language", "PYTHON"))


class Api:
    def __init__(self, address: str, credentials=None):
        self.channel = (grpc.secure_channel(address, credentials, options=[("grpc.ssl_target_name_override",
                                                                             "localhost")])
                        if credentials else grpc.insecure_channel(address))
        self.stub = services.MessagingServiceStub(self.channel)
        self.address = address

    def __getattr__(self, name):
        rpc = getattr(self.stub, name)

        def call(request, metadata=META, timeout=20):
            result = rpc(request, metadata=metadata, timeout=timeout)
            return list(result) if name in ("ReceiveMessage", "PullMessage") else result

        return call

    def send(self, topic: str, body: bytes, **sp):
        sp.setdefault("message_id", hashlib.md5(body + str(time.time_ns()).encode()).hexdigest().upper())
        return self.SendMessage(pb.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(**sp))]))

    def receive(self, group: str, topic: str, *, n: int = 32, invisible_ms: int = 5000, poll_ms: int = 500,
                metadata=META, **kw):
        req = pb.ReceiveMessageRequest(
            group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression=kw.pop("tag", "*")), batch_size=n,
            invisible_duration=Duration(seconds=invisible_ms // 1000, nanos=(invisible_ms % 1000) * 1_000_000),
            long_polling_timeout=Duration(seconds=poll_ms // 1000, nanos=(poll_ms % 1000) * 1_000_000), **kw)
        return self.ReceiveMessage(req, metadata=metadata)

    def ack(self, group: str, topic: str, *handles: str):
        return self.AckMessage(pb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                                    entries=[pb.AckMessageEntry(receipt_handle=h) for h in handles]))

    def close(self):
        self.channel.close()


@pytest.fixture
def api():
    opened = []

    def _api(address, credentials=None) -> Api:
        a = Api(address, credentials)
        opened.append(a)
        return a

    yield _api
    for a in opened:
        a.close()


def _messages(stream) -> list:
    return [r.message for r in stream if r.WhichOneof("content") == "message"]


def test_query_route_and_assignment(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    b.topics.create_if_absent("R", 4)
    a = api(b.grpc_address)
    r = a.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="R")))
    assert r.status.code == pb.OK
    assert [q.id for q in r.message_queues] == [0, 1, 2, 3]
    q = r.message_queues[0]
    host, port = b.grpc_address.rsplit(":", 1)
    assert q.permission == pb.READ_WRITE and q.broker.name == "broker-a"
    assert (q.broker.endpoints.addresses[0].host, q.broker.endpoints.addresses[0].port) == (host, int(port))
    assert list(q.accept_message_types) == [pb.NORMAL]  # a topic without message.type is NORMAL
    r = a.QueryAssignment(pb.QueryAssignmentRequest(topic=pb.Resource(name="R"), group=pb.Resource(name="G")))
    assert r.status.code == pb.OK and len(r.assignments) == 1 and r.assignments[0].message_queue.id == -1
    # as upstream: a group that consumes orderly gets one assignment per read queue; no accepted types
    b.groups.put({"groupName": "GF", "consumeMessageOrderly": True})
    r = a.QueryAssignment(pb.QueryAssignmentRequest(topic=pb.Resource(name="R"), group=pb.Resource(name="GF")))
    assert r.status.code == pb.OK and [x.message_queue.id for x in r.assignments] == [0, 1, 2, 3]
    assert {x.message_queue.permission for x in r.assignments} == {pb.READ_WRITE}
    assert all(x.message_queue.broker.name == "broker-a" and not x.message_queue.accept_message_types
               for x in r.assignments)
    assert a.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="bad topic!"))).status.code == pb.ILLEGAL_TOPIC
    for system in ("TBW102", "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC"):
        r = a.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=system)))
        assert (r.status.code, r.status.message) == (pb.ILLEGAL_TOPIC, "cannot access system topic")
        assert a.send(system, b"x").status.code == pb.ILLEGAL_TOPIC
    assert a.receive("CID_RMQ_SYS_TRANS", "R")[0].status.code == pb.ILLEGAL_CONSUMER_GROUP


def test_unknown_topics_and_groups_when_nothing_is_auto_created(start_broker, api):
    b = start_broker(grpc=True, broker={**FAST, "autoCreateTopicEnable": "false",
                                        "autoCreateSubscriptionGroup": "false"})
    a = api(b.grpc_address)
    r = a.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="Nope")))
    assert r.status.code == pb.TOPIC_NOT_FOUND and "Nope" in r.status.message
    assert a.send("Nope", b"x").status.code == pb.TOPIC_NOT_FOUND
    b.topics.create_if_absent("Yes", 1)
    stream = a.receive("NoGroup", "Yes")
    assert stream[0].status.code == pb.CONSUMER_GROUP_NOT_FOUND
    assert stream[-1].WhichOneof("content") == "delivery_timestamp"
    r = a.Heartbeat(pb.HeartbeatRequest(group=pb.Resource(name="NoGroup"), client_type=pb.SIMPLE_CONSUMER))
    assert r.status.code == pb.CONSUMER_GROUP_NOT_FOUND
    assert b.store.max_phy_offset == 0  # nothing was written


def test_settings_handshake_completes_publishing_and_subscription(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    b.groups.put({"groupName": "GS", "consumeMessageOrderly": True, "retryMaxTimes": 4})
    a = api(b.grpc_address)
    pub = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")]),
                      request_timeout=Duration(seconds=3))
    sub = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name="GS")))
    answers = list(a.stub.Telemetry(iter([pb.TelemetryCommand(settings=pub), pb.TelemetryCommand(settings=sub)]),
                                    metadata=META, timeout=10))
    assert [x.status.code for x in answers] == [pb.OK, pb.OK]
    p, s = answers[0].settings, answers[1].settings
    assert p.backoff_policy.max_attempts == 3 and p.backoff_policy.exponential_backoff.multiplier == 2
    assert p.publishing.max_body_size == b.store.cfg.max_message_size and p.publishing.validate_message_type
    assert p.request_timeout.seconds == 3 and not p.metric.on
    assert s.subscription.fifo and s.subscription.receive_batch_size == 32
    assert s.subscription.long_polling_timeout.seconds == 3
    assert s.backoff_policy.max_attempts == 5  # retryMaxTimes + 1
    assert len(s.backoff_policy.customized_backoff.next) == len(b.delay_levels_ms)
    # no client id: refused, on the stream and on a heartbeat
    no_id = list(a.stub.Telemetry(iter([pb.TelemetryCommand(settings=pub)]), timeout=10))
    assert no_id[0].status.code == pb.CLIENT_ID_REQUIRED
    assert a.Heartbeat(pb.HeartbeatRequest(), metadata=()).status.code == pb.CLIENT_ID_REQUIRED


def test_bad_sends_are_refused_and_write_nothing(start_broker, api):
    b = start_broker(grpc=True, broker=FAST, max_message_size=1024)
    b.topics.create_if_absent("T", 2)
    b.topics.create_if_absent("U", 2)
    a = api(b.grpc_address)
    cases = [
        (dict(body=b""), pb.MESSAGE_BODY_EMPTY),
        (dict(body=b"x" * 1025), pb.MESSAGE_BODY_TOO_LARGE),
        (dict(body=b"x", message_id=""), pb.ILLEGAL_MESSAGE_ID),
        (dict(body=b"x", tag="a|b"), pb.ILLEGAL_MESSAGE_TAG),
        (dict(body=b"x", keys=["two words"]), pb.ILLEGAL_MESSAGE_KEY),
        (dict(body=b"x", message_group="g\x01"), pb.ILLEGAL_MESSAGE_GROUP),
    ]
    for kw, code in cases:
        body = kw.pop("body")
        r = a.send("T", body, **kw)
        assert r.status.code == code, (kw, r.status)
        assert r.status.message
    r = a.SendMessage(pb.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name="T"), body=b"x", user_properties={"TAGS": "sneaky"},
        system_properties=pb.SystemProperties(message_id="A1"))]))
    assert r.status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    r = a.SendMessage(pb.SendMessageRequest(messages=[
        pb.Message(topic=pb.Resource(name="T"), body=b"x", system_properties=pb.SystemProperties(message_id="A2")),
        pb.Message(topic=pb.Resource(name="U"), body=b"y", system_properties=pb.SystemProperties(message_id="A3"))]))
    assert r.status.code == pb.MESSAGE_CORRUPTED
    assert a.SendMessage(pb.SendMessageRequest()).status.code == pb.MESSAGE_CORRUPTED
    far = Timestamp(seconds=int(time.time()) + 10 * 86400)
    assert a.send("T", b"x", delivery_timestamp=far).status.code == pb.ILLEGAL_DELIVERY_TIME
    assert b.store.max_phy_offset == 0


def test_several_messages_in_one_send_and_message_groups(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    _typed(b, "M", "MIXED")  # normal and FIFO messages alike
    a = api(b.grpc_address)
    msgs = [pb.Message(topic=pb.Resource(name="M"), body=f"b{i}".encode(), user_properties={"i": str(i)},
                       system_properties=pb.SystemProperties(message_id=f"ID{i}", tag="t")) for i in range(3)]
    r = a.SendMessage(pb.SendMessageRequest(messages=msgs))
    assert r.status.code == pb.OK
    assert [e.message_id for e in r.entries] == ["ID0", "ID1", "ID2"]
    assert [e.offset for e in r.entries] == [r.entries[0].offset + i for i in range(3)]
    b.store.wait_dispatched()
    # one message group always lands in the queue Guava's consistentHash picks (as the proxy does)
    from rmqstore.format.hashes import java_hash
    for group in ("order-1", "order-2", "customer-42"):
        q = consistent_hash(java_hash(group), 4)
        for _ in range(2):
            r = a.send("M", b"g", message_group=group)
            assert r.status.code == pb.OK
        b.store.wait_dispatched()
        recs = b.store.get_message("x", "M", q, 0, 64).messages
        assert sum(1 for m in recs if m.properties.get("__SHARDINGKEY") == group) == 2


def test_consistent_hash_is_guavas():
    # Guava's HashingTest golden values for consistentHash(long, int)
    assert [consistent_hash(i, 100) for i in range(20)] == [0, 55, 62, 8, 45, 59, 86, 97, 82, 59, 73, 37, 17, 56,
                                                            86, 21, 90, 37, 38, 83]
    assert consistent_hash(10863919174838991, 11) == 6
    assert consistent_hash(2016238256797177309, 11) == 3
    assert consistent_hash(1673758223894951030, 11) == 5


def test_malformed_protobuf_is_answered_and_the_server_keeps_serving(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    a = api(b.grpc_address)
    raw = a.channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage",
                                request_serializer=lambda x: x, response_deserializer=lambda x: x)
    with pytest.raises(grpc.RpcError) as e:
        raw(b"\xff\xff\xff\xff\x0f", metadata=META, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "SendMessageRequest" in e.value.details()
    unknown = a.channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchRpc",
                                    request_serializer=lambda x: x, response_deserializer=lambda x: x)
    with pytest.raises(grpc.RpcError) as e:
        unknown(b"", metadata=META, timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert a.send("Fine", b"still here").status.code == pb.OK
    assert b.store.max_phy_offset > 0


def test_receive_stream_shape_digest_and_auto_renew(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    a = api(b.grpc_address)
    body = b"\x00binary\xff" * 10
    assert a.send("RS", body, tag="t1", keys=["k1", "k2"]).status.code == pb.OK
    stream = a.receive("G", "RS", auto_renew=True, invisible_ms=0)
    kinds = [r.WhichOneof("content") for r in stream]
    assert kinds == ["status", "message", "delivery_timestamp"]
    assert stream[0].status.code == pb.OK
    m = stream[1].message
    assert m.body == body and m.system_properties.tag == "t1" and list(m.system_properties.keys) == ["k1", "k2"]
    assert m.system_properties.body_digest.type == pb.MD5
    assert m.system_properties.body_digest.checksum == hashlib.md5(body).hexdigest().upper()
    assert m.system_properties.invisible_duration.seconds == 60  # auto_renew: the proxy's default
    assert m.system_properties.delivery_attempt == 1 and m.system_properties.message_type == pb.NORMAL
    assert a.ack("G", "RS", m.system_properties.receipt_handle).status.code == pb.OK
    # nothing left: MESSAGE_NOT_FOUND after the long poll, then the closing timestamp
    empty = a.receive("G", "RS", poll_ms=300)
    assert [r.WhichOneof("content") for r in empty] == ["status", "delivery_timestamp"]
    assert empty[0].status.code == pb.MESSAGE_NOT_FOUND


def test_bad_receives(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    b.topics.create_if_absent("BR", 1)
    a = api(b.grpc_address)
    assert a.receive("G", "BR", invisible_ms=500)[0].status.code == pb.ILLEGAL_INVISIBLE_TIME
    assert a.receive("G", "BR", n=0)[0].status.code == pb.BAD_REQUEST
    assert a.receive("G", "BR", n=33)[0].status.code == pb.BAD_REQUEST
    sql = a.ReceiveMessage(pb.ReceiveMessageRequest(
        group=pb.Resource(name="G"), message_queue=pb.MessageQueue(topic=pb.Resource(name="BR")),
        filter_expression=pb.FilterExpression(type=pb.SQL, expression="a > 1"), batch_size=1,
        invisible_duration=Duration(seconds=5)))
    assert sql[0].status.code == pb.ILLEGAL_FILTER_EXPRESSION
    assert a.receive("G", "NoSuchTopic")[0].status.code == pb.TOPIC_NOT_FOUND
    assert a.receive("G", "BR", metadata=())[0].status.code == pb.CLIENT_ID_REQUIRED


def test_forged_stale_and_expired_receipt_handles_are_refused(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    a = api(b.grpc_address)
    for i in range(3):
        a.send("H", f"h{i}".encode())
    got = []
    while len(got) < 3:
        got += _messages(a.receive("G", "H", invisible_ms=1000))
    h0, h1, h2 = (m.system_properties.receipt_handle for m in got)
    parts = h0.split(" ")
    forged = " ".join(parts[:7] + [str(int(parts[7]) + 1000)] + parts[8:])
    cases = {"not a handle": pb.INVALID_RECEIPT_HANDLE, "1 2 3 4 5": pb.INVALID_RECEIPT_HANDLE,
             "a b c 0 0 broker-a 0 1 2": pb.INVALID_RECEIPT_HANDLE, forged: pb.INVALID_RECEIPT_HANDLE}
    r = a.ack("G", "H", *cases)
    assert [e.status.code for e in r.entries] == list(cases.values())
    assert r.status.code == pb.INVALID_RECEIPT_HANDLE
    # one good, one acked twice in the same request: MULTIPLE_RESULTS
    r = a.ack("G", "H", h0, h0)
    assert [e.status.code for e in r.entries] == [pb.OK, pb.INVALID_RECEIPT_HANDLE]
    assert r.status.code == pb.MULTIPLE_RESULTS
    # a handle of another group does not ack this group's message
    assert a.ack("G2", "H", h1).entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
    # change the invisible time: the old handle is stale, the new one works
    r = a.ChangeInvisibleDuration(pb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="G"), topic=pb.Resource(name="H"), receipt_handle=h1,
        invisible_duration=Duration(seconds=30)))
    assert r.status.code == pb.OK and r.receipt_handle != h1
    assert a.ack("G", "H", h1).entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
    assert a.ack("G", "H", r.receipt_handle).status.code == pb.OK
    # past its invisible time a handle is expired
    time.sleep(1.2)
    r = a.ack("G", "H", h2)
    assert r.status.code == pb.INVALID_RECEIPT_HANDLE and "expired" in r.status.message


def test_forward_to_dead_letter_queue(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    a = api(b.grpc_address)
    a.send("D", b"to the DLQ", message_id="DEAD1")
    m = _messages(a.receive("GD", "D"))[0]
    r = a.ForwardMessageToDeadLetterQueue(pb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name="GD"), topic=pb.Resource(name="D"), receipt_handle=m.system_properties.receipt_handle,
        message_id="DEAD1", delivery_attempt=1, max_delivery_attempts=1))
    assert r.status.code == pb.OK
    b.store.wait_dispatched()
    dead = b.store.get_message("x", "%DLQ%GD", 0, 0, 8).messages
    assert [d.body for d in dead] == [b"to the DLQ"]
    assert dead[0].properties["DLQ_ORIGIN_MESSAGE_ID"] == "DEAD1"
    assert a.ack("GD", "D", m.system_properties.receipt_handle).entries[0].status.code == pb.INVALID_RECEIPT_HANDLE


def test_a_client_that_goes_away_mid_stream_loses_nothing_and_blocks_no_one(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    b.topics.create_if_absent("V", 1)
    a = api(b.grpc_address)
    # a long poll cancelled while it waits
    call = a.stub.ReceiveMessage(pb.ReceiveMessageRequest(
        group=pb.Resource(name="GV"), message_queue=pb.MessageQueue(topic=pb.Resource(name="V")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=1,
        invisible_duration=Duration(seconds=2), long_polling_timeout=Duration(seconds=3)), metadata=META, timeout=10)
    threading.Timer(0.3, call.cancel).start()
    with pytest.raises(grpc.RpcError):
        list(call)
    a.send("V", b"after the cancel", message_id="V1")
    # a receive whose reader reads the status only, then goes away
    call = a.stub.ReceiveMessage(pb.ReceiveMessageRequest(
        group=pb.Resource(name="GV"), message_queue=pb.MessageQueue(topic=pb.Resource(name="V")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=1,
        invisible_duration=Duration(seconds=2), long_polling_timeout=Duration(seconds=3)), metadata=META, timeout=10)
    assert next(call).status.code == pb.OK
    call.cancel()
    # the message comes back (at the latest after its invisible time) to another reader
    got = []
    deadline = time.time() + 10
    while not got and time.time() < deadline:
        got = _messages(a.receive("GV", "V", invisible_ms=5000, poll_ms=1000))
    assert [m.system_properties.message_id for m in got] == ["V1"]
    assert a.ack("GV", "V", got[0].system_properties.receipt_handle).status.code == pb.OK


def test_offsets_and_pull(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    b.topics.create_if_absent("P", 1)
    a = api(b.grpc_address)
    for i in range(5):
        a.send("P", f"p{i}".encode())
    b.store.wait_dispatched()
    mq = pb.MessageQueue(topic=pb.Resource(name="P"), id=0)
    group = pb.Resource(name="GP")
    assert a.GetOffset(pb.GetOffsetRequest(group=group, message_queue=mq)).status.code == pb.OFFSET_NOT_FOUND
    assert a.UpdateOffset(pb.UpdateOffsetRequest(group=group, message_queue=mq, offset=2)).status.code == pb.OK
    r = a.GetOffset(pb.GetOffsetRequest(group=group, message_queue=mq))
    assert (r.status.code, r.offset) == (pb.OK, 2)
    assert b.store.consumer_offsets.query_offset("GP", "P", 0) == 2  # the group's one offset
    assert a.UpdateOffset(pb.UpdateOffsetRequest(group=group, message_queue=mq, offset=-1)).status.code == \
        pb.ILLEGAL_OFFSET
    q = a.QueryOffset(pb.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.END))
    assert (q.status.code, q.offset) == (pb.OK, 5)
    q = a.QueryOffset(pb.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.BEGINNING))
    assert q.offset == 0
    found, missed = b.pulls.calls
    pulled = a.PullMessage(pb.PullMessageRequest(group=group, message_queue=mq, offset=2, batch_size=10,
                                                 filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                                                 long_polling_timeout=Duration(seconds=0)))
    assert pulled[0].status.code == pb.OK
    assert [r.message.body for r in pulled if r.WhichOneof("content") == "message"] == [b"p2", b"p3", b"p4"]
    assert pulled[-1].next_offset == 5
    none = a.PullMessage(pb.PullMessageRequest(group=group, message_queue=mq, offset=5, batch_size=10,
                                               filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                                               long_polling_timeout=Duration(seconds=0)))
    assert none[0].status.code == pb.MESSAGE_NOT_FOUND
    assert b.pulls.calls == [found + 1, missed + 1]  # counted as remoting pulls are (getFoundTps, getMissTps)
    bad = pb.MessageQueue(topic=pb.Resource(name="P"), id=7)
    assert a.GetOffset(pb.GetOffsetRequest(group=group, message_queue=bad)).status.code == pb.BAD_REQUEST


def test_tls_endpoint(start_broker, api, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    b = start_broker(grpc_tls=(str(cert), str(key)), broker=FAST)
    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    a = api(b.grpc_address, creds)
    assert a.send("TLS", b"over tls").status.code == pb.OK
    plain = api(b.grpc_address)
    with pytest.raises(grpc.RpcError):
        plain.send("TLS", b"in the clear")


def test_a_frame_over_the_limit_is_refused_and_the_server_keeps_serving(start_broker, api):
    b = start_broker(grpc=True, broker=FAST, max_message_size=1024)  # frames up to 2 × 1 KiB + 1 MiB
    a = api(b.grpc_address)
    with pytest.raises(grpc.RpcError) as e:
        a.send("Big", b"x" * (2 << 20))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert b.store.max_phy_offset == 0
    assert a.send("Big", b"small").status.code == pb.OK


def _typed(b, topic: str, kind: str, queues: int = 4) -> None:
    b.topics.put(dict(topic_config(topic, queues), attributes={"message.type": kind}))


def test_routes_name_the_accepted_type_and_sends_of_another_type_are_refused(start_broker, api):
    b = start_broker(grpc=True, broker=FAST)
    b.topics.create_if_absent("Plain", 4)
    _typed(b, "Ordered", "FIFO")
    _typed(b, "Mixed", "MIXED")
    a = api(b.grpc_address)
    accepted = {t: {tuple(q.accept_message_types) for q in
                    a.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=t))).message_queues}
                for t in ("Plain", "Ordered", "Mixed")}
    assert accepted["Plain"] == {(pb.NORMAL,)} and accepted["Ordered"] == {(pb.FIFO,)}
    assert accepted["Mixed"] == {(pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)}
    before = b.store.max_phy_offset
    r = a.send("Plain", b"x", message_group="g1")
    assert (r.status.code, r.status.message) == (
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        "TopicMessageType validate failed, the expected type is NORMAL, but actual type is FIFO")
    r = a.send("Ordered", b"x")
    assert r.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE and "expected type is FIFO" in r.status.message
    assert b.store.max_phy_offset == before  # nothing refused was written
    for topic, kw in [("Plain", {}), ("Ordered", {"message_group": "g1"}), ("Mixed", {"message_group": "g1"}),
                      ("Mixed", {})]:
        assert a.send(topic, b"x", **kw).status.code == pb.OK, (topic, kw)


def test_the_type_check_off_accepts_any_type_and_tells_clients_not_to_check(start_broker, api):
    b = start_broker(grpc=True, broker={**FAST, "enableTopicMessageTypeCheck": "false"})
    b.topics.create_if_absent("Plain", 4)
    a = api(b.grpc_address)
    assert a.send("Plain", b"x", message_group="g1").status.code == pb.OK
    pub = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="Plain")]),
                      request_timeout=Duration(seconds=3))
    assert not b.messaging.settings_for(pub).publishing.validate_message_type
