"""MessageStore write path (DefaultMessageStoreTest, AppendCallbackTest, BatchPutMessageTest).

The append lock and the commit log's reads: tests/unit/engine/test_commit_log.py; a Message
refusing bad input when it is built: tests/unit/test_types.py.
"""
from __future__ import annotations

import dataclasses
import struct
import threading
import time

import pytest

from rmqstore import Message, PutMessageResult, PutMessageStatus
from rmqstore.format import message as M
from rmqstore.format import properties as P
from rmqstore.format.hashes import crc32
from tests.kit import msg

OK = PutMessageStatus.PUT_OK
ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL
T0 = 1_700_000_000_000


def _segment_bytes(store, phy, n) -> bytes:
    mf = store.commit_log.queue.find(phy)
    return bytes(mf.read(phy - mf.file_from_offset, n))


# ------------------------------------------------------------------------------------------------
# Single puts
# ------------------------------------------------------------------------------------------------

def test_put_result_and_record_bytes(open_store):
    st = open_store()
    r = st.put_message(msg("TopicA", b"hello", [("TAGS", "abc")], queue_id=2, flag=5,
                           born_host="192.168.0.1:7000", born_timestamp=T0, store_timestamp=T0 + 5))
    assert r.status is OK and r.ok
    total = 91 + 5 + 6 + len(b"TAGS\x01abc\x02")
    assert (r.phy_offset, r.wrote_bytes, r.queue_offset, r.store_timestamp, r.msg_num) == (0, total, 0, T0 + 5, 1)
    assert r.msg_id == "7F00000100002A9F" + "0000000000000000"  # default store host 127.0.0.1:10911
    raw = _segment_bytes(st, 0, total)
    assert struct.unpack_from(">iiiiiqqiq", raw) == (total, M.MAGIC_V1, 0x3610A686 & 0x7FFFFFFF, 2, 5, 0, 0, 0, T0)
    assert raw[-9:] == b"TAGS\x01abc\x02" and raw[-17:-11] == b"TopicA"
    before = time.time_ns() // 1_000_000
    r2 = st.put_message(msg("TopicA", b"hello", queue_id=2))
    after = time.time_ns() // 1_000_000
    assert (r2.phy_offset, r2.queue_offset) == (total, 1)
    assert before <= r2.store_timestamp <= after  # the store's clock when none is given
    assert st.look_message_by_offset(total).born_timestamp == r2.store_timestamp  # unset born = store time


def test_store_sets_the_ipv6_flags(open_store):
    st = open_store()
    r6 = st.put_message(msg(body=b"x", born_host="[2001:db8::5]:1234", store_host="[::1]:10911"))
    r4 = st.put_message(msg(body=b"x", sys_flag=0x30, born_host="10.1.1.1:1", store_host="10.0.0.1:10911"))
    rb = st.put_message(msg(body=b"x", born_host="[::2]:1", store_host="10.0.0.1:10911"))
    assert r6.wrote_bytes == 115 + 1 + 1 and r4.wrote_bytes == 91 + 1 + 1 and rb.wrote_bytes == 103 + 1 + 1
    assert len(r6.msg_id) == 56 and len(r4.msg_id) == 32
    recs = [st.look_message_by_offset(r.phy_offset) for r in (r6, r4, rb)]
    assert [m.sys_flag for m in recs] == [0x30, 0, 0x10]
    assert recs[0].born_host == "[2001:db8::5]:1234" and recs[0].store_host == "[::1]:10911"
    assert recs[0].msg_id == r6.msg_id == "00000000000000000000000000000001" "00002A9F" "0000000000000000"


@pytest.mark.parametrize("length,magic,ok", [(127, M.MAGIC_V1, True), (128, M.MAGIC_V2, True),
                                             (255, M.MAGIC_V2, True), (256, None, False)])
def test_topic_length_chooses_the_version(open_store, make_config, length, magic, ok):
    st = open_store(cfg=make_config(mapped_file_size_commit_log=65536))
    topic = "t" * length
    r = st.put_message(msg(topic, b"b"))
    if not ok:
        assert r.status is ILLEGAL and st.max_phy_offset == 0
        return
    assert r.status is OK
    assert r.wrote_bytes == 91 + (length > 127) + length + 1
    raw = _segment_bytes(st, r.phy_offset, r.wrote_bytes)
    assert struct.unpack_from(">i", raw, 4)[0] == magic
    if magic == M.MAGIC_V1:
        assert raw[89] == length
    else:
        assert struct.unpack_from(">h", raw, 89)[0] == length
    st.wait_dispatched()
    assert st.look_message_by_offset(r.phy_offset).topic == topic
    assert st.get_message("g", topic, 0, 0).messages[0].phy_offset == r.phy_offset


def test_v2_topic_needs_auto_message_version(open_store, make_config):
    st = open_store(cfg=make_config(auto_message_version_on_topic_len=False))
    assert st.put_message(msg("t" * 128, body=b"body")).status is ILLEGAL
    assert st.put_message(msg("t" * 127, body=b"body")).status is OK


def _assert_nothing_written_then_usable(st, topic="T"):
    assert st.max_phy_offset == 0
    assert st.get_max_offset_in_queue(topic, 0, committed=False) == 0
    r = st.put_message(msg(topic, b"fine"))
    assert (r.status, r.phy_offset, r.queue_offset) == (OK, 0, 0)
    st.wait_dispatched()
    assert st.get_max_offset_in_queue(topic, 0) == 1


@pytest.mark.parametrize("bad", [
    dict(topic="a b"), dict(topic="a/b"), dict(topic="中文"), dict(topic=""), dict(topic="T\n"),
    dict(queue_id=-1), dict(born_host="not-a-host"), dict(store_host="1.2.3.4"),
])
def test_illegal_messages_write_nothing(open_store, bad):
    st = open_store()
    kw = dict(topic="T", body=b"x")
    kw.update(bad)
    r = st.put_message(Message(**kw))
    assert r.status is ILLEGAL and r.error
    assert r.phy_offset == -1 and r.msg_id is None
    _assert_nothing_written_then_usable(st)


def test_retry_and_separator_characters_are_legal_topics(open_store):
    st = open_store()
    for topic in ("%RETRY%group_A", "a|b", "A-Z_0-9"):
        assert st.put_message(msg(topic, body=b"body")).status is OK


def test_body_size_limit(open_store, make_config):
    st = open_store(cfg=make_config(max_message_size=1024, mapped_file_size_commit_log=8192))
    assert st.put_message(msg(body=b"x" * 1025)).status is ILLEGAL
    assert st.put_message(msg(body=b"x" * (1024 + 65536))).status is ILLEGAL
    _assert_nothing_written_then_usable(st)
    r = st.put_message(msg(body=b"x" * 1024))
    assert r.status is OK and r.wrote_bytes == 91 + 1024 + 1


def test_properties_size_limit(open_store, make_config):
    st = open_store(cfg=make_config(mapped_file_size_commit_log=1 << 17))
    exceeded = st.put_message(msg(props=[("big", "v" * (32768 - 5))], body=b"body"))  # "big\x01" + v + "\x02" = 32768
    assert exceeded.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    _assert_nothing_written_then_usable(st)
    r = st.put_message(msg(props=[("big", "v" * (32767 - 5))], body=b"body"))
    assert r.status is OK and r.queue_offset == 1
    raw = _segment_bytes(st, r.phy_offset, r.wrote_bytes)
    assert struct.unpack_from(">h", raw, 88 + 4 + 1 + 1)[0] == 32767


@pytest.mark.parametrize("dict_props", [False, True])
def test_properties_size_limit_in_a_batch(open_store, make_config, dict_props):
    """A batch holding one record with 32768 bytes of properties is refused whole, on the
    vectorised path (dict properties) as on the general one; 32767 bytes are stored."""
    st = open_store(cfg=make_config(mapped_file_size_commit_log=1 << 18))

    def batch(n):
        return [msg(props={"big": "v" * n} if dict_props else [("big", "v" * n)], body=b"body") for n in (10, n, 20)]
    assert st.put_messages(batch(32768 - 5)).status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    _assert_nothing_written_then_usable(st)
    r = st.put_messages(batch(32767 - 5))
    assert r.status is OK and r.queue_offset == 1
    raw = _segment_bytes(st, r.phy_offset, r.wrote_bytes)
    second = 88 + 4 + 1 + 1 + 2 + 15  # after the first record ("big\x01" + 10 + "\x02" = 15 bytes)
    assert struct.unpack_from(">h", raw, second + 88 + 4 + 1 + 1)[0] == 32767


def test_properties_size_limit_counts_the_crc_entry(open_store, make_config):
    st = open_store(cfg=make_config(mapped_file_size_commit_log=1 << 17, enabled_append_prop_crc=True))
    # 32747 bytes of properties + 20 reserved = 32767
    exceeded = st.put_message(msg(props=[("big", "v" * (32748 - 5))], body=b"body"))
    assert exceeded.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    r = st.put_message(msg(props=[("big", "v" * (32747 - 5))], body=b"body"))
    assert r.status is OK and r.wrote_bytes == 91 + 4 + 1 + 32767


def test_record_larger_than_a_segment_is_illegal(open_store, make_config):
    st = open_store(cfg=make_config(mapped_file_size_commit_log=256))
    assert st.put_message(msg(body=b"x" * 200)).status is ILLEGAL
    assert st.put_message(msg(body=b"x" * (256 - 8 - 92))).status is OK  # exactly fits with the blank


def test_properties_crc_mode_record(open_store, make_config):
    st = open_store(cfg=make_config(enabled_append_prop_crc=True))
    r1 = st.put_message(msg(props=[("TAGS", "abc")], store_timestamp=T0, body=b"body"))
    r2 = st.put_message(msg(props=None, body=b""))
    r3 = st.put_message(msg(props=[("k", "v"), ("__CRC32#", "1234567890")], body=b"body"))  # producer's entry replaced
    for r, body, props_len in ((r1, b"body", 9 + 20), (r2, b"", 20), (r3, b"body", 4 + 20)):
        raw = _segment_bytes(st, r.phy_offset, r.wrote_bytes)
        assert r.wrote_bytes == 91 + len(body) + 1 + props_len
        assert struct.unpack_from(">h", raw, len(raw) - props_len - 2)[0] == props_len
        assert raw[-20:] == b"__CRC32#\x01" + P.crc_digits(crc32(raw[:-20])) + b"\x02"
        assert M.check_record(raw, 0, len(raw), check_crc=True, force_verify_prop_crc=True)[1]
    assert st.look_message_by_offset(r3.phy_offset).properties["k"] == "v"


# ------------------------------------------------------------------------------------------------
# Transactions, delay, tags codes
# ------------------------------------------------------------------------------------------------

def test_transaction_types(open_store):
    st = open_store()
    types = [0x0, 0x4, 0x8, 0xC, 0x0]  # NOT, PREPARED, COMMIT, ROLLBACK, NOT
    res = [st.put_message(msg(body=b"t", props=[("KEYS", f"tx{i}")], sys_flag=f)) for i, f in enumerate(types)]
    assert [r.status for r in res] == [OK] * 5
    assert [r.queue_offset for r in res] == [0, 0, 1, 0, 2]
    for r, f in zip(res, types):
        raw = _segment_bytes(st, r.phy_offset, r.wrote_bytes)
        assert struct.unpack_from(">q", raw, 20)[0] == r.queue_offset
        assert struct.unpack_from(">i", raw, 36)[0] & 0xC == f
    st.wait_dispatched()
    assert st.get_max_offset_in_queue("T", 0) == 3
    assert [st.get_commit_log_offset_in_queue("T", 0, q) for q in range(3)] == [res[0].phy_offset, res[2].phy_offset,
                                                                                 res[4].phy_offset]
    found = {i: [m.phy_offset for m in st.query_message("T", f"tx{i}").messages] for i in range(5)}
    assert found == {0: [res[0].phy_offset], 1: [res[1].phy_offset], 2: [res[2].phy_offset], 3: [],
                     4: [res[4].phy_offset]}


@pytest.mark.parametrize("props,want", [
    ([("DELAY", "3")], T0 + 10_000),
    ([("DELAY", "18")], T0 + 7_200_000),
    ([("DELAY", "99")], T0 + 7_200_000),       # clamped to the last level
    ([("DELAY", "1"), ("TAGS", "TagA")], T0 + 1_000),
    ([("DELAY", "0"), ("TAGS", "TagA")], 2598919),
    ([("DELAY", "0")], 0),
    ([("TAGS", "TagA")], 2598919),
])
def test_schedule_topic_tags_code(open_store, props, want):
    st = open_store()
    r = st.put_message(msg("SCHEDULE_TOPIC_XXXX", props=props, queue_id=2, store_timestamp=T0, body=b"body"))
    assert r.status is OK
    st.wait_dispatched()
    assert st.find_consume_queue("SCHEDULE_TOPIC_XXXX", 2).get_unit(0) == (r.phy_offset, r.wrote_bytes, want)
    assert st.look_message_by_offset(r.phy_offset).tags_code == want


@pytest.mark.parametrize("props,want", [
    ([("DELAY", "3"), ("TAGS", "TagA")], 2598919),   # DELAY on any other topic is ignored
    ([("TAGS", "")], 0),                             # empty TAGS is written but hashes to 0
    (None, 0),
    ([("TAGS", "😀")], 1772899),
    ([("TAGS", "polygenelubricants")], -2**31),      # sign-extended negative tagsCode
])
def test_tags_code(open_store, props, want):
    st = open_store()
    r = st.put_message(msg("T", props=props, store_timestamp=T0, body=b"body"))
    st.wait_dispatched()
    assert st.find_consume_queue("T", 0).get_unit(0) == (r.phy_offset, r.wrote_bytes, want)
    assert st.look_message_by_offset(r.phy_offset).tags_code == want


# ------------------------------------------------------------------------------------------------
# Segment roll
# ------------------------------------------------------------------------------------------------

def test_roll_writes_an_8_byte_blank(open_store, make_config):
    st = open_store(cfg=make_config(mapped_file_size_commit_log=400))
    sizes = []
    for i in range(5):
        r = st.put_message(msg(body=b"x" * 100, props=[("KEYS", f"r{i}")]))
        sizes.append(r)
    total = 91 + 100 + 1 + len(b"KEYS\x01r0\x02")
    assert all(r.wrote_bytes == total == 200 for r in sizes)
    assert [r.phy_offset for r in sizes] == [0, 400, 800, 1200, 1600]  # 200 + 8 > 400 - 200
    raw = _segment_bytes(st, 200, 200)
    assert raw[:8] == struct.pack(">ii", 200, M.BLANK_MAGIC) and not any(raw[8:])
    st.wait_dispatched()
    assert [m.phy_offset for m in st.get_message("g", "T", 0, 0).messages] == [0, 400, 800, 1200, 1600]
    assert [st.get_commit_log_offset_in_queue("T", 0, q) for q in range(5)] == [0, 400, 800, 1200, 1600]
    assert st.query_message("T", "r3").messages[0].phy_offset == 1200


def test_exact_fit_leaves_an_8_byte_blank(open_store, make_config):
    st = open_store(cfg=make_config(mapped_file_size_commit_log=512))
    body = 512 - 8 - 92   # one record + the 8-byte blank fill the segment exactly
    r1 = st.put_message(msg(body=b"a" * body))
    r2 = st.put_message(msg(body=b"b"))
    assert (r1.phy_offset, r1.wrote_bytes, r2.phy_offset) == (0, 504, 512)
    assert _segment_bytes(st, 504, 8) == struct.pack(">ii", 8, M.BLANK_MAGIC)


# ------------------------------------------------------------------------------------------------
# Batches
# ------------------------------------------------------------------------------------------------

def _batch(n=10, **kw):
    return [msg("test-topic", b"body", [("TAGS", "abc")], born_timestamp=T0 + i, **kw) for i in range(n)]


def test_batch_msg_ids_are_formatted_when_first_read(open_store, make_config, monkeypatch):
    from rmqstore.engine import commit_log as CL
    calls = []
    real = CL.encode_offset_msg_ids
    monkeypatch.setattr(CL, "encode_offset_msg_ids", lambda *a: calls.append(a) or real(*a))
    st = open_store(cfg=make_config(mapped_file_size_commit_log=10240))
    r = st.put_messages([msg("test-topic", b"body", {"TAGS": "abc"}, born_timestamp=T0 + i) for i in range(10)])
    assert r.ok and calls == []  # nothing formatted yet (dict properties: the vectorised path)
    want = ",".join(f"7F00000100002A9F{i * 114:016X}" for i in range(10))
    assert r.msg_id == want and r.msg_id == want and len(calls) == 1  # once, then kept
    same = PutMessageResult(r.status, want, r.phy_offset, r.wrote_bytes, r.queue_offset, r.store_timestamp,
                            r.msg_num)
    assert r == same and repr(r) == repr(same) and f"msg_id={want!r}" in repr(r)
    r.msg_id = "x"
    assert r.msg_id == "x" and r != same


@pytest.mark.parametrize("v6,size,id_len", [(False, 114, 32), (True, 138, 56)])
def test_batch_like_append_callback_test(open_store, make_config, v6, size, id_len):
    st = open_store(cfg=make_config(mapped_file_size_commit_log=10240))
    hosts = dict(born_host="[::1]:5000", store_host="[::2]:10911") if v6 else dict(born_host="10.0.0.2:5000")
    r = st.put_messages(_batch(**hosts))
    assert (r.status, r.phy_offset, r.wrote_bytes, r.msg_num, r.queue_offset) == (OK, 0, 10 * size, 10, 0)
    ids = r.msg_id.split(",")
    assert len(set(ids)) == 10 and all(len(i) == id_len for i in ids)
    recs = [st.view_message_by_id(i) for i in ids]
    assert [m.phy_offset for m in recs] == [i * size for i in range(10)]
    assert [m.queue_offset for m in recs] == list(range(10))
    assert {m.store_timestamp for m in recs} == {r.store_timestamp}
    assert all(m.topic == "test-topic" and m.body == b"body" and m.tags == "abc" for m in recs)
    assert [m.born_timestamp for m in recs] == [T0 + i for i in range(10)]
    assert {m.born_host for m in recs} == {hosts["born_host"]}
    assert {m.sys_flag for m in recs} == {0x30 if v6 else 0}


def test_batch_rolls_to_the_next_segment_whole(open_store, make_config):
    st = open_store(cfg=make_config(mapped_file_size_commit_log=1500))
    first = st.put_messages(_batch())
    second = st.put_messages(_batch())
    assert (first.phy_offset, first.wrote_bytes) == (0, 1140)
    assert (second.phy_offset, second.queue_offset) == (1500, 10)  # 1140 + 8 > 360: all of it moves
    assert _segment_bytes(st, 1140, 360) == struct.pack(">ii", 360, M.BLANK_MAGIC) + bytes(352)
    st.wait_dispatched()
    assert st.get_max_offset_in_queue("test-topic", 0) == 20
    assert st.get_commit_log_offset_in_queue("test-topic", 0, 10) == 1500


def test_batch_records_have_their_own_lengths(open_store):
    """BatchPutMessageTest: record i starts at the sum of the previous records' own lengths."""
    st = open_store(cfg=None)
    for hosts, fixed in ((dict(), 91), (dict(born_host="[::1]:1", store_host="[::1]:2"), 115)):
        batch = [msg("B", f"body-{i}".encode() * (i + 1), [("KEYS", "k" * i), ("i", str(i))], **hosts)
                 for i in range(10)]
        r = st.put_messages(batch)
        assert r.status is OK
        lengths = [fixed + len(m.body) + 1 + len(P.encode_properties(m.properties)) for m in batch]
        starts = [r.phy_offset + sum(lengths[:i]) for i in range(10)]
        assert r.wrote_bytes == sum(lengths)
        st.wait_dispatched()
        for i, s in enumerate(starts):
            m = st.look_message_by_offset(s)
            assert (m.store_size, m.body, m.properties["i"]) == (lengths[i], batch[i].body, str(i))
            g = st.get_message("g", "B", 0, r.queue_offset + i, 1)
            assert g.status.name == "FOUND" and g.messages[0].phy_offset == s


@pytest.mark.parametrize("batch,reason", [
    ([msg("A", body=b"body"), msg("B", body=b"body")], "one topic"),
    ([msg("A", queue_id=0, body=b"body"), msg("A", queue_id=1, body=b"body")], "one topic"),
    ([msg("A", sys_flag=0x4, body=b"body")], "transactional"),
    ([msg("A", props=[("DELAY", "2")], body=b"body")], "delayed"),
    ([msg("A", body=b"x" * 600), msg("A", body=b"x" * 600)], "message body size exceeded"),
    ([], "empty"),
    ([msg("A", body=b"body"), msg("A b", body=b"body")], "topic"),
])
@pytest.mark.parametrize("dict_props", [False, True])  # dicts take the vectorised path, pairs the general one
def test_bad_batches_write_nothing(open_store, make_config, batch, reason, dict_props):
    st = open_store(cfg=make_config(max_message_size=1024))
    if dict_props:
        batch = [dataclasses.replace(m, properties=dict(m.properties or ())) for m in batch]
    r = st.put_messages(batch)
    assert r.status is ILLEGAL and reason in r.error
    assert st.max_phy_offset == 0 and st.get_max_offset_in_queue("A", 0, committed=False) == 0


# ------------------------------------------------------------------------------------------------
# Concurrency
# ------------------------------------------------------------------------------------------------

def test_four_writer_threads_get_contiguous_queue_offsets(open_store, make_config):
    st = open_store(cfg=make_config(mapped_file_size_commit_log=16384))
    results: dict[int, list] = {n: [] for n in range(4)}

    def worker(n):
        for j in range(150):
            results[n].append(st.put_message(msg("Threads", f"{n}-{j}".encode(), [("KEYS", f"t{n}-{j}")])))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    allr = [r for rs in results.values() for r in rs]
    assert all(r.status is OK for r in allr)
    assert sorted(r.queue_offset for r in allr) == list(range(600))
    by_q = sorted(allr, key=lambda r: r.queue_offset)
    assert all(a.phy_offset < b.phy_offset for a, b in zip(by_q, by_q[1:]))  # queue order = log order
    for rs in results.values():  # each thread's own puts are in order
        assert [r.queue_offset for r in rs] == sorted(r.queue_offset for r in rs)
    st.wait_dispatched()
    assert st.get_max_offset_in_queue("Threads", 0) == 600
    assert [st.get_commit_log_offset_in_queue("Threads", 0, r.queue_offset) for r in by_q] == [
        r.phy_offset for r in by_q]
    assert st.query_message("Threads", "t2-77").messages[0].body == b"2-77"


def test_sync_flush_like_reput_message_service_test(open_store, make_config):
    """ReputMessageServiceTest: 10 messages of 158 bytes; under SYNC_FLUSH a put returns once its
    bytes are flushed, and dispatch follows the flushed offset."""
    st = open_store(cfg=make_config(flush_disk_type="SYNC_FLUSH"))
    props = [("TAGS", "TAG1"), ("KEYS", "1700000000000")]
    for i in range(10):
        r = st.put_message(msg("FooBar", b"x" * 32, props))
        assert (r.status, r.wrote_bytes, r.phy_offset) == (OK, 158, 158 * i)
        assert st.commit_log.flushed_offset >= r.phy_offset + 158
    assert st.max_phy_offset == 1580
    st.wait_dispatched()
    assert st.get_max_offset_in_queue("FooBar", 0) == 10
    assert len(st.get_message("g", "FooBar", 0, 0).messages) == 10
    nowait = st.put_message(msg("FooBar", b"y", [("WAIT", "false")]))
    assert nowait.status is OK


@pytest.mark.parametrize("host", ["10.0.0.1:10911", "[::1]:10911"])
def test_batch_has_one_store_time(open_store, make_config, host):
    """Every record of a batch carries the batch's (first message's) store time, whichever path
    encodes it (FORMAT.md §2.7)."""
    st = open_store(cfg=make_config(mapped_file_size_commit_log=65536))
    r = st.put_messages([msg(body=b"a", store_host=host, store_timestamp=T0),
                         msg(body=b"b", store_host=host, store_timestamp=T0 + 5),
                         msg(body=b"c", store_host=host)])
    assert r.store_timestamp == T0
    recs = [st.view_message_by_id(i) for i in r.msg_id.split(",")]
    assert [m.store_timestamp for m in recs] == [T0] * 3
    assert [m.born_timestamp for m in recs] == [T0] * 3  # born time unset: the store time


@pytest.mark.parametrize("field,value", [
    ("queue_id", 2**31), ("flag", 2**31), ("flag", -2**31 - 1), ("sys_flag", 2**31), ("reconsume_times", 2**31),
    ("born_timestamp", 2**63), ("prepared_transaction_offset", -2**63 - 1), ("store_timestamp", 2**63),
])
@pytest.mark.parametrize("host", ["10.0.0.1:10911", "[::1]:10911"])
@pytest.mark.parametrize("batch", [False, True, "dict"])
def test_out_of_range_fields_are_illegal(open_store, field, value, host, batch):
    """Fields wider than their on-disk integer give MESSAGE_ILLEGAL (not a struct error); nothing
    is written and the store stays usable. ("dict": a batch of two with dict properties, the
    vectorised path.)"""
    st = open_store()
    bad = msg(store_host=host, **{field: value}, body=b"body")
    if batch == "dict":
        r = st.put_messages([dataclasses.replace(bad, properties={"a": v}) for v in "12"])
    else:
        r = st.put_messages([bad]) if batch else st.put_message(bad)
    assert r.status is ILLEGAL and field in r.error
    assert st.max_phy_offset == 0 and st.get_max_offset_in_queue("T", 0, committed=False) == 0
    _assert_nothing_written_then_usable(st)


@pytest.mark.parametrize("dict_props", [False, True])
def test_failed_write_of_a_batch_is_not_acknowledged_and_leaves_nothing(open_store, make_config, monkeypatch,
                                                                         dict_props):
    """A write error in the middle of a batch (ENOSPC or EIO from pwrite) gives
    CREATE_MAPPED_FILE_FAILED; nothing becomes visible, and the next put takes the same place."""
    from rmqstore.io.mapped_file import MappedFile
    st = open_store(cfg=make_config(mapped_file_size_commit_log=1 << 20))
    batch = [msg(body=bytes([i]) * 1000, props={"KEYS": f"k{i}"} if dict_props else [("KEYS", f"k{i}")])
             for i in range(8)]  # 8 KiB: written with pwrite
    real = MappedFile._pwrite_all

    def fail(self, mv, pos):
        real(self, mv[:len(mv) // 2], pos)  # half of it lands, then the disk fails
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(MappedFile, "_pwrite_all", fail)
    r = st.put_messages(batch)
    assert r.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED and "No space" in r.error
    assert _segment_bytes(st, 0, 8) == bytes(8)  # the first record's header was never published
    monkeypatch.setattr(MappedFile, "_pwrite_all", real)
    _assert_nothing_written_then_usable(st)
    r = st.put_messages(batch)
    assert r.status is OK and r.queue_offset == 1
    st.wait_dispatched()
    assert [m.body for m in st.get_message("g", "T", 0, 1, 8).messages] == [m.body for m in batch]
