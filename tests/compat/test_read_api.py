"""Read path: a RocketMQ-written store opened read-only answers exactly as the Java store did.

Every expectation comes from ``expected.json`` (``api`` section: answers of the running Java
``DefaultMessageStore``; ``raw`` section only where ``api`` has no field for it).
"""
from __future__ import annotations

import hashlib

import pytest

from rmqstore.format.msgid import parse_host

INT64_MAX = 2**63 - 1


# ------------------------------------------------------------------------------------------------
# Messages: lookMessageByOffset and viewMessageById
# ------------------------------------------------------------------------------------------------

def _assert_record(rec, exp):
    assert rec is not None, f"no record at {exp['phyOffset']}"
    got = {
        "phyOffset": rec.phy_offset, "storeSize": rec.store_size, "topic": rec.topic,
        "queueId": rec.queue_id, "queueOffset": rec.queue_offset, "flag": rec.flag, "sysFlag": rec.sys_flag,
        "bodyCRC": rec.body_crc, "bornTimestamp": rec.born_timestamp, "bornHost": rec.born_host,
        "storeTimestamp": rec.store_timestamp, "storeHost": rec.store_host,
        "reconsumeTimes": rec.reconsume_times, "preparedTransactionOffset": rec.prepared_transaction_offset,
        "bodyLength": len(rec.body), "bodySha256": hashlib.sha256(rec.body).hexdigest(),
        "properties": rec.properties, "offsetMsgId": rec.msg_id, "transactionType": rec.transaction_type,
        "bornHostBytes": parse_host(rec.born_host).hex().upper(),
        "storeHostBytes": parse_host(rec.store_host).hex().upper(),
    }
    want = {k: exp[k] for k in got}
    assert got == want
    assert rec.tags == exp.get("tags")
    assert rec.uniq_key == exp.get("uniqKey")
    assert rec.keys == (exp["keys"].split(" ") if exp.get("keys") else [])


def test_look_message_by_offset_matches_every_message(ro_store, vset):
    exp_msgs = vset.expected["api"]["messages"]
    assert len(exp_msgs) == len(vset.input["messages"])
    for exp in exp_msgs:
        _assert_record(ro_store.look_message_by_offset(exp["phyOffset"]), exp)


def test_view_message_by_id_matches_every_message(ro_store, vset):
    for exp in vset.expected["api"]["messages"]:
        _assert_record(ro_store.view_message_by_id(exp["offsetMsgId"]), exp)


def test_message_bodies_equal_the_input(ro_store, vset, vectors):
    """The api section hashes the body; the input says what the body was."""
    for exp, m in zip(vset.expected["api"]["messages"], vset.input["messages"]):
        assert ro_store.look_message_by_offset(exp["phyOffset"]).body == vectors.body_of(m)


def test_look_message_past_the_end_is_none(ro_store, vset):
    api = vset.expected["api"]
    assert ro_store.max_phy_offset == api["maxPhyOffset"]
    assert ro_store.min_phy_offset == api["minPhyOffset"]
    assert ro_store.look_message_by_offset(api["maxPhyOffset"]) is None
    assert ro_store.look_message_by_offset(api["maxPhyOffset"] + 1000) is None
    assert ro_store.look_message_by_offset(-1) is None


def test_earliest_message_time_of_the_store(ro_store, vset):
    first = min(vset.expected["api"]["messages"], key=lambda m: m["phyOffset"])
    assert first["phyOffset"] == vset.expected["api"]["minPhyOffset"]
    assert ro_store.get_earliest_message_time() == first["storeTimestamp"]


# ------------------------------------------------------------------------------------------------
# Consume queues
# ------------------------------------------------------------------------------------------------

def _queues(vset):
    for topic, queues in vset.expected["api"]["consumeQueues"].items():
        for qid, q in queues.items():
            yield topic, int(qid), q


def test_queue_min_max_total_and_earliest_time(ro_store, vset):
    n = 0
    for topic, qid, q in _queues(vset):
        n += 1
        mn, mx = ro_store.get_min_offset_in_queue(topic, qid), ro_store.get_max_offset_in_queue(topic, qid)
        assert (mn, mx, mx - mn) == (q["minOffset"], q["maxOffset"], q["messageTotalInQueue"]), (topic, qid)
        assert ro_store.get_earliest_message_time(topic, qid) == q["earliestMessageTime"], (topic, qid)
        cq = ro_store.find_consume_queue(topic, qid)
        assert cq.max_physic_offset == q["maxPhysicOffset"], (topic, qid)
        assert cq.min_logic_offset == q["minLogicOffset"], (topic, qid)
    assert n == sum(len(v) for v in vset.expected["raw"]["consumeQueues"].values())


def test_every_cq_unit_phy_offset_and_store_time(ro_store, vset):
    by_phy = vset.messages_by_phy
    units = 0
    for topic, qid, q in _queues(vset):
        for off, phy, size, tags in q["units"]:
            units += 1
            assert ro_store.get_commit_log_offset_in_queue(topic, qid, off) == phy
            assert ro_store.get_message_store_timestamp(topic, qid, off) == by_phy[phy]["storeTimestamp"]
            assert size == by_phy[phy]["storeSize"]
        assert ro_store.get_commit_log_offset_in_queue(topic, qid, q["maxOffset"]) == 0
        assert ro_store.get_message_store_timestamp(topic, qid, q["maxOffset"]) == -1
    assert units == len(vset.input["messages"])


def test_store_time_answers(ro_store, vset):
    st = vset.expected["api"]["storeTime"]
    assert st
    for s in st:
        assert ro_store.get_message_store_timestamp(s["topic"], s["queueId"], s["offset"]) == s["storeTime"], s
        assert ro_store.get_commit_log_offset_in_queue(s["topic"], s["queueId"], s["offset"]) == s["commitLogOffset"], s


def test_unknown_queue_answers(ro_store):
    assert ro_store.get_min_offset_in_queue("NoSuchTopic", 0) == 0
    assert ro_store.get_max_offset_in_queue("NoSuchTopic", 0) == 0
    assert ro_store.get_message_store_timestamp("NoSuchTopic", 0, 0) == -1
    assert ro_store.get_message_store_timestamp("NoSuchTopic", 0, -1) == -1
    assert ro_store.get_earliest_message_time("NoSuchTopic", 0) == -1
    assert ro_store.get_commit_log_offset_in_queue("NoSuchTopic", 0, 0) == 0


# ------------------------------------------------------------------------------------------------
# Key queries
# ------------------------------------------------------------------------------------------------

def test_index_query_offsets_in_index_order(ro_store, vset):
    """IndexService#queryOffset: the offsets in the order the index yields them (newest first)."""
    for kq in vset.expected["api"]["keyQueries"]:
        offs, last_ts, last_phy = ro_store.index_service.query_offsets(
            kq["topic"], kq["key"], kq["maxNum"], kq["begin"], kq["end"])
        assert offs == kq["indexPhyOffsets"], kq
        assert (last_ts, last_phy) == (kq["indexLastUpdateTimestamp"], kq["indexLastUpdatePhyoffset"]), kq


def test_query_message_upstream_mode(ro_store, vset):
    """queryMessage with ``exact=False``: hash matches, sorted, maxNum capped at 64."""
    for kq in vset.expected["api"]["keyQueries"]:
        res = ro_store.query_message(kq["topic"], kq["key"], max_num=kq["maxNum"], begin_ms=kq["begin"],
                                     end_ms=kq["end"], exact=False)
        assert [m.phy_offset for m in res.messages] == [m["phyOffset"] for m in kq["queryMessage"]], kq
        for got, want in zip(res.messages, kq["queryMessage"]):
            assert (got.topic, got.queue_id, got.queue_offset, got.store_timestamp, got.msg_id) == (
                want["topic"], want["queueId"], want["queueOffset"], want["storeTimestamp"], want["offsetMsgId"])
        if kq["queryMessage"]:
            assert (res.index_last_update_timestamp, res.index_last_update_phy_offset) == (
                kq["queryMessageIndexLastUpdateTimestamp"], kq["queryMessageIndexLastUpdatePhyoffset"]), kq


def _matches(m, topic, key):
    return m["topic"] == topic and (m.get("uniqKey") == key or key in (m.get("keys") or "").split(" "))


def test_query_message_exact_without_time_window(ro_store, vset):
    """Exact mode over the whole time range: the messages of the topic whose UNIQ_KEY or a KEYS
    token equals the key, oldest first; when maxNum cuts, the newest maxNum are kept (the index
    yields newest first, as upstream) and ``truncated`` is set. No 64 cap."""
    msgs = sorted(vset.expected["raw"]["messages"], key=lambda m: m["phyOffset"])
    checked = 0
    for kq in vset.expected["api"]["keyQueries"]:
        if kq["begin"] != 0 or kq["end"] != INT64_MAX:
            continue
        checked += 1
        want = [m["phyOffset"] for m in msgs if _matches(m, kq["topic"], kq["key"])]
        res = ro_store.query_message(kq["topic"], kq["key"], max_num=kq["maxNum"])
        assert [m.phy_offset for m in res.messages] == want[-kq["maxNum"]:], kq
        assert res.truncated == (len(want) > kq["maxNum"]), kq
    assert checked


def test_query_message_exact_within_time_windows(ro_store, vset):
    """With a time window the index decides what is in it (second resolution); where the upstream
    answer was not cut by maxNum, exact mode returns its key-matching messages."""
    by_phy = vset.messages_by_phy
    for kq in vset.expected["api"]["keyQueries"]:
        if len(kq["indexPhyOffsets"]) >= min(kq["maxNum"], 64):
            continue
        want = sorted({p for p in kq["indexPhyOffsets"] if _matches(by_phy[p], kq["topic"], kq["key"])})
        res = ro_store.query_message(kq["topic"], kq["key"], max_num=kq["maxNum"], begin_ms=kq["begin"],
                                     end_ms=kq["end"])
        assert [m.phy_offset for m in res.messages] == want, kq
        assert not res.truncated


def test_query_message_by_unique_key(ro_store, vset):
    for m in vset.expected["api"]["messages"]:
        if not m.get("uniqKey"):
            continue
        res = ro_store.query_message_by_unique_key(m["topic"], m["uniqKey"])
        assert [r.phy_offset for r in res.messages] == [m["phyOffset"]]


# ------------------------------------------------------------------------------------------------
# Offsets by time
# ------------------------------------------------------------------------------------------------

def test_offset_in_queue_by_time(ro_store, vset):
    cases = vset.expected["api"]["offsetByTime"]
    assert cases
    for ob in cases:
        args = (ob["topic"], ob["queueId"], ob["timestamp"])
        assert ro_store.get_offset_in_queue_by_time(*args, boundary="lower") == ob["lower"], ob
        assert ro_store.get_offset_in_queue_by_time(*args, boundary="upper") == ob["upper"], ob
        assert ro_store.get_offset_in_queue_by_time(*args) == ob["default"], ob


def test_offset_by_time_rejects_unknown_boundary(ro_store):
    with pytest.raises(ValueError):
        ro_store.get_offset_in_queue_by_time("T", 0, 0, boundary="middle")


# ------------------------------------------------------------------------------------------------
# Pulls
# ------------------------------------------------------------------------------------------------

def test_get_message_answers(ro_store, vset):
    for gm in vset.expected["api"]["getMessage"]:
        g = ro_store.get_message("compat", gm["topic"], gm["queueId"], gm["offset"], gm["maxMsgNums"])
        assert g.status.name == gm["status"], gm
        assert (g.next_begin_offset, g.min_offset, g.max_offset) == (
            gm["nextBeginOffset"], gm["minOffset"], gm["maxOffset"]), gm
        assert [m.phy_offset for m in g.messages] == [m["phyOffset"] for m in gm["messages"]], gm
        for got, want in zip(g.messages, gm["messages"]):
            assert (got.queue_offset, got.store_timestamp, got.msg_id, got.uniq_key) == (
                want["queueOffset"], want["storeTimestamp"], want["offsetMsgId"], want.get("uniqKey"))
