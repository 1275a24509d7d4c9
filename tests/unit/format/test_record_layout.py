"""format/record_layout.py: the one annotated field list of a CommitLog record, the offsets derived
from it (checked against FORMAT.md §2.1), and the stamps the append path writes."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from rmqstore.format import encode as E
from rmqstore.format import encode_batch as EB
from rmqstore.format import message as M
from rmqstore.format import record_layout as L
from tests.kit import HOST_V4 as V4_HOST
from tests.kit import HOSTS
from tests.kit import record_fields as fields


def spec_offsets(b: int, s: int) -> dict[str, int]:
    """FORMAT.md §2.1's offset column, with B and S the born and store host lengths."""
    return {"total": 0, "magic": 4, "body_crc": 8, "queue_id": 12, "flag": 16, "queue_offset": 20,
            "phy_offset": 28, "sys_flag": 36, "born_timestamp": 40, "born_addr": 48, "store_timestamp": 48 + b,
            "store_addr": 56 + b, "reconsume_times": 56 + b + s, "prepared_transaction_offset": 60 + b + s,
            "body_len": 68 + b + s}


@pytest.mark.parametrize("born_v6,store_v6", list(HOSTS))
def test_offsets_are_the_specs(born_v6, store_v6):
    b, s = 20 if born_v6 else 8, 20 if store_v6 else 8
    sys_flag = (L.SYSFLAG_BORNHOST_V6 if born_v6 else 0) | (L.SYSFLAG_STOREHOST_V6 if store_v6 else 0)
    lay = L.layout_of(sys_flag)
    assert lay is L.layout_for_hosts(b, s)
    assert {k: v for k, v in lay.offset.items() if k in spec_offsets(b, s)} == spec_offsets(b, s)
    assert lay.offset["born_port"] == 48 + b - 4 and lay.offset["store_port"] == 56 + b + s - 4
    assert lay.size == lay.struct.size == lay.dtype.itemsize == 72 + b + s  # BODY starts here
    assert L.store_timestamp_pos(sys_flag) == 48 + b
    assert L.record_length(0, 0, 0, sys_flag, False) == 72 + b + s + 1 + 2


def test_ipv4_positions_and_the_names_derived_from_the_layout():
    # "For IPv4/IPv4 records: STORETIMESTAMP at 56, STOREHOST at 64, RECONSUMETIMES 72, PREPARED 76,
    # BODYLENGTH 84, BODY 88"
    o = L.V4.offset
    assert (o["store_timestamp"], o["store_addr"], o["reconsume_times"], o["prepared_transaction_offset"],
            o["body_len"], L.V4.size) == (56, 64, 72, 76, 84, 88)
    assert (L.QUEUE_OFFSET_POS, L.PHY_OFFSET_POS, L.SYSFLAG_POS, L.BORN_TIMESTAMP_POS, L.BORN_HOST_POS) == \
        (20, 28, 36, 40, 48)
    assert L.HEAD_SIZE == 48 and L.MIN_RECORD_SIZE == 91 and L.PUBLISH_SIZE == 8
    assert L.FIXED_V4.format in (">iiiiiqqiq4siq4siiqi", b">iiiiiqqiq4siq4siiqi")
    assert [n for n, _ in L.FIELDS] == list(L.V4.dtype.names)
    assert list(L.HEAD_DTYPE.names) == [n for n, _ in L.FIELDS][:9]
    # the ``48+B``-style bases FORMAT.md uses, for every host width
    for b, s in ((8, 8), (20, 8), (8, 20), (20, 20)):
        spec = spec_offsets(b, s)
        assert L.STORE_TIMESTAMP_BASE + b == spec["store_timestamp"]
        assert L.STORE_HOST_BASE + b == spec["store_addr"]
        assert L.RECONSUME_BASE + b + s == spec["reconsume_times"]
        assert L.PREPARED_BASE + b + s == spec["prepared_transaction_offset"]
        assert L.BODY_LEN_BASE + b + s == spec["body_len"] and L.BODY_BASE + b + s == 72 + b + s
    # message.py re-exports the same objects
    assert M.FIXED_V4 is L.FIXED_V4 and M.SYSFLAG_POS == L.SYSFLAG_POS and M.encode_record is E.encode_record


def test_struct_and_dtype_agree_field_by_field():
    for lay in L.LAYOUTS:
        values = [(i + 1) * 1000 + i for i in range(len(L.FIELDS))]
        values[list(lay.formats).index("born_addr")] = bytes(range(1, lay.born_addr + 1))
        values[list(lay.formats).index("store_addr")] = bytes(range(101, lay.store_addr + 101))
        row = np.frombuffer(lay.struct.pack(*values), dtype=lay.dtype)[0]
        for name, v in zip(lay.formats, values):
            assert row[name] == v, name
            fmt = ">" + lay.formats[name]
            assert struct.unpack_from(fmt, lay.struct.pack(*values), lay.offset[name])[0] == v


def test_hosts_of_another_length_have_no_layout():
    with pytest.raises(ValueError):
        L.layout_for_hosts(10, 8)
    with pytest.raises(ValueError):
        E.encode_record(fields(born_host=V4_HOST + b"\0\0"))


def test_host_sys_flag_sets_exactly_the_host_bits():
    assert L.host_sys_flag(0x3F, 8, 8) == 0x0F
    assert L.host_sys_flag(0x1, 20, 8) == 0x11 and L.host_sys_flag(0x1, 8, 20) == 0x21
    assert L.host_sys_flag(0x10, 20, 20) == 0x30


def changed_bytes(a: bytes, b: bytes) -> set[int]:
    assert len(a) == len(b)
    return {i for i in range(len(a)) if a[i] != b[i]}


def field_bytes(lay: L.FieldLayout, *names: str) -> set[int]:
    out = set()
    for n in names:
        o = lay.offset[n]
        out |= set(range(o, o + struct.calcsize(">" + lay.formats[n])))
    return out


@pytest.mark.parametrize("born_v6,store_v6", list(HOSTS))
@pytest.mark.parametrize("born_unset", [False, True])
def test_stamp_record_writes_exactly_the_stamped_fields(born_v6, store_v6, born_unset):
    f = fields(born_v6, store_v6, born_timestamp=0 if born_unset else 1_700_000_000_001)
    lay = L.layout_for_hosts(len(f.born_host), len(f.store_host))
    pad = b"\xEE" * 13  # the record somewhere inside a larger buffer
    before = pad + bytes(E.encode_record(f)) + pad
    buf = bytearray(before)
    L.stamp_record(buf, len(pad), -2, 0x0102030405060708, 0x1112131415161718, born_unset)
    stamped = {i - len(pad) for i in changed_bytes(before, buf)}
    allowed = field_bytes(lay, "queue_offset", "phy_offset", "store_timestamp",
                          *(("born_timestamp",) if born_unset else ()))
    assert stamped and stamped <= allowed
    want = E.encode_record(fields(born_v6, store_v6, born_timestamp=0x1112131415161718 if born_unset else
                                  1_700_000_000_001, queue_offset=-2, phy_offset=0x0102030405060708,
                                  store_timestamp=0x1112131415161718))
    assert bytes(buf[len(pad):-len(pad)]) == bytes(want)
    rec = M.decode_message(buf, len(pad), len(buf) - len(pad))
    assert (rec.queue_offset, rec.phy_offset, rec.store_timestamp) == (-2, 0x0102030405060708, 0x1112131415161718)


def test_stamp_batch_writes_exactly_the_stamped_columns():
    bodies, props = [b"a", b"bb", b"ccc"], [b"", b"K\x01v\x02", b"TAGS\x01x\x02"]
    batch = EB.encode_batch(EB.BatchFields(b"\x01T", bodies, props, queue_id=2, flags=1, sys_flags=0,
                                           born_timestamps=np.array([5, 0, 6]), born_host=V4_HOST,
                                           store_host=V4_HOST, reconsume_times=0, prepared_offsets=0))
    before = batch.hdr.copy()
    L.stamp_batch(batch.hdr, batch.starts, 40, 1000, 77, np.array([False, True, False]))
    for name in before.dtype.names:
        same = before[name] == batch.hdr[name]
        if name in L.STAMPED:
            assert not same.all() or name == "born_timestamp", name
        else:
            assert same.all(), name
    assert batch.hdr["queue_offset"].tolist() == [40, 41, 42]
    assert batch.hdr["phy_offset"].tolist() == (batch.starts + 1000).tolist()
    assert batch.hdr["store_timestamp"].tolist() == [77] * 3 and batch.hdr["born_timestamp"].tolist() == [5, 77, 6]


def test_the_codec_takes_no_delay_levels():
    rec = E.encode_record(fields(topic=b"SCHEDULE_TOPIC_XXXX", props=b"DELAY\x013\x02TAGS\x01A\x02",
                                 store_timestamp=1000))
    with pytest.raises(TypeError):
        M.decode_message(rec, 0, len(rec), delay_levels_ms=(1000, 5000, 10000))
    with pytest.raises(TypeError):
        M.decode_v1_ipv4(rec, 0, len(rec), False, False, (1000, 5000, 10000), 0, None)
    assert M.decode_message(rec, 0, len(rec)).tags_code == M.decode_v1_ipv4(rec, 0, len(rec), False, False).tags_code
    assert M.decode_message(rec, 0, len(rec)).tags_code == 65  # the Java hash of "A", not a delivery time
