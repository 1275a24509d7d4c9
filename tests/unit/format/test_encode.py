"""format/encode.py: one CommitLog record encoded (FORMAT.md §2.1), checked against the records
RocketMQ wrote (the reference vectors); the put path's V4Shape; the blank and the properties CRC."""
from __future__ import annotations

import base64
import hashlib
import struct

import pytest

from rmqstore.format import encode as E
from rmqstore.format import properties as P
from rmqstore.format import record_layout as L
from tests.kit import HOST_V4 as V4_HOST
from tests.kit import HOST_V6 as V6_HOST
from tests.kit import body_of, load_vector, stored_record
from tests.kit import record_fields as fields


def _bodies(vs) -> dict[str, bytes]:
    """SHA-256 -> body of every message put (expected.json gives a large body by its hash only)."""
    return {hashlib.sha256(b).hexdigest(): b for b in map(body_of, vs.input["messages"])}


def _java_fields(m: dict, props: bytes, bodies: dict[str, bytes]) -> E.RecordFields:
    """The fields of a record RocketMQ wrote, from expected.json and input.json (not from the
    record's bytes)."""
    body = base64.b64decode(m["bodyBase64"]) if "bodyBase64" in m else bodies[m["bodySha256"]]
    return E.RecordFields(
        topic=m["topic"].encode(), body=body, props=props, queue_id=m["queueId"], flag=m["flag"],
        sys_flag=m["sysFlag"], born_timestamp=m["bornTimestamp"], born_host=bytes.fromhex(m["bornHostBytes"]),
        store_timestamp=m["storeTimestamp"], store_host=bytes.fromhex(m["storeHostBytes"]),
        reconsume_times=m["reconsumeTimes"], prepared_transaction_offset=m["preparedTransactionOffset"],
        v2=m["magic"] == "0xDAA320AB", queue_offset=m["queueOffset"], phy_offset=m["phyOffset"])


@pytest.mark.parametrize("name", ["basic", "rollover"])
def test_encode_record_writes_the_bytes_rocketmq_wrote(name):
    vs = load_vector(name)
    bodies = _bodies(vs)
    for m in vs.messages():
        rec = E.encode_record(_java_fields(m, m["propertiesRaw"].encode(), bodies))
        assert bytes(rec) == stored_record(vs, m), m["phyOffset"]


def test_fill_prop_crc_writes_the_digits_rocketmq_wrote():
    """The reserved 20 bytes (``__CRC32#``, 0x01, ten zeros, 0x02) filled with the CRC of the
    record before them, digits least-significant first (FORMAT.md §2.6)."""
    vs = load_vector("propcrc")
    for m in vs.messages():
        raw = m["propertiesRaw"].encode()
        assert raw.startswith(P.with_crc_reserved(raw)[:-12])  # the CRC entry is the last 20 bytes
        reserved = raw[:-10 - 1] + b"0" * 10 + b"\x02"
        rec = E.encode_record(_java_fields(m, reserved, _bodies(vs)))
        want = stored_record(vs, m)
        assert bytes(rec) != want
        crc = E.fill_prop_crc(rec, 0, len(rec))
        assert bytes(rec) == want
        assert crc == int(m["properties"]["__CRC32#"][::-1])


def test_topic_field_is_one_signed_byte_in_v1_and_two_in_v2():
    assert E.topic_field(b"abc", False) == b"\x03abc"
    assert E.topic_field(b"abc", True) == b"\x00\x03abc"
    assert E.topic_field(b"t" * 200, True) == b"\x00\xc8" + b"t" * 200


def test_encode_blank_is_the_eight_byte_end_of_segment_header():
    assert E.encode_blank(189) == (189).to_bytes(4, "big") + bytes.fromhex("CBD43194")
    assert E.encode_blank(8) == b"\x00\x00\x00\x08\xcb\xd4\x31\x94"


def test_patch_offsets_writes_queueoffset_at_20_and_physicaloffset_at_28():
    vs = load_vector("basic")
    m = vs.messages()[5]
    want = stored_record(vs, m)
    buf = bytearray(b"\xee" * 7 + want + b"\xee" * 3)
    buf[7 + 20:7 + 36] = bytes(16)
    E.patch_offsets(buf, 7, m["queueOffset"], m["phyOffset"])
    assert bytes(buf[7:-3]) == want and buf[:7] == b"\xee" * 7 and buf[-3:] == b"\xee" * 3
    assert struct.unpack_from(">qq", buf, 7 + 20) == (m["queueOffset"], m["phyOffset"])


def test_encode_record_puts_ipv6_hosts_where_the_spec_says():
    """B = S = 20: STORETIMESTAMP at 68, STOREHOST at 76, BODYLENGTH at 116, the body at 120."""
    f = fields(True, True, body=b"BODY", store_timestamp=0x0102030405060708)
    rec = E.encode_record(f)
    assert len(rec) == 115 + 4 + len(b"TopicTest") + len(b"TAGS\x01TagA\x02")
    assert struct.unpack_from(">i", rec, 36)[0] == 0x30
    assert rec[48:68] == V6_HOST and struct.unpack_from(">q", rec, 68)[0] == 0x0102030405060708
    assert rec[76:96] == V6_HOST and struct.unpack_from(">iqi", rec, 96) == (2, 5, 4)
    assert rec[112:116] == b"BODY" and rec[116] == len(b"TopicTest")


class Msg:
    queue_id, flag, sys_flag, reconsume_times, prepared_transaction_offset = 3, 7, 0, 2, 5
    born_timestamp = None


class Recorder(bytearray):
    """A buffer that notes the slices written into it, in order."""

    def __init__(self, n: int):
        super().__init__(n)
        self.writes = []

    def __setitem__(self, key, value):
        self.writes.append((key.start, key.stop))
        super().__setitem__(key, value)


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("born", [None, 1_700_000_000_001])
def test_v4_shape_writes_what_encode_record_and_stamp_record_do(v2, born):
    msg = type("M", (Msg,), {"born_timestamp": born})
    shape = E.V4Shape(b"TopicTest", v2, V4_HOST, V4_HOST)
    prepared = shape.prepare(msg, b"hello", b"TAGS\x01TagA\x02")
    total = prepared[0]
    assert total == shape.overhead + len(b"hello") + len(b"TAGS\x01TagA\x02")
    dst = Recorder(total + 4)
    shape.write_stamped(dst, 2, msg, prepared, (11, 4096, 1_700_000_000_123))
    want = E.encode_record(fields(v2=v2, born_timestamp=born or 0))
    L.stamp_record(want, 0, 11, 4096, 1_700_000_000_123, born is None)
    assert bytes(dst[2:-2]) == bytes(want) and dst[:2] == dst[-2:] == b"\0\0"
    # TOTALSIZE and MAGICCODE last: a reader finds no record until the rest is there
    assert dst.writes[-1] == (2, 2 + L.PUBLISH_SIZE) and all(a >= 2 + L.PUBLISH_SIZE for a, _ in dst.writes[:-1])
    with pytest.raises(ValueError):
        E.V4Shape(b"T", False, V6_HOST, V4_HOST)


def test_encode_record_takes_fields_or_the_same_names():
    f = fields(True, False)
    by_name = {k: getattr(f, k) for k in E.RecordFields.__dataclass_fields__}
    assert E.encode_record(f) == E.encode_record(**by_name)
