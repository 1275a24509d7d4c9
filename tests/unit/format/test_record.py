"""format/record.py: the consume-queue tagsCode rule (FORMAT.md §4.1, with §4.2's Java hash
vectors) and what a MessageRecord answers from its fields."""
from __future__ import annotations

import zlib

import pytest

from rmqstore.format.record import SCHEDULE_TOPIC, MessageRecord, tags_code_of

DELAYS = (1000, 5000, 10_000)  # three delay levels, in ms
TS = 1_700_000_000_000


@pytest.mark.parametrize("tags, want", [
    ("abc", 96354), ("TAG1", 2567159), ("TagA", 2598919), ("中文", 646394), ("😀", 1772899),
    ("polygenelubricants", -2147483648),  # FORMAT.md §4.2: sign-extended, can be negative
])
def test_tags_code_is_the_java_hash_of_the_tags(tags, want):
    assert tags_code_of("T", {"TAGS": tags}, TS, DELAYS) == want


def test_no_or_empty_tags_is_zero():
    assert tags_code_of("T", {}, TS, DELAYS) == 0
    assert tags_code_of("T", {"TAGS": ""}, TS, DELAYS) == 0
    assert tags_code_of("T", {"KEYS": "k"}, TS, DELAYS) == 0


@pytest.mark.parametrize("delay, want", [
    ("1", TS + 1000), ("3", TS + 10_000), ("7", TS + 10_000),  # clamped to the last level
    ("0", 2567159), ("-2", 2567159),                            # level <= 0: the tag hash
    ("x", 2567159),                                             # not an int: level 0
])
def test_schedule_topic_tags_code_is_the_delivery_time(delay, want):
    assert tags_code_of(SCHEDULE_TOPIC, {"DELAY": delay, "TAGS": "TAG1"}, TS, DELAYS) == want


def test_delay_on_another_topic_is_ignored():
    assert tags_code_of("T", {"DELAY": "2", "TAGS": "TAG1"}, TS, DELAYS) == 2567159


def _record(**kw) -> MessageRecord:
    f = dict(phy_offset=4096, store_size=120, topic="T", queue_id=1, queue_offset=7, flag=0, sys_flag=0,
             body_crc=zlib.crc32(b"hello") & 0x7FFFFFFF, born_timestamp=TS, born_host="10.0.0.1:5000",
             store_timestamp=TS + 1, store_host="10.0.0.2:10911", reconsume_times=0,
             prepared_transaction_offset=0, body=b"hello", properties={}, msg_id="ID")
    f.update(kw)
    return MessageRecord(**f)


def test_tags_keys_and_unique_key_come_from_the_properties():
    r = _record(properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1"})
    assert (r.tags, r.keys, r.uniq_key) == ("TagA", ["k1", "k2"], "U1")
    bare = _record()
    assert (bare.tags, bare.keys, bare.uniq_key) == (None, [], None)
    assert _record(properties={"TAGS": ""}).tags is None


@pytest.mark.parametrize("sys_flag, want", [(0, 0), (0x4, 0x4), (0x8, 0x8), (0xC, 0xC), (0x4 | 0x1, 0x4)])
def test_transaction_type_is_sysflag_bits_2_and_3(sys_flag, want):
    assert _record(sys_flag=sys_flag).transaction_type == want


def test_compressed_body_is_decoded():
    stored = zlib.compress(b"hello hello hello")
    r = _record(sys_flag=0x1, body=stored)  # sysFlag bit 0: COMPRESSED (zlib)
    assert r.compression == "zlib" and r.decoded_body == b"hello hello hello" and r.body == stored
    assert _record().compression is None and _record().decoded_body == b"hello"


def test_records_compare_and_list_by_their_fields():
    a, b = _record(), _record()
    assert a == b and a.as_dict() == b.as_dict()
    assert a.as_dict()["queue_offset"] == 7 and a.as_dict()["store_host"] == "10.0.0.2:10911"
    assert a != _record(queue_offset=8)
