"""spark/columns.py: byte ranges, binary and host columns, the batch properties parser (checked
against the scalar parser, upstream's rules) and the Arrow schema (checked against Spark's)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rmqstore.spark import columns as C


def test_ranges_index_and_offsets():
    starts, lens = np.array([10, 3, 7, 0]), np.array([2, 0, 3, -1])  # a negative length is empty
    assert C.ranges_index(starts, lens).tolist() == [10, 11, 7, 8, 9]
    assert C.offsets_of(lens).tolist() == [0, 2, 2, 5, 5]
    assert C.ranges_index(np.array([4]), np.array([0])).tolist() == []


def test_binary_array_takes_the_ranges():
    buf = b"0123456789abcdef"
    got = C.binary_array(buf, np.array([0, 10, 4, 15]), np.array([3, 6, 0, 1]))
    assert got.type == pa.binary() and got.to_pylist() == [b"012", b"abcdef", b"", b"f"]


def test_host_array_formats_ipv4_and_ipv6_hosts():
    v4 = bytes([10, 0, 0, 1]) + (10911).to_bytes(4, "big")
    v6 = bytes(15) + b"\x01" + (8080).to_bytes(4, "big")
    buf = b"xx" + v4 + v6 + v4
    u8 = np.frombuffer(buf, dtype=np.uint8)
    got = C.host_array(u8, np.array([2, 10, 30]), np.array([8, 20, 8]))
    assert got.to_pylist() == ["10.0.0.1:10911", "[::1]:8080", "10.0.0.1:10911"]


@pytest.mark.parametrize("raw", [
    b"", b"\x02", b"a\x01b", b"a\x01b\x02", b"k1\x01\x02k2\x01v2\x02", b"\x01v\x02k\x01\x02", b"k\x01v\x01w\x02",
    b"dup\x011\x02x\x012\x02dup\x013\x02", "中\x01文\x02😀\x01\xff".encode("utf-8", "surrogatepass") + b"\xfe\x02",
    b"KEYS\x01 a  b \x02TAGS\x01t\x02KEYS\x01c d\x02", b"aaa", b"k\x01v\x02\x02\x02",
])
def test_properties_parser_matches_upstream_rules(raw):
    from rmqstore.format import properties as P

    u8 = np.frombuffer(b"xx" + raw + b"yy", dtype=np.uint8)
    props = C.parse_properties_batch(u8, np.array([2, 0]), np.array([len(raw), 0]))
    got = props.map_array().to_pylist()
    want = P.parse_properties(raw)
    assert dict(got[0]) == want and got[1] == []
    assert props.value_of("TAGS").to_pylist()[0] == (want.get("TAGS") or None)
    assert props.keys_array().to_pylist()[0] == P.split_keys(want.get("KEYS"))


def test_arrow_schema_matches_spark_schema():
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema

    from rmqstore.spark.source import BROKER_NAME, source_schema

    # the decoded columns, then the broker's name (added per partition, not decoded)
    assert to_arrow_schema(source_schema(), timezone="UTC").equals(
        C.ARROW_SCHEMA.append(pa.field(BROKER_NAME, pa.string(), nullable=False)))
    assert isinstance(C.ARROW_SCHEMA, pa.Schema)
