"""Properties string (FORMAT.md §2.4, §2.6, §13 MessageExtBrokerInnerTest)."""
from __future__ import annotations

import pytest

from rmqstore.format import properties as P


@pytest.mark.parametrize("raw,want", [
    ("k1\x01v1", {"k1": "v1"}),
    ("k1\x01v1\x02", {"k1": "v1"}),
    ("", {}),
    (" ", {}),
    ("aaa", {}),
    ("k1\x01", {}),
    ("\x01v1", {}),
    ("k1\x01\x02k2\x01v2", {"k2": "v2"}),
    ("k1\x01v1\x02k2\x01v2\x02", {"k1": "v1", "k2": "v2"}),
    ("a\x011\x02a\x012\x02", {"a": "2"}),          # later duplicates overwrite
    ("a\x011\x02a\x01\x02", {"a": "1"}),           # an empty later value is dropped, not kept
    ("k\x01v\x01w", {"k": "v\x01w"}),              # only the first 0x01 separates
    ("k1\x02\x01v", {}),                           # the 0x01 of the next segment does not count
    ("a\x01b", {"a": "b"}),                        # 3 chars is enough
    ("\x02\x02k\x01v\x02\x02", {"k": "v"}),
])
def test_parse_properties_upstream_cases(raw, want):
    assert P.parse_properties(raw) == want
    assert P.parse_properties(raw.encode()) == want
    assert P.parse_properties(memoryview(raw.encode())) == want


def test_parse_properties_decodes_malformed_utf8_as_replacement_char():
    assert P.parse_properties(b"k\x01\xff\xfe\x02") == {"k": "\ufffd\ufffd"}
    assert P.parse_properties("键\x01值".encode()) == {"键": "值"}


def test_encode_properties_order_and_none():
    assert P.encode_properties([("b", "2"), ("a", "1"), ("c", None)]) == b"b\x012\x02a\x011\x02"
    assert P.encode_properties({"TAGS": "TagA", "KEYS": "k1 k2"}) == b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    assert P.encode_properties({"n": 5}) == b"n\x015\x02"
    assert P.encode_properties(None) == b""
    assert P.encode_properties({}) == b""
    assert P.encode_properties({"k": "中"}) == "k\x01中\x02".encode()
    assert P.encode_properties({"empty": ""}) == b"empty\x01\x02"  # written, dropped when parsed


# MessageExtBrokerInnerTest: deleting "KeyA"
@pytest.mark.parametrize("raw,name,want", [
    ("KeyA\x01ValueA\x02KeyB\x01ValueB", "KeyA", "KeyB\x01ValueB"),
    ("KeyB\x01ValueB\x02KeyA\x01ValueA", "KeyA", "KeyB\x01ValueB\x02"),
    ("KeyA\x01ValueA\x02KeyB\x01ValueBKeyA\x01ValueA\x02", "KeyA", "KeyB\x01ValueBKeyA\x01ValueA\x02"),
    ("__CRC32#\x01", "__CRC32#", ""),
    ("__CRC32#", "__CRC32#", "__CRC32#"),
    ("XKeyA\x01v\x02", "KeyA", "XKeyA\x01v\x02"),
    ("KeyA\x01v1\x02KeyA\x01v2\x02", "KeyA", ""),
])
def test_remove_property(raw, name, want):
    assert P.remove_property(raw.encode(), name) == want.encode()


@pytest.mark.parametrize("crc,digits", [
    (123456789, b"9876543210"),
    (0, b"0000000000"),
    (12, b"2100000000"),
    (2**31 - 1, b"7463847412"),
])
def test_crc_digits_least_significant_first(crc, digits):
    assert P.crc_digits(crc) == digits
    assert P.parse_crc_digits(digits.decode()) == crc


@pytest.mark.parametrize("bad", ["123", "12345678901", "12345x7890", "", "\u00b2" * 10])  # superscripts: isdigit, not int()
def test_parse_crc_digits_rejects(bad):
    assert P.parse_crc_digits(bad) is None


def test_with_crc_reserved():
    entry = b"__CRC32#\x010000000000\x02"
    assert len(entry) == P.CRC32_RESERVED_LEN == 20
    assert P.with_crc_reserved(b"") == entry
    assert P.with_crc_reserved(b"a\x01b\x02") == b"a\x01b\x02" + entry
    assert P.with_crc_reserved(b"a\x01b") == b"a\x01b\x02" + entry  # separator added
    # a producer-supplied entry is replaced
    assert P.with_crc_reserved(b"a\x01b\x02__CRC32#\x011111111111\x02") == b"a\x01b\x02" + entry


def test_split_keys():
    assert P.split_keys("k1 k2") == ["k1", "k2"]
    assert P.split_keys("k1  k2 ") == ["k1", "k2"]
    assert P.split_keys("k1\tk2") == ["k1\tk2"]
    assert P.split_keys("") == [] and P.split_keys(None) == []
