"""The pop state (``broker/pop.py``) and the timer (``broker/timer.py``) on a store, without the
network: what a restart rebuilds from the revive topic, revival into the retry topic, FIFO holds and
attempts, the revive offset, and timer messages delivered once across a restart."""
from __future__ import annotations

import json
import time

import pytest

from rmqstore import Message, MessageStore
from rmqstore.broker import Broker, BrokerConfig
from rmqstore.broker import pop as POP
from rmqstore.broker import timer as T

from .conftest import broker_store_config


@pytest.fixture
def open_broker(tmp_path):
    """A broker that is not started (its services are called directly); reopening = a restart."""
    opened = []

    def _open(**group_fields) -> Broker:
        for b in opened:
            if not getattr(b, "_closed_for_test", False):
                b.persist()
                b.store.close()
                b._closed_for_test = True
        st = MessageStore.open(tmp_path / "store", broker_store_config())
        b = Broker(st, BrokerConfig(broker_name="broker-a"), listen="127.0.0.1:0")
        b.pops.recover()
        opened.append(b)
        return b

    yield _open
    for b in opened:
        if not getattr(b, "_closed_for_test", False):
            b.store.close()


def _put(b: Broker, topic: str, n: int, qid: int = 0, **props) -> None:
    b.topics.create_if_absent(topic, 4)
    for i in range(n):
        b.store.put_message(Message.create(topic, f"{topic}-{i}".encode(), queue_id=qid, properties=props or None))
    b.store.wait_dispatched()


def _pop(b, group="G", topic="T", n=8, invisible=5000, fifo=False, max_attempts=17):
    out = b.pops.pop(POP.PopRequest(group, topic, [0, 1, 2, 3], n, invisible, fifo=fifo, subscription="*",
                                    max_attempts=max_attempts))
    b.store.wait_dispatched()
    return out


def test_acked_messages_stay_acked_across_a_restart(open_broker):
    b = open_broker()
    _put(b, "T", 3)
    got = _pop(b)
    assert [p.record.body for p in got] == [b"T-0", b"T-1", b"T-2"]
    assert all(p.attempt == 1 for p in got)
    for p in got:
        b.pops.ack("G", "T", p.handle)
    b.pops.revive_due()
    assert b.pops.in_flight() == 0
    b2 = open_broker()
    assert b2.pops.in_flight() == 0
    b2.pops.revive_due(int(time.time() * 1000) + 60_000)  # long after any invisible time: nothing comes back
    b2.store.wait_dispatched()
    assert _pop(b2) == []
    assert b2.store.get_max_offset_in_queue(POP.retry_topic("G", "T"), 0) == 0


def test_unacked_messages_come_back_after_a_restart_with_the_next_attempt(open_broker):
    b = open_broker()
    _put(b, "T", 2)
    got = _pop(b, invisible=2000)
    b.pops.ack("G", "T", got[0].handle)
    b2 = open_broker()
    assert b2.pops.in_flight("G") == 1
    assert _pop(b2) == []  # still invisible, and the group's offset is past both
    n = b2.pops.revive_due(int(time.time() * 1000) + 3000)
    assert n == 1
    b2.store.wait_dispatched()
    again = _pop(b2)
    assert [(p.record.body, p.attempt, p.topic) for p in again] == [(b"T-1", 2, "T")]
    retry = POP.retry_topic("G", "T")
    assert again[0].record.topic == retry
    assert again[0].record.properties["RETRY_TOPIC"] == "T"
    assert again[0].record.properties["UNIQ_KEY"] == got[1].record.properties["UNIQ_KEY"]
    # the handle of a retry message names the retry topic (topic type 1) and acks it
    assert again[0].handle.split(" ")[4] == POP.RETRY_TOPIC
    b2.pops.ack("G", "T", again[0].handle)
    assert b2.pops.in_flight() == 0


def test_revive_offset_advances_past_closed_checkpoints(open_broker):
    b = open_broker()
    _put(b, "T", 4)
    got = _pop(b, n=2) + _pop(b, n=2)
    revive = b.pops.revive_topic
    for p in got:
        b.pops.ack("G", "T", p.handle)
    b.pops.revive_due()
    b.store.wait_dispatched()
    end = b.store.get_max_offset_in_queue(revive, 0)
    assert end == 2 + 4  # two checkpoints, four acks
    assert b.store.consumer_offsets.query_offset(POP.REVIVE_GROUP, revive, 0) == end
    # a checkpoint left open holds the revive offset at its own position
    _put(b, "T", 1)
    open_ck = _pop(b)
    b.pops.revive_due()
    assert b.store.consumer_offsets.query_offset(POP.REVIVE_GROUP, revive, 0) == end
    rec = b.store.get_message("x", revive, 0, end, 1).messages[0]
    body = json.loads(rec.body)
    assert rec.properties["TAGS"] == POP.CK_TAG and "UNIQ_KEY" not in rec.properties
    assert (body["c"], body["t"], body["so"], body["d"], body["rt"]) == ("G", "T", open_ck[0].record.queue_offset,
                                                                          [0], [0])


def test_max_attempts_send_the_message_to_the_dead_letter_topic(open_broker):
    b = open_broker()
    _put(b, "T", 1)
    got = _pop(b, invisible=1000, max_attempts=2)
    b.pops.revive_due(int(time.time() * 1000) + 1500)  # attempt 1 not acked -> retry
    b.store.wait_dispatched()
    got = _pop(b, invisible=1000, max_attempts=2)
    assert got[0].attempt == 2
    b.groups.put({"groupName": "G", "retryMaxTimes": 1})
    b.pops.revive_due(int(time.time() * 1000) + 1500)  # attempt 2 was the last
    b.store.wait_dispatched()
    dead = b.store.get_message("x", "%DLQ%G", 0, 0, 8).messages
    assert [d.body for d in dead] == [b"T-0"] and dead[0].properties["DLQ_ORIGIN_TOPIC"] == "T"
    assert _pop(b, max_attempts=2) == []


def test_fifo_queue_is_held_and_attempts_survive_a_restart(open_broker):
    b = open_broker()
    _put(b, "T", 4, qid=1)
    got = _pop(b, n=32, fifo=True, invisible=1000)
    assert [p.record.queue_offset for p in got] == [0, 1, 2, 3]
    assert _pop(b, fifo=True) == []  # held
    new_handle = b.pops.change_invisible("G", "T", got[0].handle, 1000)
    b.pops.ack("G", "T", got[1].handle)
    assert _pop(b, fifo=True) == []  # still held: 0 (renewed), 2 and 3 are open
    assert b.store.consumer_offsets.query_offset("G", "T", 1) == 0  # the first open offset
    b.pops.ack("G", "T", new_handle)
    assert b.store.consumer_offsets.query_offset("G", "T", 1) == 2
    b.pops.revive_due(int(time.time() * 1000) + 2000)  # 2 and 3 expire: attempt 2 next time
    b2 = open_broker()  # a restart between the expiry and the next receive
    b2.pops.revive_due(int(time.time() * 1000) + 2000)
    again = _pop(b2, n=32, fifo=True, invisible=1000)
    assert [(p.record.queue_offset, p.attempt) for p in again] == [(2, 2), (3, 2)]
    for p in again:
        b2.pops.ack("G", "T", p.handle)
    assert b2.store.consumer_offsets.query_offset("G", "T", 1) == 4
    assert _pop(b2, fifo=True) == []


def test_receipt_handles(open_broker):
    b = open_broker()
    _put(b, "T", 1)
    p = _pop(b)[0]
    parts = p.handle.split(" ")
    assert len(parts) == 9 and parts[5] == "broker-a" and int(parts[7]) == p.record.queue_offset
    assert int(parts[8]) == p.record.phy_offset
    with pytest.raises(POP.PopError) as e:
        b.pops.ack("G", "T", "x y z")
    assert e.value.kind == "invalid_handle"
    with pytest.raises(POP.PopError):
        b.pops.ack("OtherGroup", "T", p.handle)
    b.pops.ack("G", "T", p.handle)
    with pytest.raises(POP.PopError) as e:
        b.pops.ack("G", "T", p.handle)
    assert e.value.kind == "invalid_handle"


def test_timer_messages_are_delivered_once_across_a_restart(open_broker):
    b = open_broker()
    now = int(time.time() * 1000)
    b.topics.create_if_absent("D", 1)
    for i, at in enumerate((now + 1000, now + 500, now + 60_000)):
        props = {"TIMER_DELIVER_MS": str(at), "UNIQ_KEY": f"U{i}"}
        msg = T.timer_message(Message(topic="D", body=f"d{i}".encode(), properties=props), dict(props), now)
        assert msg.topic == T.TIMER_TOPIC and dict(msg.properties)["REAL_TOPIC"] == "D"
        b.store.put_message(msg)
    b.store.wait_dispatched()
    assert b.timer.deliver_due(now) == 0
    assert b.timer.deliver_due(now + 700) == 1  # the earliest first
    b.timer.persist()
    b2 = open_broker()
    assert b2.timer.deliver_due(now + 1200) == 1  # the one delivered before the restart is not again
    b2.store.wait_dispatched()
    got = b2.store.get_message("x", "D", 0, 0, 8).messages
    assert [m.body for m in got] == [b"d1", b"d0"]
    assert b2.timer.pending() == 1


def test_timer_properties_parsed_as_java_does():
    now = 1_000_000
    assert T.deliver_time({"TIMER_DELAY_SEC": "5"}, now) == now + 5000
    assert T.deliver_time({"TIMER_DELAY_MS": "250"}, now) == now + 250
    assert T.deliver_time({}, now) is None
    with pytest.raises(T.TimerError):
        T.deliver_time({"TIMER_DELIVER_MS": " 5"}, now)  # Long.parseLong does not trim
    with pytest.raises(T.TimerError):
        T.deliver_time({"TIMER_DELAY_SEC": str(4 * 86400)}, now)  # longer than upstream's 3 days
    # due already: stored as a normal message
    props = {"TIMER_DELIVER_MS": str(now - 1)}
    assert T.timer_message(Message(topic="X", properties=props), dict(props), now).topic == "X"


def test_auto_renew_extends_the_invisible_time_while_the_client_is_connected(open_broker):
    b = open_broker()
    _put(b, "T", 2)
    t0 = int(time.time() * 1000)
    got = b.pops.pop(POP.PopRequest("G", "T", [0, 1, 2, 3], 8, POP.DEFAULT_INVISIBLE_MS, fifo=False, subscription="*",
                                    max_attempts=17, renew_client="c1"))
    assert len(got) == 2
    connected = {"c1"}
    # 5 s before the end: renewed by the default invisible time (the client is connected)
    assert b.pops.revive_due(t0 + 55_000, alive=connected.__contains__) == 0
    assert b.pops.revive_due(t0 + 61_000, alive=lambda c: False) == 0  # past the first end: still invisible
    b.pops.ack("G", "T", got[0].handle)  # the handle from the receive still acks
    b2 = open_broker()  # the renewal is durable; the client link is not
    assert b2.pops.in_flight("G") == 1
    assert b2.pops.revive_due(t0 + 61_000) == 0
    assert b2.pops.revive_due(t0 + 116_000) == 1
    # a client that went away is not renewed for
    b2.store.wait_dispatched()
    again = b2.pops.pop(POP.PopRequest("G", "T", [0, 1, 2, 3], 8, POP.DEFAULT_INVISIBLE_MS, fifo=False,
                                       subscription="*", max_attempts=17, renew_client="c2"))
    assert [p.attempt for p in again] == [2]
    t1 = int(time.time() * 1000)
    assert b2.pops.revive_due(t1 + 61_000, alive=lambda c: False) == 1
