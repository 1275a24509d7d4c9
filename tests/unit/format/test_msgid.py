"""Message ids (FORMAT.md §3): offsetMsgId and UNIQ_KEY."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from rmqstore import CorruptRecordError, MessageIdError
from rmqstore.format import msgid as I


def _local_ms(y, mo, d=1, h=0, mi=0, s=0) -> int:
    return int(time.mktime((y, mo, d, h, mi, s, 0, 0, -1)) * 1000)


@pytest.mark.parametrize("host,raw", [
    ("127.0.0.1:9103", "7F0000010000238F"),
    ("10.0.0.1:10911", "0A00000100002A9F"),
    ("[::1]:9103", "00000000000000000000000000000001" "0000238F"),
    ("[2001:db8::1]:0", "20010DB8000000000000000000000001" "00000000"),
])
def test_host_round_trip(host, raw):
    assert I.parse_host(host).hex().upper() == raw
    assert I.format_host(bytes.fromhex(raw)) == host


def test_parse_host_rejects():
    with pytest.raises(ValueError):
        I.parse_host("no-port")
    with pytest.raises(ValueError):
        I.parse_host("999.0.0.1:1")


def test_offset_msg_id_ipv4_round_trip():
    mid = I.encode_offset_msg_id(I.parse_host("127.0.0.1:9103"), 123456)
    assert mid == "7F000001" "0000238F" "000000000001E240"
    assert I.decode_offset_msg_id(mid) == ("127.0.0.1:9103", 123456)
    assert I.decode_offset_msg_id(mid.lower()) == ("127.0.0.1:9103", 123456)


def test_offset_msg_id_ipv6_round_trip():
    mid = I.encode_offset_msg_id(I.parse_host("[::1]:9103"), 123456)
    assert len(mid) == 56
    assert mid == "00000000000000000000000000000001" "0000238F" "000000000001E240"
    assert I.decode_offset_msg_id(mid) == ("[::1]:9103", 123456)


@pytest.mark.parametrize("bad", ["XYZ", "zz", "7F00", "7F0000010000238F000000000001E2", "0" * 34,
                                 "7F000001 0000238F000000000001E240", ""])
def test_offset_msg_id_rejects(bad):
    """A malformed id is a MessageIdError (a ValueError): the caller's mistake, not damage on disk."""
    with pytest.raises(MessageIdError) as e:
        I.decode_offset_msg_id(bad)
    assert isinstance(e.value, ValueError) and not isinstance(e.value, CorruptRecordError)
    assert repr(bad) in str(e.value)


def test_offset_msg_id_must_be_a_str():
    with pytest.raises(TypeError):
        I.decode_offset_msg_id(12345)


def test_uniq_key_layout_and_parts():
    gen = I.UniqKeyGenerator("192.168.10.11")
    now = _local_ms(2024, 3, 10, 12)
    k = gen.new(now_ms=now)
    assert len(k) == 32 and k == k.upper()
    assert k[:8] == "C0A80A0B"
    assert int(k[8:12], 16) == os.getpid() & 0xFFFF == I.uniq_key_pid(k)
    assert int(k[20:28], 16) == now - _local_ms(2024, 3, 1)
    k2 = gen.new(now_ms=now)
    assert (int(k2[-4:], 16) - int(k[-4:], 16)) % 0x10000 == 1  # consecutive counter
    assert k2[:-4] == k[:-4]
    assert len(I.UniqKeyGenerator("::1").new(now_ms=now)) == 56


def test_uniq_key_timestamp_recovered():
    gen = I.UniqKeyGenerator()
    t = _local_ms(2024, 3, 10, 12, 30)
    assert I.uniq_key_timestamp(gen.new(now_ms=t), now_ms=t + 15) == t
    before = int(time.time() * 1000)
    k = gen.new()
    after = int(time.time() * 1000) + 1
    assert before - 1 <= I.uniq_key_timestamp(k, now_ms=after + 1) <= after


def test_uniq_key_timestamp_from_previous_month():
    """Created just before a month boundary, resolved just after: the previous month's start."""
    gen = I.UniqKeyGenerator()
    t = _local_ms(2024, 3, 1) - 1  # last millisecond of February
    assert I.uniq_key_timestamp(gen.new(now_ms=t), now_ms=_local_ms(2024, 3, 1) + 100) == t


def test_uniq_key_time_field_is_unsigned():
    """After ~24.8 days the time field has its top bit set; it decodes as unsigned (quirk 13)."""
    gen = I.UniqKeyGenerator()
    t = _local_ms(2024, 1, 30, 12)
    k = gen.new(now_ms=t)
    assert int(k[20:28], 16) >= 2**31
    assert I.uniq_key_timestamp(k, now_ms=t + 1000) == t


def test_uniq_key_from_the_vectors():
    k = "C0A80A0B1F404E6F7A2100006EAD001D"
    assert I.uniq_key_pid(k) == 0x1F40
    now = _local_ms(2024, 5, 20)
    assert I.uniq_key_timestamp(k, now_ms=now) == _local_ms(2024, 5, 1) + 0x6EAD


def test_uniq_key_timestamp_rejects():
    with pytest.raises(MessageIdError):
        I.uniq_key_timestamp("not hex")
    with pytest.raises(MessageIdError):
        I.uniq_key_timestamp("00FF")


@pytest.mark.parametrize("n", [1, 32, I.IDS_PACKED, I.IDS_PACKED + 1])
def test_batch_msg_ids_packed_and_filled_are_the_ones_one_by_one(n):
    """Up to ``IDS_PACKED`` records one cached struct packs the ids, past it a numpy fill."""
    for host in ("10.0.0.1:10911", "[2001:db8::1]:10911"):
        raw = I.parse_host(host)
        offsets = [i * 1_000_003 + (1 << 40) for i in range(n)]
        want = ",".join(I.encode_offset_msg_id(raw, o) for o in offsets)
        assert I.encode_offset_msg_ids(raw, offsets) == want
        assert I.encode_offset_msg_ids(raw, np.array(offsets, dtype=np.int64)) == want
