"""Retries and dead letters (CONSUMER_SEND_MSG_BACK), the delay service, transactions (half
messages, END_TRANSACTION, the check of open ones). Delay levels are 1 s each here."""
from __future__ import annotations

import json
import os
import time

from rmqstore.broker import remoting as R

C, RC = R.RequestCode, R.ResponseCode


def _wait_for(fn, timeout: float = 10.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(step)
    raise AssertionError(f"condition not met in {timeout}s")


def _all(c, pull, records_in, group: str, topic: str, queues: int = 1) -> list:
    out = []
    for q in range(queues):
        r = pull(c, group, topic, q, 0)
        if r.code == RC.SUCCESS:
            out += records_in(r.body)
    return out


def test_send_back_retries_with_delay_then_dead_letters(start_broker, connect, send_v2, pull, records_in,
                                                         props_text):
    b = start_broker()
    c = connect(b.address)
    send_v2(c, "Work", b"job", queue_id=0, props=props_text(TAGS="t", KEYS="job-1", UNIQ_KEY="AA" * 16))
    b.store.wait_dispatched(10)
    (orig,) = records_in(pull(c, "G", "Work", 0, 0).body)
    phy, seen = orig.phy_offset, []
    for attempt in range(3):  # maxReconsumeTimes 2 from the header: two retries, then the dead-letter topic
        r = c.call(C.CONSUMER_SEND_MSG_BACK, {"offset": phy, "group": "G", "delayLevel": 0, "originMsgId": orig.msg_id,
                                              "originTopic": "Work", "unitMode": "false", "maxReconsumeTimes": 2})
        assert r.code == RC.SUCCESS, r.remark
        if attempt == 2:
            break
        t0 = time.monotonic()
        got = _wait_for(lambda: _all(c, pull, records_in, "G", "%RETRY%G")[len(seen):])
        waited = time.monotonic() - t0
        rec = got[0]
        seen.append(rec)
        assert waited >= 0.5, "delivered before its delay level's time"
        assert rec.reconsume_times == attempt + 1 and rec.body == b"job" and rec.tags == "t"
        assert rec.properties["RETRY_TOPIC"] == "Work" and rec.properties["ORIGIN_MESSAGE_ID"] == orig.msg_id
        assert rec.properties["DELAY"] == str(3 + attempt)  # level 3 + reconsumeTimes, as upstream
        phy = rec.phy_offset
    b.store.wait_dispatched(10)
    (dead,) = _all(c, pull, records_in, "G", "%DLQ%G")
    assert dead.reconsume_times == 3 and dead.body == b"job" and dead.properties["ORIGIN_MESSAGE_ID"] == orig.msg_id
    assert b.topics.get("%DLQ%G")["perm"] == 6
    r = c.call(C.CONSUMER_SEND_MSG_BACK, {"offset": 10**9, "group": "G", "delayLevel": 0})
    assert r.code == RC.SYSTEM_ERROR and "look message by offset failed" in r.remark


def test_retry_topic_send_past_max_goes_to_dead_letters(start_broker, connect, send_v2, pull, records_in):
    b = start_broker()
    c = connect(b.address)
    c.json_call(C.HEART_BEAT, None, {"clientID": "x", "consumerDataSet": [{"groupName": "G", "messageModel":
                                                                           "CLUSTERING", "subscriptionDataSet": []}]})
    r = send_v2(c, "%RETRY%G", b"r", queue_id=0, reconsume=5, extra={"maxReconsumeTimes": 3})
    assert r.code == RC.SUCCESS
    b.store.wait_dispatched(10)
    (dead,) = _all(c, pull, records_in, "G", "%DLQ%G")
    assert dead.properties["DELAY"] == "-1" and dead.reconsume_times == 5


def test_delayed_message_is_delivered_when_due_and_offsets_persist(start_broker, connect, send_v2, pull,
                                                                    records_in, props_text, stop_broker):
    b = start_broker()
    c = connect(b.address)
    t_send = time.monotonic()
    assert send_v2(c, "D", b"later", queue_id=2, props=props_text(DELAY="2", TAGS="x")).code == RC.SUCCESS
    b.store.wait_dispatched(10)
    assert pull(c, "G", "D", 2, 0).code != RC.SUCCESS  # not visible before its time
    (rec,) = _wait_for(lambda: _all(c, pull, records_in, "G", "D", 4))
    assert time.monotonic() - t_send >= 0.9
    assert rec.queue_id == 2 and rec.body == b"later" and rec.tags == "x"
    assert (rec.properties["REAL_TOPIC"], rec.properties["REAL_QID"], rec.properties["DELAY"]) == ("D", "2", "2")
    path = b.store.path
    stop_broker(b)
    doc = json.loads(open(os.path.join(path, "config", "delayOffset.json")).read())
    assert doc["offsetTable"] == {"2": 1}
    b2 = start_broker(path=path)  # delivered once: a restart does not deliver it again
    time.sleep(1.5)
    c2 = connect(b2.address)
    assert len(_all(c2, pull, records_in, "G", "D", 4)) == 1


def _tx_send(c, send_v2, props_text, topic: str, uniq: str):
    return send_v2(c, topic, b"tx-" + uniq.encode(), queue_id=1, sys_flag=4, group="TXG",
                   props=props_text(TRAN_MSG="true", PGROUP="TXG", UNIQ_KEY=uniq, KEYS="k-" + uniq))


def test_commit_and_rollback(start_broker, connect, send_v2, pull, records_in, props_text):
    b = start_broker()
    c = connect(b.address)
    commit, rollback = (_tx_send(c, send_v2, props_text, "Pay", u) for u in ("C" * 32, "D" * 32))
    assert commit.code == RC.SUCCESS and rollback.code == RC.SUCCESS
    b.store.wait_dispatched(10)
    assert pull(c, "G", "Pay", 1, 0).code != RC.SUCCESS  # a half message is not consumable
    halves = _all(c, pull, records_in, "G", "RMQ_SYS_TRANS_HALF_TOPIC")
    assert [h.properties["REAL_TOPIC"] for h in halves] == ["Pay", "Pay"] and halves[0].sys_flag & 0xC == 0
    for resp, kind in ((commit, 8), (rollback, 12)):
        half = next(h for h in halves if h.msg_id == resp.ext["msgId"])
        r = c.call(C.END_TRANSACTION, {"producerGroup": "TXG", "tranStateTableOffset": half.queue_offset,
                                       "commitLogOffset": half.phy_offset, "commitOrRollback": kind,
                                       "fromTransactionCheck": "false", "msgId": half.uniq_key,
                                       "transactionId": half.uniq_key})
        assert r.code == RC.SUCCESS, r.remark
    b.store.wait_dispatched(10)
    (done,) = _all(c, pull, records_in, "G", "Pay", 4)
    assert done.body == b"tx-" + b"C" * 32 and done.sys_flag & 0xC == 8 and done.queue_id == 1
    assert done.prepared_transaction_offset == next(h.phy_offset for h in halves if h.uniq_key == "C" * 32)
    ops = _all(c, pull, records_in, "G", "RMQ_SYS_TRANS_OP_HALF_TOPIC")
    assert sorted(o.body for o in ops) == [b"0,", b"1,"] and {o.tags for o in ops} == {"d"}
    r = c.call(C.END_TRANSACTION, {"producerGroup": "OTHER", "tranStateTableOffset": 0,
                                   "commitLogOffset": halves[0].phy_offset, "commitOrRollback": 8})
    assert r.code == RC.SYSTEM_ERROR and "producer group" in r.remark


def test_open_transaction_is_checked_with_its_producer(start_broker, connect, send_v2, records_in, props_text):
    b = start_broker(broker={"transactionTimeOut": "200", "transactionCheckInterval": "100"})
    producer = connect(b.address)
    producer.json_call(C.HEART_BEAT, None, {"clientID": "p@1", "producerDataSet": [{"groupName": "TXG"}],
                                            "consumerDataSet": []})
    sent = _tx_send(producer, send_v2, props_text, "Pay", "E" * 32)
    check = producer.read()  # CHECK_TRANSACTION_STATE, oneway, to a producer of the group
    assert check.code == C.CHECK_TRANSACTION_STATE and check.is_oneway
    assert check.ext["transactionId"] == "E" * 32 and check.ext["msgId"] == "E" * 32
    (rec,) = records_in(check.body)
    assert rec.uniq_key == "E" * 32 and rec.properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert rec.msg_id == check.ext["offsetMsgId"] != sent.ext["msgId"]  # the renewed half message
    producer.send(C.END_TRANSACTION, {"producerGroup": "TXG", "tranStateTableOffset": check.ext["tranStateTableOffset"],
                                      "commitLogOffset": check.ext["commitLogOffset"], "commitOrRollback": 8,
                                      "fromTransactionCheck": "true", "msgId": "E" * 32}, oneway=True)
    _wait_for(lambda: b.store.get_max_offset_in_queue("Pay", 1) == 1)


def test_remoting_timer_properties_delay_the_message(start_broker, connect, send_v2, pull, records_in, props_text):
    """RocketMQ 5's timer properties from a remoting producer (``Message.setDeliverTimeMs`` and friends)
    go through the timer topic, as upstream's put path does, and arrive when due; a malformed value is
    MESSAGE_ILLEGAL (``Long.parseLong``)."""
    b = start_broker()
    c = connect(b.address)
    at = int(time.time() * 1000) + 1500
    r = send_v2(c, "Later", b"at a time", queue_id=0, props=props_text(TIMER_DELIVER_MS=str(at), UNIQ_KEY="BB" * 16))
    assert r.code == RC.SUCCESS
    r = send_v2(c, "Later", b"in a second", queue_id=0, props=props_text(TIMER_DELAY_SEC="1", UNIQ_KEY="CC" * 16))
    assert r.code == RC.SUCCESS
    assert send_v2(c, "Later", b"x", queue_id=0, props=props_text(TIMER_DELIVER_MS="soon")).code == \
        RC.MESSAGE_ILLEGAL
    b.store.wait_dispatched(10)
    assert pull(c, "G", "Later", 0, 0).code != RC.SUCCESS  # not there yet
    (parked_a, parked_b) = records_in(pull(c, "G", "rmq_sys_wheel_timer", 0, 0).body)
    assert parked_a.properties["REAL_TOPIC"] == "Later" and parked_a.properties["TIMER_OUT_MS"] == str(at)
    got = _wait_for(lambda: _all(c, pull, records_in, "G", "Later") if len(_all(c, pull, records_in, "G", "Later"))
                    == 2 else None)
    assert sorted(m.body for m in got) == [b"at a time", b"in a second"]
    timed = next(m for m in got if m.body == b"at a time")
    assert timed.store_timestamp >= at and timed.properties["UNIQ_KEY"] == "BB" * 16
