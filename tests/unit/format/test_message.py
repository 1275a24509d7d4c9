"""CommitLog record codec (FORMAT.md §2): layout, versions, hosts, blank, checks, both forms."""
from __future__ import annotations

import hashlib
import struct
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqstore import CorruptRecordError
from rmqstore.format import message as M
from rmqstore.format.hashes import crc32
from rmqstore.format.msgid import parse_host
from tests.kit import record as make

V4_BORN, V4_STORE = parse_host("192.168.0.10:50000"), parse_host("10.0.0.1:10911")
V6_BORN, V6_STORE = parse_host("[2001:db8::1]:40000"), parse_host("[::1]:10911")


def test_magic_constants():
    assert M.MAGIC_V1 == struct.unpack(">i", bytes.fromhex("DAA320A7"))[0] == -626843481
    assert M.MAGIC_V2 == struct.unpack(">i", bytes.fromhex("DAA320AB"))[0] == -626843477
    assert M.BLANK_MAGIC == struct.unpack(">i", bytes.fromhex("CBD43194"))[0] == -875286124


def test_length_formula_examples():
    # FooBar, 32-byte body, TAGS=TAG1 + KEYS=<13 digits> (29 bytes) => 158; test, 14 bytes, KEYS=hello => 120
    props = b"TAGS\x01TAG1\x02KEYS\x01" + b"1234567890123" + b"\x02"
    assert len(props) == 29
    assert M.record_length(32, 6, 29, 0, False) == 158
    assert len(make(topic=b"FooBar", body=b"x" * 32, props=props)) == 158
    assert len(b"KEYS\x01hello\x02") == 11
    assert M.record_length(14, 4, 11, 0, False) == 120
    assert len(make(topic=b"test", body=b"y" * 14, props=b"KEYS\x01hello\x02")) == 120
    assert M.record_length(0, 0, 0, 0, False) == 91
    assert M.record_length(0, 0, 0, 0x30, False) == 115
    assert M.record_length(0, 0, 0, 0x10, True) == 104
    assert M.record_length(-1, 1, -1, 0, False) == 92  # negative lengths count as 0


def test_v1_ipv4_field_positions():
    body = b"hello"
    rec = make(body=body)
    total = len(rec)
    f = struct.unpack_from(">iiiiiqqiq", rec, 0)
    assert f == (total, M.MAGIC_V1, crc32(body), 3, 7, 11, 4096, 0, 1_700_000_000_001)
    assert rec[48:56] == V4_BORN
    assert struct.unpack_from(">q", rec, 56)[0] == 1_700_000_000_123
    assert rec[64:72] == V4_STORE
    assert struct.unpack_from(">iqi", rec, 72) == (2, 0, len(body))
    assert rec[88:93] == body
    assert rec[93] == 9 and rec[94:103] == b"TopicTest"
    assert struct.unpack_from(">h", rec, 103)[0] == 10
    assert rec[105:] == b"TAGS\x01TagA\x02"
    assert total == 91 + 5 + 9 + 10


def test_v2_topic_length_is_two_bytes():
    topic = b"t" * 128
    rec = make(topic=topic, body=b"", props=b"", v2=True)
    assert struct.unpack_from(">i", rec, 4)[0] == M.MAGIC_V2
    assert struct.unpack_from(">h", rec, 88)[0] == 128
    assert rec[90:218] == topic
    assert len(rec) == 92 + 128
    lay = M.read_layout(rec, 0, len(rec))
    assert (lay.topic_pos, lay.topic_len, lay.props_len) == (90, 128, 0)


def test_v1_topic_length_byte_is_signed():
    """A V1 record whose topic-length byte is >= 0x80 is invalid (FORMAT.md §2.2)."""
    rec = make(topic=b"t" * 128, body=b"", props=b"")
    assert rec[88] == 0x80
    with pytest.raises(ValueError):
        M.read_layout(rec, 0, len(rec))
    assert M.check_record(rec, 0, len(rec), check_crc=True)[1] is False
    assert not M.decode_batch(np.frombuffer(bytes(rec), np.uint8), np.array([0])).valid[0]


def test_ipv6_hosts_field_positions():
    body = b"v6 body"
    rec = make(body=body, born_host=V6_BORN, store_host=V6_STORE)
    assert struct.unpack_from(">i", rec, 36)[0] == 0x30
    assert rec[48:68] == V6_BORN
    assert struct.unpack_from(">q", rec, 68)[0] == 1_700_000_000_123
    assert rec[76:96] == V6_STORE
    assert struct.unpack_from(">iqi", rec, 96) == (2, 0, len(body))
    assert rec[112:119] == body
    assert len(rec) == 115 + len(body) + 9 + 10
    # only the born host in IPv6
    rec2 = make(body=body, born_host=V6_BORN)
    assert struct.unpack_from(">i", rec2, 36)[0] == 0x10
    assert rec2[76:84] == V4_STORE and len(rec2) == 103 + len(body) + 9 + 10
    assert M.store_timestamp_pos(0x10) == 68 and M.store_timestamp_pos(0x20) == 56


def test_blank_record_and_end_of_data():
    blank = M.encode_blank(189)
    assert blank == struct.pack(">ii", 189, -875286124)
    buf = bytearray(400)
    buf[0:8] = blank
    assert M.check_record(buf, 0, len(buf), check_crc=True) == (0, True, "blank")
    assert M.check_record(buf, 100, len(buf), check_crc=True) == (0, False, "end")
    assert M.check_record(buf, 396, len(buf), check_crc=True)[:2] == (-1, False)  # < 8 bytes left
    starts, stop, pos = M.walk_records(buf, 0, len(buf))
    assert (starts.tolist(), stop, pos) == ([], "blank", 0)


def test_decode_message_scalar():
    rec = make(props=b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02")
    m = M.decode_message(rec, 0, len(rec), check_crc=True)
    assert (m.phy_offset, m.store_size, m.topic, m.queue_id, m.queue_offset, m.flag, m.sys_flag) == (
        4096, len(rec), "TopicTest", 3, 11, 7, 0)
    assert (m.born_timestamp, m.store_timestamp, m.reconsume_times, m.prepared_transaction_offset) == (
        1_700_000_000_001, 1_700_000_000_123, 2, 0)
    assert (m.born_host, m.store_host, m.body, m.body_crc) == (
        "192.168.0.10:50000", "10.0.0.1:10911", b"hello", crc32(b"hello"))
    assert m.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}
    assert (m.tags, m.keys, m.uniq_key, m.magic, m.tags_code) == ("TagA", ["k1", "k2"], "ABC", M.MAGIC_V1, 2598919)
    assert m.msg_id == "0A00000100002A9F0000000000001000"


def test_decode_message_ipv6_and_empty_parts():
    rec = make(body=b"", props=b"", born_host=V6_BORN, store_host=V6_STORE)
    m = M.decode_message(rec, 0, len(rec))
    assert (m.body, m.body_crc, m.properties, m.tags, m.keys, m.tags_code) == (b"", 0, {}, None, [], 0)
    assert m.born_host == "[2001:db8::1]:40000" and m.store_host == "[::1]:10911"
    assert m.msg_id == ("00000000000000000000000000000001" "00002A9F" "0000000000001000")
    assert len(m.msg_id) == 56


def test_decode_message_errors_carry_path_and_offset():
    rec = make()
    buf = bytes(100) + bytes(rec)
    with pytest.raises(CorruptRecordError) as ei:
        M.decode_message(buf, 101, len(buf), base_offset=8192, path="/x/00000000000000008192")
    assert ei.value.path == "/x/00000000000000008192" and ei.value.offset == 8293
    bad = bytearray(rec)
    bad[90] ^= 0xFF
    with pytest.raises(CorruptRecordError) as ei:
        M.decode_message(bad, 0, len(bad), check_crc=True, path="p")
    assert ei.value.offset == 0 and "CRC" in str(ei.value)


# ------------------------------------------------------------------------------------------------
# Scalar vs batch on the same records
# ------------------------------------------------------------------------------------------------

CASES = [
    dict(),
    dict(body=b"", props=b""),
    dict(born_host=V6_BORN, store_host=V6_STORE, body=b"\x00\xff" * 100),
    dict(born_host=V6_BORN),
    dict(store_host=V6_STORE, flag=-1, queue_id=0, reconsume_times=-3),
    dict(topic=b"x" * 127),
    dict(topic=b"y" * 128, v2=True, props=b"KEYS\x01a b c\x02"),
    dict(topic=b"z" * 200, v2=True, born_host=V6_BORN, store_host=V6_STORE, body=b"b" * 1000),
    dict(sys_flag=M.TX_PREPARED, queue_offset=0, prepared_transaction_offset=12345),
    dict(props="TAGS\x01中文\x02KEYS\x01😀\x02".encode()),
]


def _buffer(cases):
    buf = bytearray()
    starts = []
    for i, kw in enumerate(cases):
        starts.append(len(buf))
        buf += make(**dict(kw, phy_offset=len(buf)))
    return bytes(buf), starts


def test_scalar_and_batch_decode_agree():
    buf, starts = _buffer(CASES)
    walked, stop, pos = M.walk_records(buf + bytes(16), 0, len(buf) + 16)
    assert walked.tolist() == starts and stop == "end" and pos == len(buf)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    b = M.decode_batch(u8, walked)
    assert b.valid.all() and M.body_crc_ok(buf, b).all() and b.first_invalid() == len(CASES)
    for i, s in enumerate(starts):
        m = M.decode_message(buf, s, len(buf), check_crc=True)
        lay = M.read_layout(buf, s, len(buf))
        assert (int(b.total[i]), int(b.magic[i]), int(b.body_crc[i]), int(b.queue_id[i]), int(b.flag[i]),
                int(b.queue_offset[i]), int(b.phy_offset[i]), int(b.sys_flag[i]), int(b.born_timestamp[i]),
                int(b.store_timestamp[i]), int(b.reconsume_times[i]), int(b.prepared_transaction_offset[i])) == (
            m.store_size, m.magic, m.body_crc, m.queue_id, m.flag, m.queue_offset, m.phy_offset, m.sys_flag,
            m.born_timestamp, m.store_timestamp, m.reconsume_times, m.prepared_transaction_offset)
        assert (int(b.body_pos[i]) - s, int(b.body_len[i]), int(b.topic_pos[i]) - s, int(b.topic_len[i]),
                int(b.props_pos[i]) - s, int(b.props_len[i])) == (
            lay.body_pos, lay.body_len, lay.topic_pos, lay.topic_len, lay.props_pos, lay.props_len)
        bh, sh = int(b.born_host_pos[i]), int(b.store_host_pos[i])
        assert parse_host(m.born_host) == buf[bh:bh + int(b.born_host_len[i])]
        assert parse_host(m.store_host) == buf[sh:sh + int(b.store_host_len[i])]
        assert hashlib.sha256(m.body).digest() == hashlib.sha256(buf[int(b.body_pos[i]):][:int(b.body_len[i])]).digest()
        assert m.topic.encode() == buf[int(b.topic_pos[i]):][:int(b.topic_len[i])]
        assert m.phy_offset == s


V4_CASES = [c for c in CASES if "born_host" not in c and "store_host" not in c]


def _same_batches(a: M.RecordBatch, b: M.RecordBatch) -> None:
    assert a.valid.tolist() == b.valid.tolist()
    ok = a.valid
    for name in a.__dict__:
        assert getattr(a, name)[ok].tolist() == getattr(b, name)[ok].tolist(), name


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6), st.lists(st.integers(0, 3000), max_size=4))
@settings(max_examples=150, deadline=None)
def test_ipv4_rows_and_field_gathers_agree_on_damaged_bytes(flips, extra_starts):
    """decode_batch reads an IPv4-only batch as 88-byte rows (_decode_v4); the any-host path gathers
    each field. Same validity and, for valid records, the same columns, also where bytes are
    damaged or a start points inside a record."""
    buf, starts = _buffer(V4_CASES)
    bad = bytearray(buf + bytes(64))
    for at, value in flips:
        bad[at % len(bad)] = value
    u8 = np.frombuffer(bytes(bad), np.uint8)
    offs = np.array(sorted(starts + [x % (len(bad) - 88) for x in extra_starts]), dtype=np.int64)
    with mock.patch.object(M, "SMALL_DECODE", 0), mock.patch.object(M, "_decode_v4", wraps=M._decode_v4) as rows:
        fast = M.decode_batch(u8, offs)
    # every start leaves room for a row, so only an IPv6 bit (a flipped SYSFLAG) sends it elsewhere
    assert rows.called == (not (fast.sys_flag & (M.SYSFLAG_BORNHOST_V6 | M.SYSFLAG_STOREHOST_V6)).any())
    _same_batches(fast, M._decode_any(u8, offs))
    small = M._decode_small(u8, offs.tolist())  # the record-by-record path of small batches
    if small is not None:
        _same_batches(small, fast)
        assert all(getattr(small, k).dtype == getattr(fast, k).dtype for k in small.__dict__)
    if not flips:
        assert fast.valid[np.isin(offs, starts)].all()


def test_batch_near_the_buffer_end_takes_field_gathers():
    buf, starts = _buffer(V4_CASES[:2])
    u8 = np.frombuffer(buf, np.uint8)
    offs = np.array(starts + [len(buf) - 60], dtype=np.int64)  # room for a 48-byte head, not an 88-byte row
    b = M.decode_batch(u8, offs)
    assert b.valid.tolist() == [True, True, False]
    _same_batches(b, M._decode_any(u8, offs))
    buf, starts = _buffer([V4_CASES[1], V4_CASES[0]])
    cut = np.frombuffer(buf[:-3], np.uint8)  # the last record's properties run past the buffer
    b = M.decode_batch(cut, np.array(starts, dtype=np.int64))
    assert b.valid.tolist() == [True, False]
    _same_batches(b, M._decode_any(cut, np.array(starts, dtype=np.int64)))


def test_batch_flags_invalid_records_and_take():
    buf, starts = _buffer(CASES[:3])
    bad = bytearray(buf)
    struct.pack_into(">i", bad, starts[1] + 4, 0x12345678)  # magic of the second record
    b = M.decode_batch(np.frombuffer(bytes(bad), np.uint8), np.array(starts))
    assert b.valid.tolist() == [True, False, True]
    assert b.first_invalid() == 1
    assert len(b.take(1)) == 1 and b.take(1).starts.tolist() == [0]
    crc_bad = bytearray(buf)
    crc_bad[starts[2] + 112] ^= 1  # third record: IPv6 body starts at 112
    b = M.decode_batch(np.frombuffer(bytes(crc_bad), np.uint8), np.array(starts))
    assert b.valid.all() and M.body_crc_ok(bytes(crc_bad), b).tolist() == [True, True, False]


def test_walk_records_stops():
    buf, starts = _buffer(CASES[:3])
    assert M.walk_records(buf, 0, len(buf))[1:] == ("limit", len(buf))
    s, stop, pos = M.walk_records(buf, 0, len(buf), max_records=2)
    assert (s.tolist(), stop, pos) == (starts[:2], "limit", starts[2])
    s, stop, pos = M.walk_records(buf, 0, len(buf) - 1)  # the last record runs past the end
    assert (s.tolist(), stop, pos) == (starts[:2], "limit", starts[2])
    junk = buf[:starts[1]] + b"\x00\x00\x00\x10\xde\xad\xbe\xef" + bytes(32)
    s, stop, pos = M.walk_records(junk, 0, len(junk))
    assert (s.tolist(), stop, pos) == ([0], "invalid", starts[1])
    blank = buf[:starts[1]] + M.encode_blank(40) + bytes(32)
    assert M.walk_records(blank, 0, len(blank))[1:] == ("blank", starts[1])
    assert M.decode_batch(np.zeros(0, np.uint8), np.zeros(0, np.int64)).valid.size == 0


def test_a_lazily_decoded_record_equals_the_fully_decoded_one(tmp_path):
    """The fast path defers properties, hosts, msgId and tagsCode; the values, equality, repr and
    pickling are those of the record decoded by the general path."""
    import copy
    import pickle

    from rmqstore import Message, MessageStore, MessageStoreConfig
    from rmqstore.format import message as M
    with MessageStore.open(tmp_path / "s", MessageStoreConfig.embedded()) as st:
        r = st.put_message(Message.create("T", b"body", tags="TagA", keys=["k1", "k2"],
                                          properties={"a": "1"}))
        mf = st.commit_log.queue.find(r.phy_offset)
        lazy = st.look_message_by_offset(r.phy_offset)
        assert lazy._properties is None and lazy._msg_id is None  # nothing decoded yet
        with mock.patch.object(M, "decode_v1_ipv4", return_value=None):  # the general path
            full = M.decode_message(mf.mm, r.phy_offset - mf.file_from_offset, mf.file_size, check_crc=True)
        assert full._lazy is None and full == lazy and repr(full) == repr(lazy)
        assert lazy.msg_id == r.msg_id and lazy.keys == ["k1", "k2"] and lazy.tags == "TagA"
        assert lazy.store_host == full.store_host and lazy.born_host == full.born_host
        assert lazy.tags_code == full.tags_code != 0
        fresh = st.look_message_by_offset(r.phy_offset)
        assert pickle.loads(pickle.dumps(fresh)) == full and copy.copy(fresh) == full
        fresh.properties = {"x": "y"}
        assert fresh.properties == {"x": "y"} and fresh != full
