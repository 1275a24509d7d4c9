"""Dispatch field extraction: the scalar form and the numpy form on the same records, and both
against upstream property parsing (FORMAT.md §2.4, §4.1, §6.5)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqstore import Message
from rmqstore.engine import dispatch as D
from rmqstore.engine.dispatch import _gather_ranges, extract_dispatch_columns, extract_dispatch_fields, iter_record_batches
from rmqstore.format import message as M
from rmqstore.format.hashes import abs_key_hash, java_hash
from rmqstore.format.msgid import parse_host
from rmqstore.format.properties import encode_properties, parse_properties, split_keys
from rmqstore.io.mapped_file_queue import MappedFileQueue
from rmqstore.types import tags_code_of

DELAYS = tuple(1000 * (i + 1) for i in range(18))
T0 = 1_700_000_000_000

CASES = [
    ("T", b""),
    ("T", b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02"),
    ("T", b"TAGS\x01\x02"),                                   # empty TAGS: tagsCode 0
    ("T", b"TAGS\x01first\x02TAGS\x01second\x02"),            # the last one wins
    ("T", b"TAGS\x01first\x02TAGS\x01\x02"),                  # an empty duplicate is dropped
    ("T", b"TAGS\x01noSeparatorAtTheEnd"),
    ("T", b"XTAGS\x01no\x02A\x01TAGS\x01no\x02"),            # not the TAGS property
    ("T", "TAGS\x01中文\x02KEYS\x01订单-7 😀\x02".encode()),
    ("T", b"KEYS\x01  a  b \x02"),                            # empty tokens dropped
    ("T", b"KEYS\x01a\tb c\x02"),                             # only spaces split
    ("T", b"KEYS\x01dup dup\x02UNIQ_KEY\x01dup\x02"),         # duplicates are all indexed
    ("T", b"KEYS\x01\xff\xfe bad\x02"),                       # malformed UTF-8 -> U+FFFD
    ("T", b"KEYS\x01k\x01v\x02"),                             # value holding 0x01
    ("Other", b"UNIQ_KEY\x01U1\x02KEYS\x01x\x02"),
    ("t" * 200, b"TAGS\x01long\x02KEYS\x01y\x02"),
    ("SCHEDULE_TOPIC_XXXX", b"DELAY\x013\x02TAGS\x01TagA\x02"),
    ("SCHEDULE_TOPIC_XXXX", b"TAGS\x01TagA\x02DELAY\x0199\x02"),
    ("SCHEDULE_TOPIC_XXXX", b"DELAY\x010\x02TAGS\x01TagA\x02"),
    ("SCHEDULE_TOPIC_XXXX", b"TAGS\x01TagA\x02"),
    ("T", b"DELAY\x013\x02TAGS\x01TagB\x02"),
    ("T", b"TAG\x01a\x02TAGSX\x01b\x02KEY\x01c\x02KEYSX\x01d\x02UNIQ_KEYS\x01e\x02"),  # names that only start alike
]


def _records(cases):
    buf = bytearray()
    born, store = parse_host("1.2.3.4:5"), parse_host("6.7.8.9:10")
    for i, (topic, props) in enumerate(cases):
        tb = topic.encode()
        buf += M.encode_record(topic=tb, body=b"x", props=props, queue_id=0, flag=0, sys_flag=0,
                               born_timestamp=T0, born_host=born, store_timestamp=T0 + i, store_host=store,
                               reconsume_times=0, prepared_transaction_offset=0, v2=len(topic) > 127,
                               phy_offset=len(buf))
    buf = bytes(buf)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    starts, _, _ = M.walk_records(buf, 0, len(buf))
    batch = M.decode_batch(u8, starts)
    assert batch.valid.all() and len(batch) == len(cases)
    return buf, u8, batch


def _upstream(topic, props, ts):
    """What upstream's checkMessageAndReturnSize derives: tagsCode and index keys."""
    p = parse_properties(props)
    keys = ([p["UNIQ_KEY"]] if "UNIQ_KEY" in p else []) + split_keys(p.get("KEYS"))
    return tags_code_of(topic, p, ts, DELAYS), [abs_key_hash(java_hash(f"{topic}#{k}")) for k in keys]


# one record with long properties: the gather takes its by-position branch, not padded rows
LONG = ("T", b"KEYS\x01" + b" ".join(b"k%d" % i for i in range(600)) + b"\x02TAGS\x01L\x02")


@pytest.mark.parametrize("cases", [CASES, CASES[:3] + [LONG] + CASES[3:]], ids=["padded-rows", "by-position"])
def test_scalar_and_numpy_extraction_agree_with_upstream_parsing(cases):
    buf, u8, batch = _records(cases)
    topics, tags, key_lists = extract_dispatch_fields(buf, batch, DELAYS, {})
    cols = extract_dispatch_columns(u8, batch, DELAYS, {})
    for i, (topic, props) in enumerate(cases):
        want_tags, want_keys = _upstream(topic, props, T0 + i)
        assert topics[i] == cols.topics[cols.topic_ids[i]] == topic
        assert int(tags[i]) == int(cols.tags_codes[i]) == want_tags, cases[i]
        assert [abs_key_hash(java_hash(s)) for s in key_lists[i]] == want_keys, cases[i]
        assert cols.item_hash[cols.item_rec == i].tolist() == want_keys, cases[i]
    assert np.all(np.diff(cols.item_rec) >= 0)


@given(st.lists(st.binary(max_size=40), max_size=12), st.integers(0, 1), st.booleans())
def test_gather_ranges_layout(ranges, gap, one_long):
    """Range i at ``buf[slot[i]+1:][:len]``, 0x02 before it and after it, on both branches (similar
    lengths: padded rows; one long range: by position), wherever the ranges sit."""
    if one_long:
        ranges = ranges + [b"L" * 500]
    data, pos = bytearray(b"\x07" * 3), []
    for r in ranges:
        pos.append(len(data))
        data += r + b"\x07" * gap
    u8 = np.frombuffer(bytes(data), dtype=np.uint8)
    lens = np.array([len(r) for r in ranges], dtype=np.int64)
    buf, slot = _gather_ranges(u8, np.array(pos, dtype=np.int64), lens)
    assert buf.dtype == np.uint8 and buf[-1] == 2
    for i, r in enumerate(ranges):
        s0 = int(slot[i])
        assert buf[s0] == 2 and buf[s0 + 1:s0 + 1 + len(r)].tobytes() == r and buf[s0 + 1 + len(r)] == 2
        nxt = int(slot[i + 1]) if i + 1 < len(ranges) else buf.size
        assert set(buf[s0 + 1 + len(r):nxt].tolist()) <= {2}  # only separators or padding in between


def test_expected_values_of_some_cases():
    buf, u8, batch = _records(CASES)
    cols = extract_dispatch_columns(u8, batch, DELAYS, {})
    assert int(cols.tags_codes[1]) == 2598919 and int(cols.tags_codes[2]) == 0
    assert int(cols.tags_codes[3]) == java_hash("second") and int(cols.tags_codes[4]) == java_hash("first")
    assert int(cols.tags_codes[6]) == 0
    assert int(cols.tags_codes[15]) == T0 + 15 + 3000           # DELAY 3 with these levels
    assert int(cols.tags_codes[16]) == T0 + 16 + 18000          # clamped to level 18
    assert int(cols.tags_codes[17]) == int(cols.tags_codes[18]) == 2598919
    assert int(cols.tags_codes[19]) == java_hash("TagB")        # DELAY ignored on other topics
    assert cols.item_hash[cols.item_rec == 1].tolist() == [abs_key_hash(java_hash(f"T#{k}")) for k in ("ABC", "k1", "k2")]


def test_empty_batch():
    buf, u8, batch = _records([("T", b"")])
    cols = extract_dispatch_columns(u8, batch.take(0), DELAYS, {})
    assert cols.item_rec.size == 0 and cols.tags_codes.size == 0


def test_iter_record_batches_follows_blanks(tmp_path):
    q = MappedFileQueue(str(tmp_path / "cl"), 512)
    born = parse_host("1.2.3.4:5")
    phys = []
    for i in range(7):
        mf = q.get_last_mapped_file(0)
        rec = M.encode_record(topic=b"T", body=b"z" * 150, props=b"", queue_id=0, flag=0, sys_flag=0,
                              born_timestamp=T0, born_host=born, store_timestamp=T0, store_host=born,
                              reconsume_times=0, prepared_transaction_offset=0, v2=False)
        if len(rec) + 8 > mf.remaining:
            mf.append(M.encode_blank(mf.remaining))
            mf.wrote_position = mf.file_size  # the blank fills the rest of the segment
            mf = q.get_last_mapped_file(0)
        phys.append(mf.file_from_offset + mf.wrote_position)
        M.patch_offsets(rec, 0, i, phys[-1])
        mf.append(rec)
    end = phys[-1] + 242
    gen = iter_record_batches(q, 0, end, batch_records=2)
    got = []
    try:
        while True:
            mf, b = next(gen)
            got += [mf.file_from_offset + int(s) for s in b.starts]
    except StopIteration as stop:
        assert stop.value == (end, "end")
    assert got == phys == [0, 242, 512, 754, 1024, 1266, 1536]
    gen = iter_record_batches(q, 0, 600)  # stops before a record that would end past `end`
    assert [mf.file_from_offset + int(s) for mf, b in gen for s in b.starts] == [0, 242]
    gen = iter_record_batches(q, 242, 754)
    assert [mf.file_from_offset + int(s) for mf, b in gen for s in b.starts] == [242, 512]
    q.close()


def test_the_live_dispatcher_resyncs_after_a_damaged_record(open_store, tmp_path, make_config):
    """A record that fails its checks while not yet dispatched: the dispatcher goes on at the next
    intact record (MAGIC + PHYSICALOFFSET), not at the end of the segment, so every later message
    is pullable and findable by key; the damaged one is skipped by pulls."""
    from rmqstore import Message

    cfg = make_config(mapped_file_size_commit_log=64 << 10, mapped_file_size_consume_queue=20 * 64,
                      max_hash_slot_num=64, max_index_num=256)
    st = open_store(tmp_path / "s", cfg)
    st.reput.shutdown()  # dispatch later, in this thread
    rs = [st.put_message(Message.create("T", b"body-%d" % i, keys=[f"k{i}"])) for i in range(10)]
    seg = st.commit_log.queue.files[0]
    victim = rs[3]
    seg.mm[victim.phy_offset + 4] ^= 0xFF  # its MAGICCODE: the walk cannot frame it
    st.reput.do_reput()
    assert st.get_max_offset_in_queue("T", 0) == 10  # units of every record after the damage
    got, skipped, off = [], [], 0
    while off < 10:
        g = st.get_message("g", "T", 0, off, 32)
        got += [m.queue_offset for m in g.messages]
        skipped += [k.queue_offset for k in g.skipped]
        assert g.next_begin_offset > off
        off = g.next_begin_offset
    assert got == [0, 1, 2, 4, 5, 6, 7, 8, 9] and skipped == [3]  # queue offsets kept: a blank unit at 3
    for i in range(4, 10):
        assert [m.phy_offset for m in st.query_message("T", f"k{i}").messages] == [rs[i].phy_offset]


def test_pad_gaps_keeps_the_queue_offsets_of_records_lost_in_a_corrupt_span(open_store, tmp_path, make_config):
    """Records 3 and 4 of a queue lie in a corrupt span: before the batch that starts at record 5
    is dispatched, their queue offsets get blank units pointing at the span (what recovery's
    re-dispatch and verify's rebuild both do); a second call adds nothing."""
    from rmqstore import Message
    from rmqstore.engine.dispatch import pad_gaps
    from rmqstore.engine.recovery import CorruptSpan

    st = open_store(tmp_path / "s", make_config(mapped_file_size_commit_log=64 << 10))
    st.reput.shutdown()
    rs = [st.put_message(Message.create("T", b"body-%d" % i)) for i in range(3)]
    st.reput.do_reput()
    rs += [st.put_message(Message.create("T", b"body-%d" % i)) for i in range(3, 8)]
    cq = st.find_consume_queue("T", 0)
    assert cq.max_offset == 3
    span = CorruptSpan("seg", rs[3].phy_offset, rs[5].phy_offset - rs[3].phy_offset, "record_invalid", "test")
    mf, batch = next(iter_record_batches(st.commit_log.queue, rs[5].phy_offset, st.commit_log.confirm_offset))
    for _ in range(2):
        pad_gaps(st, mf, batch, [span], {}, st.consume_queues.get)
        assert cq.max_offset == 5
        assert [cq.get_unit(q)[:2] for q in (3, 4)] == [(span.offset, span.length)] * 2
    assert cq.get_unit(2)[0] == rs[2].phy_offset
    pad_gaps(st, mf, batch, [span], {}, lambda key: None)  # a queue the caller does not hold: untouched
    assert cq.max_offset == 5


_NAMES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "k"])
_VALUES = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=8)


@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=8), st.booleans())
def test_dispatch_fields_are_what_parsing_the_encoded_properties_reads(pairs, as_dict):
    """The fields a put hands to dispatch (taken from the checked properties) are the ones dispatch
    would parse from the bytes they encode to: empty values dropped, the last of a name winning."""
    props = dict(pairs) if as_dict else pairs
    Message(topic="T", body=b"", properties=props)  # (checked as a put checks them)
    assert D.dispatch_fields(props) == D.dispatch_properties(encode_properties(props))


def test_dispatch_fields_leave_values_that_are_not_str_to_the_bytes():
    assert D.dispatch_fields({"KEYS": 5}) is None
    assert D.dispatch_fields({"WAIT": 5, "TAGS": "a", "DELAY": None}) == {"TAGS": "a"}
