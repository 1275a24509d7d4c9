"""format/frame.py: the framing of one CommitLog record (FORMAT.md §2.1), read from the records
RocketMQ wrote; what check_record answers (record, blank, end of data, invalid); the CRC checks."""
from __future__ import annotations

import struct

import pytest

from rmqstore.format import frame as F
from rmqstore.format import message as M
from rmqstore.format import properties as P
from rmqstore.format.hashes import crc32
from tests.kit import load_vector, read_bytes, segment_of, stored_record
from tests.kit import record as make


@pytest.mark.parametrize("name", ["basic", "propcrc", "rollover"])
def test_read_layout_finds_the_parts_of_the_records_rocketmq_wrote(name):
    """IPv4 hosts, V1: BODYLENGTH at 84, the body at 88, a one-byte topic length after it, then
    the topic, a two-byte properties length and the properties (FORMAT.md §2.1)."""
    vs = load_vector(name)
    for m in vs.messages():
        rec = b"\x00" * 5 + stored_record(vs, m) + b"\x00" * 9
        lay = F.read_layout(rec, 5, len(rec))
        blen, topic, props = m["bodyLength"], m["topic"].encode(), m["propertiesRaw"].encode()
        assert lay == (m["storeSize"], -626843481, 0, 8, 8, 88, blen, 89 + blen, len(topic),
                       91 + blen + len(topic), len(props))
        assert lay.store_timestamp_pos == 56
        assert rec[5 + lay.topic_pos:5 + lay.topic_pos + lay.topic_len] == topic
        assert rec[5 + lay.props_pos:5 + lay.props_pos + lay.props_len] == props
        assert F.check_record(rec, 5, len(rec), check_crc=True) == (m["storeSize"], True, "ok")
        assert F.crc_problem(rec, 5, lay) == "" and not F.torn_end(rec, 5, lay)


def test_check_record_finds_the_blanks_rocketmq_wrote_at_segment_ends():
    vs = load_vector("rollover")
    size = vs.config.mapped_file_size_commit_log
    ends: dict[int, int] = {}  # segment start -> end of its last record
    for m in vs.messages():
        start = m["phyOffset"] - m["phyOffset"] % size
        ends[start] = max(ends.get(start, 0), m["phyOffset"] + m["storeSize"])
    full = sorted(ends)[:-1]
    assert full  # the vector rolls over
    for start in full:
        path, pos = segment_of(vs.store, ends[start], size)
        buf = read_bytes(path)
        assert F.check_record(buf, pos, len(buf), check_crc=True) == (0, True, "blank")
        assert struct.unpack_from(">i", buf, pos)[0] == size - pos  # the space the segment had left
    path, pos = segment_of(vs.store, ends[sorted(ends)[-1]], size)
    buf = read_bytes(path)
    assert F.check_record(buf, pos, len(buf), check_crc=True) == (0, False, "end")


@pytest.mark.parametrize("damage, reason", [
    (lambda r: r[:39], "only 39 bytes readable"),
    (lambda r: r[:4] + b"\x01\x02\x03\x04" + r[8:], "bad magic code 0x01020304"),
    (lambda r: r[:-1], "does not fit"),
    (lambda r: struct.pack(">i", len(r) - 1) + r[4:], "differs from the length of its fields"),
    (lambda r: r[:84] + struct.pack(">i", 10_000) + r[88:], "BODYLENGTH 10000 runs past"),
    (lambda r: r[:93] + b"\xff" + r[94:], "negative TOPICLENGTH -1"),
])
def test_read_layout_says_what_is_wrong(damage, reason):
    rec = damage(bytes(make(body=b"hello")))  # the topic length at 88 + 5
    with pytest.raises(ValueError, match=reason):
        F.read_layout(rec, 0, len(rec))


def test_torn_end_sees_a_record_that_ends_in_a_zero_byte():
    rec = bytearray(make())
    lay = F.read_layout(rec, 0, len(rec))
    assert not F.torn_end(rec, 0, lay)
    rec[-1] = 0  # the properties' last byte (a complete record's is 0x02)
    assert F.torn_end(rec, 0, lay)
    no_props = bytearray(make(props=b""))
    lay = F.read_layout(no_props, 0, len(no_props))
    assert not F.torn_end(no_props, 0, lay)
    no_props[lay.topic_pos + lay.topic_len - 1] = 0  # then the topic's last byte
    assert F.torn_end(no_props, 0, lay)


def test_crc_problem_checks_the_body_or_under_force_verify_the_properties_crc():
    vs = load_vector("propcrc")
    m = vs.messages()[3]
    rec = bytearray(stored_record(vs, m))
    lay = F.read_layout(rec, 0, len(rec))
    assert F.crc_problem(rec, 0, lay) == "" and F.crc_problem(rec, 0, lay, True) == ""
    rec[lay.body_pos] ^= 1
    assert F.crc_problem(rec, 0, lay) == f"body CRC {m['bodyCRC']} != computed {crc32(rec[88:88 + lay.body_len])}"
    assert F.crc_problem(rec, 0, lay, True).startswith("properties CRC ")  # the body is in the CRC'd bytes
    rec[lay.body_pos] ^= 1
    rec[-2] ^= 1  # a digit of the CRC entry: only the properties CRC sees it
    assert F.crc_problem(rec, 0, lay) == ""
    assert F.crc_problem(rec, 0, lay, True).startswith("properties CRC ")


def test_check_record_outcomes():
    rec = make()
    buf = bytes(rec) + bytes(64)
    assert M.check_record(buf, 0, len(buf), check_crc=True) == (len(rec), True, "ok")
    bad_crc = bytearray(buf)
    bad_crc[88] ^= 1  # body byte
    assert M.check_record(bad_crc, 0, len(bad_crc), check_crc=True)[:2] == (-1, False)
    assert M.check_record(bad_crc, 0, len(bad_crc), check_crc=False) == (len(rec), True, "ok")
    bad_magic = bytearray(buf)
    bad_magic[4:8] = b"\x01\x02\x03\x04"
    assert M.check_record(bad_magic, 0, len(bad_magic), check_crc=True)[:2] == (-1, False)
    bad_len = bytearray(buf)  # TOTALSIZE one more than the formula: (TOTALSIZE, fail)
    struct.pack_into(">i", bad_len, 0, len(rec) + 1)
    assert M.check_record(bad_len, 0, len(bad_len), check_crc=True)[:2] == (len(rec) + 1, False)
    torn = bytes(rec)[:-1]
    assert M.check_record(torn, 0, len(torn), check_crc=True)[1] is False


def test_properties_crc_fill_and_verify():
    props = P.with_crc_reserved(b"TAGS\x01abc\x02")
    rec = make(props=props)
    crc = M.fill_prop_crc(rec, 0, len(rec))
    assert crc == crc32(bytes(rec[:-20]))
    assert rec[-20:] == b"__CRC32#\x01" + P.crc_digits(crc) + b"\x02"
    lay = M.read_layout(rec, 0, len(rec))
    assert M.verify_prop_crc(rec, 0, lay) == ""
    assert M.check_record(rec, 0, len(rec), check_crc=True, force_verify_prop_crc=True) == (len(rec), True, "ok")
    tampered = bytearray(rec)
    tampered[lay.props_pos + 2] += 1  # a byte in the middle of the properties
    assert M.verify_prop_crc(tampered, 0, lay) != ""
    assert M.check_record(tampered, 0, len(tampered), check_crc=True, force_verify_prop_crc=True)[:2] == (-1, False)
    missing = make(props=b"TAGS\x01abc\x02")
    assert "missing" in M.verify_prop_crc(missing, 0, M.read_layout(missing, 0, len(missing)))
