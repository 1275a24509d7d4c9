"""format/encode_batch.py: a batch of records of one topic, queue and IPv4 hosts encoded at once
(numpy headers), rendered with its stamps: the records encode_record writes, back to back."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from rmqstore.format import encode as E
from rmqstore.format import encode_batch
from rmqstore.format import message as M
from rmqstore.format.msgid import parse_host
from tests.kit import HOST_V4, record_fields

STORE = parse_host("10.0.0.1:10911")


def _batch(topic: bytes, bodies, props, v2=False, **columns) -> encode_batch.BatchV4:
    shared = dict(queue_id=2, flags=0, sys_flags=0, born_timestamps=None, born_host=HOST_V4, store_host=STORE,
                  reconsume_times=0, prepared_offsets=0)
    shared.update(columns)
    return encode_batch.encode_batch(encode_batch.BatchFields(E.topic_field(topic, v2), bodies, props, **shared))


def test_render_gives_the_records_encode_record_writes():
    bodies = [b"a", b"", b"c" * 300]
    props = [b"TAGS\x01x\x02", b"", b"KEYS\x01k1 k2\x02"]
    batch = _batch(b"BatchTopic", bodies, props, flags=[1, 2, 3], born_timestamps=np.array([10, 0, 30]),
                   reconsume_times=4, prepared_offsets=[0, 0, 9])
    # TOTALSIZE = 91 + body + topic + properties (FORMAT.md §2.1, V1 with IPv4 hosts)
    totals = [91 + len(b) + 10 + len(p) for b, p in zip(bodies, props)]
    assert batch.totals.tolist() == totals and batch.size == sum(totals)
    assert batch.starts.tolist() == [0, totals[0], totals[0] + totals[1]]
    out = batch.render(7, 5000, 1_700_000_000_999, np.array([False, True, False]))
    want = b""
    for i, (b, p) in enumerate(zip(bodies, props)):
        born = [10, 1_700_000_000_999, 30][i]
        want += bytes(E.encode_record(record_fields(
            topic=b"BatchTopic", body=b, props=p, queue_id=2, flag=i + 1, sys_flag=0, born_timestamp=born,
            born_host=HOST_V4, store_host=STORE, store_timestamp=1_700_000_000_999, reconsume_times=4,
            prepared_transaction_offset=[0, 0, 9][i], queue_offset=7 + i, phy_offset=5000 + sum(totals[:i]))))
    assert out == want


@pytest.mark.parametrize("topic, v2, magic", [(b"T" * 127, False, M.MAGIC_V1), (b"T" * 128, True, M.MAGIC_V2),
                                              (b"T" * 5, True, M.MAGIC_V2)])
def test_the_magic_follows_the_topic_length_field(topic, v2, magic):
    batch = _batch(topic, [b"x", b"y"], [b"", b""], v2=v2)
    assert batch.hdr["magic"].tolist() == [magic, magic]
    assert batch.totals.tolist() == [91 + 1 + len(topic) + v2] * 2
    assert batch.tails == [E.topic_field(topic, v2) + b"\x00\x00"] * 2


def test_a_column_given_as_an_int_or_none_is_that_value_in_every_record():
    batch = _batch(b"T", [b"1", b"2", b"3"], [b""] * 3, flags=5, sys_flags=None, reconsume_times=[0, 1, 2],
                   prepared_offsets=np.array([0, 0, 0]))
    assert batch.hdr["flag"].tolist() == [5, 5, 5]
    assert batch.hdr["sys_flag"].tolist() == [0, 0, 0]
    assert batch.hdr["reconsume_times"].tolist() == [0, 1, 2]
    assert batch.hdr["body_crc"].tolist() == [zlib.crc32(b) & 0x7FFFFFFF for b in (b"1", b"2", b"3")]
    assert (batch.hdr["queue_id"] == 2).all() and (batch.hdr["born_addr"] == HOST_V4[:4]).all()


def test_an_empty_batch_renders_nothing():
    batch = _batch(b"T", [], [])
    assert batch.size == 0 and batch.props_max == 0
    assert batch.render(0, 0, 1) == b""


def test_batch_tails_stay_bounded_and_exact(monkeypatch):
    """The per-topic pieces (topic field + properties length) are kept for TAILS_KEPT lengths only;
    past that they are built each time, with the same bytes."""
    monkeypatch.setattr(encode_batch, "TAILS_KEPT", 3)  # (the batch encoder's module)
    M._tails.cache_clear()
    host = parse_host("1.2.3.4:5")
    props = [b"K\x01" + b"v" * n + b"\x02" for n in range(8)]
    batch = M.encode_batch_v4(b"\x02Tq", [b"b"] * 8, props, queue_id=1, flags=0, sys_flags=0, born_timestamps=None,
                              born_host=host, store_host=host, reconsume_times=0, prepared_offsets=0)
    assert batch.tails == [b"\x02Tq" + len(p).to_bytes(2, "big") for p in props]
    assert len(M._tails(b"\x02Tq")) == 3
    buf = batch.render(0, 0, 1_700_000_000_000, True)
    starts = M.walk_records(buf, 0, len(buf))[0]
    b = M.decode_batch(np.frombuffer(buf, np.uint8), starts)
    assert b.valid.all() and b.props_len.tolist() == [len(p) for p in props]
    M._tails.cache_clear()


def test_batch_with_too_long_properties_is_never_rendered():
    host = parse_host("1.2.3.4:5")
    props = [b"K\x01v\x02", b"K\x01" + b"v" * 32766 + b"\x02"]  # 32769 bytes: no 2-byte length holds it
    batch = M.encode_batch_v4(b"\x01T", [b"a", b"b"], props, queue_id=0, flags=0, sys_flags=0, born_timestamps=None,
                              born_host=host, store_host=host, reconsume_times=0, prepared_offsets=0)
    assert batch.props_max == len(props[1])
    with pytest.raises(ValueError, match="32769 bytes"):
        batch.render(0, 0, 1, True)


@pytest.mark.parametrize("n", [1, 3, encode_batch.ROWS_KEPT, encode_batch.ROWS_KEPT + 1])
def test_headers_from_the_kept_rows_and_built_anew_are_the_same(n):
    """Batches up to ``ROWS_KEPT`` records start from cached header bytes, longer ones from the row
    repeated; both render what encode_record writes, and a render does not change the cache."""
    bodies, props = [b"b%d" % i for i in range(n)], [b"K\x01v\x02"] * n
    for _ in range(2):  # (the second batch starts from the same cached bytes)
        out = _batch(b"T", bodies, props, flags=3).render(4, 100, 1_700_000_000_000)
        want, pos = b"", 0
        for i, b in enumerate(bodies):
            rec = bytes(E.encode_record(record_fields(
                topic=b"T", body=b, props=props[i], queue_id=2, flag=3, sys_flag=0, born_timestamp=0,
                born_host=HOST_V4, store_host=STORE, store_timestamp=1_700_000_000_000, reconsume_times=0,
                prepared_transaction_offset=0, queue_offset=4 + i, phy_offset=100 + pos)))
            want += rec
            pos += len(rec)
        assert out == want


def test_size_and_largest_record():
    batch = _batch(b"T", [b"a", b"b" * 40, b""], [b"", b"K\x01v\x02", b""])
    assert batch.size == sum(batch.totals.tolist()) and batch.size == len(batch.render(0, 0, 0))
    assert batch.largest == 91 + 1 + 40 + 4 == max(batch.totals.tolist())
    empty = _batch(b"T", [], [])
    assert (empty.size, empty.largest) == (0, 0)
