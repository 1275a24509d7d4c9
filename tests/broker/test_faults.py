"""Bad input and faults: malformed frames, clients that vanish or do not read, many idle
connections, a read-only broker that changes nothing."""
from __future__ import annotations

import json
import socket
import struct
import time

import pytest

from rmqstore.broker import remoting as R

C, RC = R.RequestCode, R.ResponseCode


def _closed_by_server(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


BAD_FRAMES = {
    "negative length": b"\xff\xff\xff\xf0",
    "length below 4": b"\x00\x00\x00\x02ab",
    "length past the frame limit": (R.MAX_FRAME + 1).to_bytes(4, "big"),
    "header length past the frame": (8).to_bytes(4, "big") + (1000).to_bytes(4, "big") + b"abcd",
    "invalid JSON": (9).to_bytes(4, "big") + (5).to_bytes(4, "big") + b"{abc}",
    "unknown serialize type": (6).to_bytes(4, "big") + ((9 << 24) | 2).to_bytes(4, "big") + b"{}",
    "binary header string past the end": (4 + 21).to_bytes(4, "big") + ((1 << 24) | 21).to_bytes(4, "big")
    + struct.pack(">hbhii", 10, 0, 0, 1, 0) + (500).to_bytes(4, "big") + b"\0" * 4,
}


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_malformed_frame_closes_only_that_connection(start_broker, connect, send_v2, name):
    b = start_broker()
    good = connect(b.address)
    assert send_v2(good, "T", b"before", queue_id=0).code == RC.SUCCESS
    written = b.store.max_phy_offset
    bad = socket.create_connection(("127.0.0.1", b.server_port))
    bad.sendall(BAD_FRAMES[name])
    assert _closed_by_server(bad), f"{name}: the connection stayed open"
    bad.close()
    assert b.store.max_phy_offset == written  # nothing written for it
    assert send_v2(good, "T", b"after", queue_id=0).code == RC.SUCCESS  # everyone else is still served
    assert b.server.errors == 0


def test_header_and_body_errors_are_answered_and_the_connection_lives(start_broker, connect, send_v2):
    b = start_broker()
    c = connect(b.address)
    r = c.call(C.PULL_MESSAGE, {"consumerGroup": "G", "topic": "T", "queueId": "x1"})
    assert r.code == RC.SYSTEM_ERROR and "queueId" in r.remark
    r = c.call(C.HEART_BEAT, None, b"{not json")
    assert r.code == RC.SYSTEM_ERROR and "not JSON" in r.remark
    r = c.call(C.GET_MAX_OFFSET, {"topic": "T", "queueId": "99999999999"})
    assert r.code == RC.SYSTEM_ERROR
    assert send_v2(c, "T", b"ok", queue_id=0).code == RC.SUCCESS


def test_client_vanishing_mid_request_and_mid_long_poll(start_broker, connect, send_v2):
    b = start_broker()
    frame = R.encode(R.request(C.GET_MAX_OFFSET, {"topic": "T", "queueId": 0}, opaque=1))
    s = socket.create_connection(("127.0.0.1", b.server_port))
    s.sendall(frame[:len(frame) // 2])  # half a frame, then gone
    s.close()
    held = socket.create_connection(("127.0.0.1", b.server_port))
    held.sendall(R.encode(R.request(C.PULL_MESSAGE, {
        "consumerGroup": "G", "topic": "TBW102", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 6,
        "commitOffset": 0, "suspendTimeoutMillis": 600, "subscription": "*"}, opaque=2)))
    time.sleep(0.1)
    held.close()  # its held pull is answered into a closed connection: nothing breaks
    time.sleep(0.8)
    c = connect(b.address)
    assert send_v2(c, "T", b"x", queue_id=0).code == RC.SUCCESS and b.server.errors == 0


def test_a_thousand_idle_connections(start_broker, connect, send_v2):
    b = start_broker()
    idle = [socket.create_connection(("127.0.0.1", b.server_port)) for _ in range(1000)]
    try:
        deadline = time.time() + 10
        while len(b.server.connections) < 1000 and time.time() < deadline:
            time.sleep(0.05)
        assert len(b.server.connections) >= 1000
        c = connect(b.address)
        t0 = time.monotonic()
        for i in range(50):
            assert send_v2(c, "T", b"x", queue_id=0).code == RC.SUCCESS
        assert time.monotonic() - t0 < 5
    finally:
        for s in idle:
            s.close()


def test_a_client_that_never_reads_is_paused_not_buffered(start_broker, connect, send_v2):
    """A peer that sends requests without reading answers: the server stops reading it once the
    answers it holds pass the write buffer's high-water mark (memory stays bounded) and keeps
    serving everyone else."""
    b = start_broker()
    c = connect(b.address)
    send_v2(c, "Big", b"x" * 200_000, queue_id=0)
    b.store.wait_dispatched(10)
    phy = 0
    slow = socket.create_connection(("127.0.0.1", b.server_port))
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.setblocking(False)
    req = R.encode(R.request(C.VIEW_MESSAGE_BY_ID, {"offset": phy}, opaque=1))
    sent = 0
    deadline = time.time() + 5
    while time.time() < deadline and sent < 2000:  # 2,000 answers of 200 kB would be 400 MB
        try:
            slow.send(req)
            sent += 1
        except BlockingIOError:
            time.sleep(0.01)
    time.sleep(0.5)
    conns = [x for x in b.server.connections if x.transport and x.transport.get_write_buffer_size() > 0]
    buffered = max((x.transport.get_write_buffer_size() for x in conns), default=0)
    assert buffered < 64 * 1024 * 1024, f"{buffered} bytes buffered for a client that does not read"
    t0 = time.monotonic()
    assert c.call(C.GET_MAX_OFFSET, {"topic": "Big", "queueId": 0}).ext["offset"] == "1"
    assert time.monotonic() - t0 < 2
    slow.close()


def test_read_only_broker_serves_reads_and_changes_nothing(start_broker, connect, send_v2, pull, stop_broker,
                                                           records_in, vectors):
    w = start_broker()
    c = connect(w.address)
    for i in range(5):
        send_v2(c, "RO", f"m{i}".encode(), queue_id=0, props=f"KEYS\x01k{i}\x02")
    c.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "RO", "queueId": 0, "commitOffset": 2})
    path = w.store.path
    stop_broker(w)
    before = vectors.tree_hashes(path)
    b = start_broker(path=path, read_only=True)
    r = connect(b.address)
    route = json.loads(r.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "RO"}).body)
    assert route["queueDatas"][0]["perm"] == 4
    resp = send_v2(r, "RO", b"no", queue_id=0)
    assert resp.code == RC.NO_PERMISSION and "read-only" in resp.remark
    assert len(records_in(pull(r, "G2", "RO", 0, 0).body)) == 5
    assert r.call(C.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "RO", "queueId": 0}).ext["offset"] == "2"
    assert r.call(C.QUERY_MESSAGE, {"topic": "RO", "key": "k3", "maxNum": 5, "beginTimestamp": 0,
                                    "endTimestamp": 2**62}).code == RC.SUCCESS
    r.call(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "RO", "queueId": 0, "commitOffset": 4})
    r.json_call(C.HEART_BEAT, None, {"clientID": "x", "consumerDataSet": [{"groupName": "New", "subscriptionDataSet":
                                                                           []}]})
    assert r.call(C.UPDATE_AND_CREATE_TOPIC, {"topic": "X", "readQueueNums": 1, "writeQueueNums": 1}).code \
        == RC.NO_PERMISSION
    stop_broker(b)
    assert vectors.tree_hashes(path) == before
