"""Hypothesis round trips of the format codecs; scalar and numpy forms must agree."""
from __future__ import annotations

import ipaddress
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore.engine.dispatch import SMALL_BATCH, extract_dispatch_columns, extract_dispatch_fields
from rmqstore.engine.index import IndexFile
from rmqstore.format import consume_queue as CQ
from rmqstore.format import index_file as IX
from rmqstore.format import message as M
from rmqstore.format import properties as P
from rmqstore.format.hashes import abs_key_hash, crc32, java_hash
from rmqstore.format.msgid import (decode_offset_msg_id, encode_offset_msg_id, encode_offset_msg_ids, format_host,
                                   parse_host)
from rmqstore.types import tags_code_of

#: memory-backed scratch space where there is one (index files are fsynced on flush)
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)
TOPIC_CHARS = "abcXYZ019_-%|"
no_sep_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                      max_size=12)


# ------------------------------------------------------------------------------------------------
# Java hash
# ------------------------------------------------------------------------------------------------

# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------

@FAST
@given(st.dictionaries(no_sep_text, no_sep_text | st.just(""), max_size=8))
def test_properties_round_trip(props):
    raw = P.encode_properties(props)
    assert P.parse_properties(raw) == {k: v for k, v in props.items() if v}  # empty values are dropped
    assert raw.count(b"\x02") == len(props)
    for name in props:
        assert P.parse_properties(P.remove_property(raw, name)) == {k: v for k, v in props.items() if v and k != name}


@FAST
@given(st.dictionaries(no_sep_text, st.text(st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)),
                                            min_size=1, max_size=12), max_size=6))
def test_values_may_hold_the_name_separator(props):
    assert P.parse_properties(P.encode_properties(props)) == props


any_value = st.none() | st.integers(-5, 5) | st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
prop_keys = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6) | st.sampled_from(["{", "}{}"])


@FAST
@given(st.lists(prop_keys, unique=True, max_size=4).flatmap(
    lambda keys: st.lists(st.lists(any_value, min_size=len(keys), max_size=len(keys)), max_size=8).map(
        lambda rows: [dict(zip(keys, r)) for r in rows])),
    st.lists(st.dictionaries(prop_keys, any_value, max_size=3), max_size=4))
def test_properties_batch_encoder_equals_one_by_one(uniform, mixed):
    """encode_properties_many (one generated encoder per entry count: encode_dicts) writes the
    bytes encode_properties writes, also with None values, braces in keys, non-str values, and for
    batches whose key order differs, whose sizes differ or that mix shapes."""
    reordered = [dict(reversed(list(d.items()))) for d in uniform[:1]] + uniform[1:]
    for batch in (uniform, mixed, uniform + mixed, reordered, [list(d.items()) for d in uniform]):
        want = [P.encode_properties(p) for p in batch]
        assert P.encode_properties_many(batch) == want
        if batch and all(type(p) is dict for p in batch):
            got = P.encode_dicts(batch)
            if len({len(p) for p in batch}) > 1:
                assert got is None  # another number of entries: the caller encodes one by one
            elif any(v is None for p in batch for v in p.values()):
                assert P.NONE_WRITTEN in b"\x00".join(got)  # what tells the caller to go one by one
            else:
                assert got == want


@pytest.mark.parametrize("k", [0, 1, 2, 17, 300])
def test_properties_encoder_with_many_entries(k):
    """The generated f-string encoder of each entry count writes the bytes of encode_properties,
    and refuses a batch with a dict of another size."""
    batch = [{f"k{j}{{}}": (f"v{i}-{j}" if j % 3 else i * j) for j in range(k)} for i in range(5)]
    assert P.encode_dicts(batch) == [P.encode_properties(d) for d in batch]
    assert P.encode_dicts(batch + [{**batch[0], "extra": 1}]) is None
    if k:
        assert P.encode_dicts(batch + [dict(list(batch[0].items())[1:])]) is None


@FAST
@given(st.integers(0, 2**31 - 1))
def test_crc_digits_round_trip(c):
    d = P.crc_digits(c)
    assert len(d) == 10 and P.parse_crc_digits(d.decode()) == c and int(d[::-1]) == c


# ------------------------------------------------------------------------------------------------
# Records: encode -> scalar decode -> batch decode
# ------------------------------------------------------------------------------------------------

ipv4 = st.builds(lambda a, p: f"{ipaddress.IPv4Address(a)}:{p}", st.integers(0, 2**32 - 1), st.integers(0, 65535))
ipv6 = st.builds(lambda a, p: f"[{ipaddress.IPv6Address(a)}]:{p}", st.integers(0, 2**128 - 1), st.integers(0, 65535))
host = ipv4 | ipv6

record_fields = st.fixed_dictionaries({
    "topic": st.text(TOPIC_CHARS, min_size=1, max_size=200),
    "body": st.binary(max_size=300),
    "props": st.dictionaries(no_sep_text, no_sep_text, max_size=5),
    "queue_id": i32, "flag": i32, "sys_flag": i32, "queue_offset": i64, "phy_offset": st.integers(0, 2**62),
    "born_timestamp": i64, "store_timestamp": i64, "reconsume_times": i32, "prepared_transaction_offset": i64,
    "born_host": host, "store_host": host,
})


def _encode(f) -> bytes:
    born, store = parse_host(f["born_host"]), parse_host(f["store_host"])
    sys_flag = (f["sys_flag"] & ~0x30) | (0x10 if len(born) == 20 else 0) | (0x20 if len(store) == 20 else 0)
    f["sys_flag_stored"] = sys_flag - (1 << 32) if sys_flag >= 1 << 31 else sys_flag
    return bytes(M.encode_record(
        topic=f["topic"].encode(), body=f["body"], props=P.encode_properties(f["props"]), queue_id=f["queue_id"],
        flag=f["flag"], sys_flag=f["sys_flag_stored"], born_timestamp=f["born_timestamp"], born_host=born,
        store_timestamp=f["store_timestamp"], store_host=store, reconsume_times=f["reconsume_times"],
        prepared_transaction_offset=f["prepared_transaction_offset"], v2=len(f["topic"]) > 127,
        queue_offset=f["queue_offset"], phy_offset=f["phy_offset"]))


@FAST
@given(st.lists(record_fields, min_size=1, max_size=5))
def test_record_encode_scalar_decode_batch_decode(fields):
    recs = [_encode(f) for f in fields]
    buf = b"".join(recs)
    starts = np.cumsum([0] + [len(r) for r in recs[:-1]]).astype(np.int64)
    walked, stop, pos = M.walk_records(buf, 0, len(buf))
    assert walked.tolist() == starts.tolist() and pos == len(buf)
    b = M.decode_batch(np.frombuffer(buf, dtype=np.uint8), walked)
    assert b.valid.all() and M.body_crc_ok(buf, b).all()
    for i, (f, s) in enumerate(zip(fields, starts.tolist())):
        assert len(recs[i]) == M.record_length(len(f["body"]), len(f["topic"]), len(P.encode_properties(f["props"])),
                                               f["sys_flag_stored"], len(f["topic"]) > 127)
        assert M.check_record(buf, s, len(buf), check_crc=True) == (len(recs[i]), True, "ok")
        m = M.decode_message(buf, s, len(buf), check_crc=True)
        assert (m.topic, m.body, m.properties, m.queue_id, m.flag, m.sys_flag, m.queue_offset, m.phy_offset) == (
            f["topic"], f["body"], f["props"], f["queue_id"], f["flag"], f["sys_flag_stored"], f["queue_offset"],
            f["phy_offset"])
        assert (m.born_timestamp, m.store_timestamp, m.reconsume_times, m.prepared_transaction_offset) == (
            f["born_timestamp"], f["store_timestamp"], f["reconsume_times"], f["prepared_transaction_offset"])
        assert parse_host(m.born_host) == parse_host(f["born_host"])
        assert parse_host(m.store_host) == parse_host(f["store_host"])
        assert m.body_crc == (crc32(f["body"]) if f["body"] else 0)
        assert m.magic == (M.MAGIC_V2 if len(f["topic"]) > 127 else M.MAGIC_V1)
        assert decode_offset_msg_id(m.msg_id) == (format_host(parse_host(f["store_host"])), f["phy_offset"])
        assert m.msg_id == encode_offset_msg_id(parse_host(f["store_host"]), f["phy_offset"])
        got = (int(b.total[i]), int(b.magic[i]), int(b.body_crc[i]), int(b.queue_id[i]), int(b.flag[i]),
               int(b.queue_offset[i]), int(b.phy_offset[i]), int(b.sys_flag[i]), int(b.born_timestamp[i]),
               int(b.store_timestamp[i]), int(b.reconsume_times[i]), int(b.prepared_transaction_offset[i]))
        assert got == (m.store_size, m.magic, m.body_crc, m.queue_id, m.flag, m.queue_offset, m.phy_offset,
                       m.sys_flag, m.born_timestamp, m.store_timestamp, m.reconsume_times,
                       m.prepared_transaction_offset)
        bp, tp, pp = int(b.body_pos[i]), int(b.topic_pos[i]), int(b.props_pos[i])
        assert buf[bp:bp + int(b.body_len[i])] == f["body"]
        assert buf[tp:tp + int(b.topic_len[i])] == f["topic"].encode()
        assert buf[pp:pp + int(b.props_len[i])] == P.encode_properties(f["props"])
        bh, sh = int(b.born_host_pos[i]), int(b.store_host_pos[i])
        assert buf[bh:bh + int(b.born_host_len[i])] == parse_host(f["born_host"])
        assert buf[sh:sh + int(b.store_host_len[i])] == parse_host(f["store_host"])


# ------------------------------------------------------------------------------------------------
# Dispatch extraction: scalar vs numpy vs upstream parsing, on arbitrary property strings
# ------------------------------------------------------------------------------------------------

prop_names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "", "X", "TAGSX", "ATAGS", "KEYS "])
prop_values = st.text(st.sampled_from("ab \x01中😀-"), max_size=8) | st.integers(-1, 25).map(str)
segment = st.builds(lambda n, sep, v: n + ("\x01" if sep else "") + v, prop_names, st.booleans(), prop_values)
raw_props = st.builds(lambda segs, tail: "\x02".join(segs) + ("\x02" if tail else ""),
                      st.lists(segment, max_size=6), st.booleans())
DELAYS = tuple(1000 * (i + 1) for i in range(18))


@FAST
@given(st.lists(st.tuples(st.sampled_from(["T", "Topic_B", "SCHEDULE_TOPIC_XXXX", "t" * 130]), raw_props),
                min_size=1, max_size=6))
def test_dispatch_extraction_forms_agree(records):
    """Scalar and numpy extraction against upstream's parsing. The records are repeated past
    ``SMALL_BATCH`` so that the numpy form is the one exercised (a batch of one record repeated
    takes its one-topic path; spaces in KEYS values its token split)."""
    records = records * (SMALL_BATCH // len(records) + 1)
    born = parse_host("1.2.3.4:5")
    buf = bytearray()
    for i, (topic, props) in enumerate(records):
        buf += M.encode_record(topic=topic.encode(), body=b"", props=props.encode(), queue_id=0, flag=0, sys_flag=0,
                               born_timestamp=0, born_host=born, store_timestamp=1000 * i, store_host=born,
                               reconsume_times=0, prepared_transaction_offset=0, v2=len(topic) > 127)
    buf = bytes(buf)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    batch = M.decode_batch(u8, M.walk_records(buf, 0, len(buf))[0])
    topics, tags, key_lists = extract_dispatch_fields(buf, batch, DELAYS, {})
    cols = extract_dispatch_columns(u8, batch, DELAYS, {})
    for i, (topic, props) in enumerate(records):
        p = P.parse_properties(props)
        keys = ([p["UNIQ_KEY"]] if "UNIQ_KEY" in p else []) + P.split_keys(p.get("KEYS"))
        want_hashes = [abs_key_hash(java_hash(f"{topic}#{k}")) for k in keys]
        assert topics[i] == cols.topics[cols.topic_ids[i]] == topic
        assert int(tags[i]) == int(cols.tags_codes[i]) == tags_code_of(topic, p, 1000 * i, DELAYS)
        assert [abs_key_hash(java_hash(s)) for s in key_lists[i]] == want_hashes
        assert cols.item_hash[cols.item_rec == i].tolist() == want_hashes


# ------------------------------------------------------------------------------------------------
# Consume queue units and index files
# ------------------------------------------------------------------------------------------------

@FAST
@given(st.lists(st.tuples(i64, i32, i64), max_size=20))
def test_cq_units_scalar_and_numpy(units):
    data = CQ.encode_units([u[0] for u in units], [u[1] for u in units], [u[2] for u in units])
    assert data == b"".join(CQ.UNIT.pack(*u) for u in units)
    arr = CQ.decode_units(data)
    assert [(int(a["phy_offset"]), int(a["size"]), int(a["tags_code"])) for a in arr] == units


@FAST
@given(st.lists(st.tuples(st.integers(0, 2**45), st.integers(-2**40, 2**45)), min_size=1, max_size=20))
def test_time_diff_scalar_and_numpy(pairs):
    s = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    assert IX.time_diff_seconds(s, b).tolist() == [IX.time_diff_seconds(int(x), int(y)) for x, y in pairs]
    for x, y in pairs:
        want = 0 if y <= 0 or x < y else min((x - y) // 1000, 2**31 - 1)
        assert IX.time_diff_seconds(x, y) == want


T0 = 1_700_000_000_000
index_items = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**40), st.integers(-5_000, 10**7)),
                       min_size=1, max_size=30)


@settings(max_examples=40, deadline=None)
@given(slots=st.integers(1, 8), items=st.integers(2, 20), batch=index_items, cuts=st.lists(st.integers(0, 30)),
       prev_end=st.sampled_from([(0, 0), (777, T0 - 3_000)]))
def test_index_put_batch_equals_put_key(slots, items, batch, cuts, prev_end):
    """One put_batch call, several put_batch chunks and put_key one item at a time write the same
    file (and accept the same number of items)."""
    hashes = np.array([b[0] for b in batch], dtype=np.int64)
    phys = np.cumsum([b[1] for b in batch]).astype(np.int64)
    ts = T0 + np.array([b[2] for b in batch], dtype=np.int64)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as d:
        def new(name):
            return IndexFile.create(os.path.join(d, name), slots, items,
                                    prev_end_phy=prev_end[0], prev_end_ts=prev_end[1])
        one, chunked, scalar = new("one"), new("chunked"), new("scalar")
        n_one = one.put_batch(hashes, phys, ts)
        n_chunked = 0
        bounds = sorted({0, len(batch), *[c for c in cuts if c < len(batch)]})
        for a, b in zip(bounds, bounds[1:]):
            n_chunked += chunked.put_batch(hashes[a:b], phys[a:b], ts[a:b])
        n_scalar = sum(scalar.put_key(int(h), int(p), int(t)) for h, p, t in zip(hashes, phys, ts))
        assert n_one == n_chunked == n_scalar == min(len(batch), items - 1)
        for f in (one, chunked, scalar):
            f.flush()
        data = [open(os.path.join(d, n), "rb").read() for n in ("one", "chunked", "scalar")]
        for f in (one, chunked, scalar):
            f.close()
    assert data[0] == data[1] == data[2]
    assert IX.HEADER.unpack_from(data[0], 0)[5] == n_one + 1


@FAST
@given(ipv4 | ipv6, st.lists(st.integers(0, 2**63 - 1), max_size=20))
def test_batch_msg_ids_equal_one_by_one(host, offsets):
    raw = parse_host(host)
    want = ",".join(encode_offset_msg_id(raw, o) for o in offsets)
    assert encode_offset_msg_ids(raw, offsets) == want
    assert encode_offset_msg_ids(raw, np.array(offsets, dtype=np.int64)) == want


@FAST
@given(topic=st.text(TOPIC_CHARS, min_size=1, max_size=255),
       msgs=st.lists(st.tuples(st.binary(max_size=100), st.dictionaries(no_sep_text, no_sep_text, max_size=3), i32,
                               st.sampled_from([0, 1, 2, 0x80]), i64, i32, i64), min_size=1, max_size=6),
       queue_id=i32, qoff=st.integers(0, 2**40), phy=st.integers(0, 2**40), store_ts=i64, born=ipv4, store=ipv4,
       born_mode=st.sampled_from(["given", "unset", "mask"]))
def test_batch_encoder_equals_record_encoder(topic, msgs, queue_id, qoff, phy, store_ts, born, store, born_mode):
    """encode_batch_v4 + BatchV4.render (numpy headers) == encode_record + offsets (struct); a
    record whose born time is unset (every one, or those of a mask) gets the store time."""
    tb = topic.encode()
    v2 = len(tb) > 127
    tail = (len(tb).to_bytes(2, "big") if v2 else bytes([len(tb)])) + tb
    bh, sh = parse_host(born), parse_host(store)
    props = [P.encode_properties(p) for _, p, *_ in msgs]
    unset = np.array([born_mode == "unset" or (born_mode == "mask" and m[4] % 2 == 0) for m in msgs])
    born_ts = [store_ts if u else m[4] for m, u in zip(msgs, unset)]
    batch = M.encode_batch_v4(
        tail, [m[0] for m in msgs], props, queue_id=queue_id, flags=[m[2] for m in msgs],
        sys_flags=[m[3] for m in msgs],
        born_timestamps=None if born_mode == "unset" else np.array([0 if u else m[4] for m, u in zip(msgs, unset)]),
        born_host=bh, store_host=sh, reconsume_times=[m[5] for m in msgs], prepared_offsets=[m[6] for m in msgs])
    buf = batch.render(qoff, phy, store_ts, {"given": None, "unset": True, "mask": unset}[born_mode])
    starts, totals = batch.starts, batch.totals
    want = bytearray()
    for i, (body, _, flag, sys_flag, _, reconsume, prepared) in enumerate(msgs):
        want += M.encode_record(topic=tb, body=body, props=props[i], queue_id=queue_id, flag=flag, sys_flag=sys_flag,
                                born_timestamp=born_ts[i], born_host=bh, store_timestamp=store_ts, store_host=sh,
                                reconsume_times=reconsume, prepared_transaction_offset=prepared, v2=v2,
                                queue_offset=qoff + i, phy_offset=phy + len(want))
    assert buf == bytes(want)
    assert totals.tolist() == [M.read_layout(want, int(s), len(want)).total for s in starts]


def _parse_bytes_first(raw: bytes) -> dict:
    """Upstream's string2messageProperties on bytes, segment by segment (the specification)."""
    out = {}
    for seg in raw.split(b"\x02"):
        i = seg.find(b"\x01")
        if 0 < i < len(seg) - 1:
            out[seg[:i].decode("utf-8", "replace")] = seg[i + 1:].decode("utf-8", "replace")
    return out


@settings(max_examples=500)
@given(st.lists(st.sampled_from([b"\x01", b"\x02", b"a", b"bc", b"\xe2\x82\xac", b"\xe2", b"\x82", b"\xff",
                                 b"\x00", b"\xf0\x9f\x98", b"\xed\xa0\x80"]), max_size=40).map(b"".join))
def test_parse_properties_equals_splitting_the_bytes_first(raw):
    assert P.parse_properties(raw) == _parse_bytes_first(raw)
