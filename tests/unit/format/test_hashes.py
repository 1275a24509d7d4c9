"""Java-compatible hashes and the masked CRC-32 (FORMAT.md §0, §4.2, §6.2), scalar and numpy."""
from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore.format import hashes as H

# FORMAT.md §4.2
SPEC_VECTORS = [
    ("abc", 96354),
    ("TAG1", 2567159),
    ("TagA", 2598919),
    ("FooBar#Hello", -101609924),
    ("中文", 646394),
    ("😀", 1772899),
    ("polygenelubricants", -2147483648),
    ("", 0),
]


def reference_hash(s: str) -> int:
    """Independent oracle: the definition over UTF-16 code units, astral chars as surrogate pairs."""
    h = 0
    for ch in s:
        cp = ord(ch)
        units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
        for u in units:
            h = (h * 31 + u) % 2**32
    return h - 2**32 if h >= 2**31 else h


def string_with_hash(prefix: str, target: int) -> str:
    """``prefix + 7 chars`` whose Java hash is ``target`` (base-31 digits offset by 'A')."""
    n = 7
    base = (reference_hash(prefix) % 2**32) * pow(31, n, 2**32)
    ones = sum(31**i for i in range(n))
    r = (target - base - 65 * ones) % 2**32
    digits = []
    for _ in range(n):
        digits.append(r % 31)
        r //= 31
    assert r == 0
    return prefix + "".join(chr(65 + d) for d in reversed(digits))


@pytest.mark.parametrize("s,h", SPEC_VECTORS)
def test_java_hash_spec_vectors(s, h):
    assert H.java_hash(s) == h
    assert reference_hash(s) == h
    assert H.java_hash_cached(s) == h


def test_java_hash_many_spec_vectors():
    got = H.java_hash_many([s for s, _ in SPEC_VECTORS])
    assert got.dtype == np.int32
    assert got.tolist() == [h for _, h in SPEC_VECTORS]
    assert H.java_hash_many([]).tolist() == []


def test_surrogate_pair_counts_as_two_units():
    # U+1F600 is D83D DE00 in UTF-16
    assert H.java_hash("😀") == 0xD83D * 31 + 0xDE00
    assert H.java_hash("\ud83d\ude00") == H.java_hash("😀")  # lone surrogates written out
    assert H.java_hash("\ud800") == 0xD800
    assert H.java_hash_many(["\ud800", "a\udfffb"]).tolist() == [0xD800, reference_hash("a\udfffb")]


def test_hash_collision_pair():
    assert H.java_hash("Aa") == H.java_hash("BB") == 2112
    assert H.index_key_hash("T", "Aa") == H.index_key_hash("T", "BB")
    assert H.index_key_hash("T", "Aa") != H.index_key_hash("U", "Aa")


def test_index_key_hash_is_abs_of_topic_hash_key():
    assert H.index_key_hash("FooBar", "Hello") == 101609924
    assert H.index_key_hash("TopicTest", "order-0") == abs(reference_hash("TopicTest#order-0"))


def test_index_key_hash_min_value_is_zero():
    s = string_with_hash("T#", -2**31)
    assert reference_hash(s) == -2**31 == H.java_hash(s)
    assert H.index_key_hash("T", s[2:]) == 0
    assert H.abs_key_hash(-2**31) == 0
    assert H.abs_key_hash(-5) == 5
    got = H.abs_key_hash_many(np.array([-2**31, -5, 7, 0, 2**31 - 1], dtype=np.int32))
    assert got.tolist() == [0, 5, 7, 0, 2**31 - 1]


def test_java_hash_ranges_and_combine_match_the_scalar_hash():
    texts = [b"", b"k", b"order-17", b"abc def", "中文".encode()]
    buf = np.frombuffer(b"".join(texts), dtype=np.uint8)
    lens = np.array([len(t) for t in texts])
    ends = np.cumsum(lens)
    starts = ends - lens
    h, ascii_ok = H.java_hash_ranges(buf, starts, ends)
    assert ascii_ok.tolist() == [True, True, True, True, False]
    for t, v, ok in zip(texts, H.to_int32(h).tolist(), ascii_ok.tolist()):
        if ok:
            assert v == reference_hash(t.decode())
    prefix = np.array([reference_hash("Topic#") % 2**32] * 4, dtype=np.uint64)
    full = H.to_int32(H.combine_hash(prefix, h[:4], lens[:4]))
    assert full.tolist() == [reference_hash("Topic#" + t.decode()) for t in texts[:4]]


def test_crc32_is_masked_to_31_bits():
    # CRC-32 check value of "123456789" is 0xCBF43926; "a" is 0xE8B7BE43: both have the top bit set
    assert H.crc32(b"123456789") == 0x4BF43926
    assert H.crc32(b"a") == 0x68B7BE43
    assert H.crc32(b"") == 0
    assert H.crc32(memoryview(b"123456789")) == 0x4BF43926


# Properties against the definition (hypothesis)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 511, 512, 513, 1000])
@pytest.mark.parametrize("unit", ["k", "é", "😀", "\udfff"])
def test_java_hash_runs_of_weights(n, unit):
    """java_hash sums each run of up to 256 code units with its weights, then shifts the hash of
    the runs before it: lengths around the run size, ASCII and UTF-16 (a pair counts as two)."""
    s = "".join(chr(ord(unit) + (i % 7 if unit != "😀" else 0)) for i in range(n))
    assert H.java_hash(s) == reference_hash(s)
    assert H.java_hash("x" + s) == reference_hash("x" + s)


@FAST
@given(st.text(min_size=200, max_size=700))
def test_java_hash_long_strings(s):
    assert H.java_hash(s) == reference_hash(s)


@FAST
@given(st.lists(st.text(max_size=40), max_size=12))
def test_java_hash_scalar_numpy_and_definition_agree(strings):
    many = H.java_hash_many(strings).tolist()
    assert many == [H.java_hash(s) for s in strings] == [reference_hash(s) for s in strings]


@FAST
@given(st.lists(st.text(st.characters(min_codepoint=0x10000), min_size=1, max_size=5), min_size=1, max_size=5))
def test_java_hash_of_astral_strings(strings):
    assert H.java_hash_many(strings).tolist() == [reference_hash(s) for s in strings]
    for s in strings:
        assert H.java_hash(s) == H.java_hash(s.encode("utf-16-be").decode("utf-16-be", "surrogatepass"))


# the column-wise hash: a length shared by many ranges is its own group, others are padded into
# width groups, ranges over 64 bytes are hashed byte-wise; every route must give the same answer
range_texts = st.lists(st.text(st.characters(max_codepoint=0x7F), max_size=90) | st.text("ab中", max_size=8),
                       max_size=40)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(range_texts, st.integers(0, 600), st.integers(0, 70), st.integers(0, 2**32))
def test_java_hash_ranges_matches_the_definition_on_every_route(texts, common, common_len, seed):
    # the many strings of one length come from a seeded generator, not from hypothesis's data
    # (drawing hundreds of strings there exceeds its entropy budget)
    rnd = random.Random(seed)
    texts = texts + ["".join(rnd.choice("xyz0189#-") for _ in range(common_len)) for _ in range(common)]
    rnd.shuffle(texts)
    raw = [t.encode() for t in texts]
    buf = np.frombuffer(b"".join(raw) + b"\x00", dtype=np.uint8)  # (never an empty buffer)
    lens = np.array([len(r) for r in raw], dtype=np.int64)
    ends = np.cumsum(lens)
    h, ascii_ok = H.java_hash_ranges(buf, ends - lens, ends)
    assert ascii_ok.tolist() == [r.isascii() for r in raw]
    got = H.to_int32(h).tolist()
    for t, r, v in zip(texts, raw, got):
        if r.isascii():
            assert v == reference_hash(t), t


def test_java_hash_ranges_ignores_bytes_outside_the_ranges():
    # a range's neighbours (before it: the zero padding of the column-wise hash) never leak in
    buf = np.frombuffer(b"\xffabc\xffdefgh\xff" + b"k" * 300, dtype=np.uint8)
    starts = np.array([1, 5, 11, 11] + [11 + i for i in range(300)], dtype=np.int64)
    ends = np.array([4, 10, 11, 311] + [12 + i for i in range(300)], dtype=np.int64)
    h, ok = H.java_hash_ranges(buf, starts, ends)
    assert ok.all()
    want = [reference_hash("abc"), reference_hash("defgh"), 0, reference_hash("k" * 300)] + [reference_hash("k")] * 300
    assert H.to_int32(h).tolist() == want


@given(st.binary(max_size=5000), st.integers(0, 16))
def test_the_fast_crc32_is_zlibs(data, cut):
    """format.hashes uses ISA-L's CRC-32 when isal is installed: the same value as zlib's, on whole
    buffers and on memoryview slices (how the record checks call it)."""
    import zlib

    from rmqstore.format.hashes import crc32_raw

    assert crc32_raw(data) == zlib.crc32(data)
    assert crc32_raw(memoryview(data)[cut:]) == zlib.crc32(data[cut:])


@given(st.text(max_size=12), st.text(max_size=50), st.text(alphabet="0123456789ABCDEF", min_size=20, max_size=40))
def test_index_key_hash_of_long_keys_is_the_whole_strings_hash(topic, key, uniq):
    """Keys past 24 ASCII characters take the memoised-head path: the same value as hashing ``topic#key``."""
    for k in (key, uniq, key + uniq, uniq + key):
        assert H.index_key_hash(topic, k) == abs(reference_hash(f"{topic}#{k}")) % (1 << 31)
        assert H.index_key_hash(topic, k) == H.abs_key_hash(H.java_hash(f"{topic}#{k}"))


def test_index_key_hash_min_value_is_zero_on_the_long_key_path():
    s = string_with_hash("T#" + "0100007F00000EF1" * 2, -2**31)
    assert len(s) - 2 > 24 and H.index_key_hash("T", s[2:]) == 0
