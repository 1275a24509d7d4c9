"""The broker's group commit (broker/group_commit.py): sends arriving together on many connections are
put as one group and each answered with its own result; under SYNC_FLUSH the group-commit thread
puts them with one flush wait per group; a failing group put answers SYSTEM_ERROR and the broker
keeps serving."""
from __future__ import annotations

import socket

from rmqstore.broker import remoting as R
from rmqstore.broker.remoting import RequestCode as C

SEND_EXT = {"producerGroup": "P", "topic": "G", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4, "queueId": 0,
            "sysFlag": 0, "bornTimestamp": 1_700_000_000_000, "flag": 0, "reconsumeTimes": 0}


def _burst(address: str, conns: int, per_conn: int) -> list[R.RemotingCommand]:
    """Every connection writes all its sends before any answer is read (they reach the broker together)."""
    host, _, port = address.rpartition(":")
    socks = [socket.create_connection((host, int(port)), timeout=20) for _ in range(conns)]
    frames = [b"".join(R.encode(R.request(C.SEND_MESSAGE, dict(SEND_EXT, properties=f"KEYS\x01k{c}-{i}\x02"),
                                          f"{c}-{i}".encode(), opaque=i)) for i in range(per_conn))
              for c in range(conns)]
    for s, f in zip(socks, frames):
        s.sendall(f)
    out = []
    for s in socks:
        reader, got = R.FrameReader(), []
        while len(got) < per_conn:
            got += reader.feed(s.recv(1 << 16))
        out += [R.decode(f) for f in got]
        s.close()
    return out


def _check_answers(answers, n):
    assert len(answers) == n and all(a.code == R.ResponseCode.SUCCESS for a in answers)
    offsets = sorted(int(a.ext["queueOffset"]) for a in answers)
    assert offsets == list(range(n))  # each answer its own queue offset
    assert len({a.ext["msgId"] for a in answers}) == n


def test_sends_from_many_connections_are_put_as_groups(start_broker, connect):
    b = start_broker()
    _check_answers(_burst(b.address, 6, 20), 120)
    g = b.put_groups
    assert g.puts == 120 and g.groups < g.puts  # several sends per group
    b.store.wait_dispatched(10)
    r = connect(b.address).call(C.PULL_MESSAGE, {"consumerGroup": "CG", "topic": "G", "queueId": 0, "queueOffset": 0,
                                                 "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0,
                                                 "suspendTimeoutMillis": 0, "subscription": "*"})
    assert r.code == R.ResponseCode.SUCCESS and int(r.ext["nextBeginOffset"]) == 32


def test_sync_flush_puts_groups_on_the_group_commit_thread(start_broker, monkeypatch):
    b = start_broker(flush_disk_type="SYNC_FLUSH")
    cl = b.store.commit_log
    waits = []
    sync_to = cl.sync_to
    monkeypatch.setattr(cl, "sync_to", lambda end: waits.append(end) or sync_to(end))
    _check_answers(_burst(b.address, 6, 20), 120)
    assert 0 < len(waits) <= b.put_groups.groups < 120  # one flush wait per group (or fewer: queued groups merge)
    assert cl.flushed_offset >= max(waits)


def test_a_failing_group_put_answers_system_error_and_serving_goes_on(start_broker, connect, monkeypatch):
    b = start_broker()
    real = b.put_items
    monkeypatch.setattr(b, "put_items", lambda items: (_ for _ in ()).throw(OSError("disk gone")))
    c = connect(b.address)
    r = c.call(C.SEND_MESSAGE, dict(SEND_EXT, properties=""), b"x")
    assert r.code == R.ResponseCode.SYSTEM_ERROR and "disk gone" in r.remark
    monkeypatch.setattr(b, "put_items", real)
    r = c.call(C.SEND_MESSAGE, dict(SEND_EXT, properties=""), b"y")
    assert r.code == R.ResponseCode.SUCCESS and r.ext["queueOffset"] == "0"


def _on_loop(b, fn):
    """Run ``fn()`` on the broker's event loop and return its result."""
    import asyncio

    async def call():
        return fn()
    return asyncio.run_coroutine_threadsafe(call(), b.loop).result(10)


def test_a_group_soon_after_a_round_is_dispatched_with_the_next_ones(start_broker, monkeypatch):
    """A group of several sends within a millisecond of the last dispatch round waits for the rest of
    that millisecond (the round takes the groups of that time); when the time is up while a group is
    about to be put, that group's commit dispatches, after its answers."""
    import time

    b = start_broker()
    rounds = []
    real = b.store.dispatch
    monkeypatch.setattr(b.store, "dispatch", lambda: rounds.append(time.monotonic()) or real())

    def recent_round_then_one_send():
        b._last_dispatch = time.monotonic()
        b.dispatch_after_puts(3)
        return b._dispatch_scheduled, len(rounds)
    assert _on_loop(b, recent_round_then_one_send) == (True, 0)  # not at once: a timer
    deadline = time.monotonic() + 5
    while not rounds and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(rounds) == 1 and not b._dispatch_scheduled

    def due_while_a_group_waits():
        b.put_groups.scheduled = True  # (a commit is queued in this pass of the loop)
        try:
            b._dispatch_due()
        finally:
            b.put_groups.scheduled = False
        skipped = len(rounds)
        b.dispatch_after_puts(2)  # the commit: its round goes at once
        return skipped, len(rounds)
    assert _on_loop(b, due_while_a_group_waits) == (1, 2)


def test_a_lone_send_is_dispatched_at_once(start_broker, monkeypatch):
    """Even right after a round: its producer prepares the next send meanwhile."""
    import time

    b = start_broker()
    rounds = []
    real = b.store.dispatch
    monkeypatch.setattr(b.store, "dispatch", lambda: rounds.append(1) or real())

    def one_send_after_a_round():
        b._last_dispatch = time.monotonic()
        b.dispatch_after_puts(1)
        return len(rounds), b._dispatch_scheduled
    assert _on_loop(b, one_send_after_a_round) == (1, False)


def test_a_lone_send_is_committed_at_the_end_of_its_read(start_broker, connect):
    """No other callback waits in the loop's pass: the group is committed when the read's frames are
    handled, not one more pass (a poll) later; sends that arrive together still form one group."""
    b = start_broker()
    at_end = []
    done = b.server.after_read

    def after_read():
        at_end.append(b.put_groups.after_read)
        done()
    b.server.after_read = after_read
    c = connect(b.address)
    for i in range(3):
        r = c.call(C.SEND_MESSAGE, dict(SEND_EXT, topic="Lone", properties=""), b"x%d" % i)
        assert r.code == R.ResponseCode.SUCCESS and r.ext["queueOffset"] == str(i)
    assert at_end.count(True) >= 2  # (one read may have come with another callback due in its pass)
    _check_answers(_burst(b.address, 4, 10), 40)  # together: still grouped
    assert b.put_groups.groups < b.put_groups.puts


def _raw_answers(address: str, cmds: list[R.RemotingCommand]) -> list[bytes]:
    """Each command's answer frame, as the broker wrote it (length prefix included)."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        out, reader = [], R.FrameReader()
        for cmd in cmds:
            s.sendall(R.encode(cmd))
            got = []
            while not got:
                got = reader.feed(s.recv(1 << 16))
            out += [len(f).to_bytes(4, "big") + f for f in got]
    return out


def test_a_send_answer_is_the_encoders_frame(start_broker):
    """The send's answer frame, formatted by the send processor for JSON requests, is byte for byte
    what the encoder writes for the command it decodes to, with the put's values; a ROCKETMQ-serialized
    request is answered in its serialization."""
    b = start_broker(broker={"regionId": 'Re"gion\\é', "traceOn": "false"})
    uniqs = ["0100007F00000EF10000000000000001", 'u "q\\é\u2028', None]
    cmds = [R.request(C.SEND_MESSAGE, dict(SEND_EXT, properties=f"UNIQ_KEY\x01{u}\x02" if u else "KEYS\x01k\x02"),
                      b"body", opaque=40 + i) for i, u in enumerate(uniqs)]
    cmds.append(R.request(C.SEND_MESSAGE, dict(SEND_EXT, properties="UNIQ_KEY\x01x\x02"), b"body", opaque=9,
                          serialize=R.ROCKETMQ))
    frames = _raw_answers(b.address, cmds)
    for i, (frame, u) in enumerate(zip(frames, uniqs + ["x"])):
        answer = R.decode(frame[4:])
        assert R.encode(answer) == frame
        assert answer.opaque == cmds[i].opaque and answer.code == R.ResponseCode.SUCCESS
        assert answer.serialize == cmds[i].serialize
        ext = answer.ext
        assert ext["MSG_REGION"] == 'Re"gion\\é' and ext["TRACE_ON"] == "false"
        assert (ext["queueId"], ext["queueOffset"]) == ("0", str(i))
        if u is not None:  # (else the broker gave the message one: checked against the record below)
            assert ext["transactionId"] == u
        assert len(ext["msgId"]) == 32
        assert b.store.look_message_by_offset(int(ext["msgId"][16:], 16)).properties["UNIQ_KEY"] == ext["transactionId"]
