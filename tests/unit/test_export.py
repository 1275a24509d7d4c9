"""The export writers build JSON Lines and CSV from whole Arrow columns; rows that need JSON
escapes, hold a non-UTF-8 body or repeat a property name go through the per-row path. Each is
checked here against its reference: orjson per message for JSON Lines, pyarrow's CSV writer for CSV,
on batches that mix plain rows and every kind of awkward one."""
from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

from rmqstore import export as E
from rmqstore.spark import columns as C

AWKWARD_BODIES = [b"plain", b'a "quoted" body', b"back\\slash", b"two\nlines\ttab", b"\xff\xfe not utf-8", b"",
                  "caf\u00e9 \u2603".encode(), b"\x00nul", b"comma, and \"both\"\r\n"]
AWKWARD_PROPS = [[("TAGS", "t"), ("KEYS", "k1 k2")], [("K", 'va"lue')], [("K", "ctl\x03x")], [],
                 [("A", "1"), ("A", "2"), ("B", "3")], [("u", "\u00fc\u4e2d")], [("back", "sl\\ash")],
                 [("A", "x"), ("B", "y")], [("K", "line\nbreak")]]


def _batch(n_plain: int = 5) -> pa.RecordBatch:
    bodies = [b"body-%d" % i for i in range(n_plain)] + AWKWARD_BODIES
    props = [[("TAGS", "t%d" % i), ("UNIQ_KEY", "U%d" % i)] for i in range(n_plain)] + AWKWARD_PROPS
    n = len(bodies)
    topics = ["T"] * (n - 1) + ['we"ird']
    cols = {
        "topic": pa.array(topics), "queueId": pa.array(range(n), pa.int32()),
        "queueOffset": pa.array(range(n), pa.int64()), "commitLogOffset": pa.array([i * 100 for i in range(n)], pa.int64()),
        "storeSize": pa.array([100] * n, pa.int32()), "body": pa.array(bodies, pa.binary()),
        "tags": pa.array(["t"] * (n - 1) + [None]), "keys": pa.array([["k", 'q"k']] * n, pa.list_(pa.string())),
        "uniqKey": pa.array(["U"] * n), "msgId": pa.array(["ABC"] * n),
        "properties": pa.array(props, pa.map_(pa.string(), pa.string())),
        "bornTimestamp": pa.array([1_700_000_000_000_000 + i for i in range(n)], C.TS_TYPE),
        "storeTimestamp": pa.array([-5_000 + i for i in range(n)], C.TS_TYPE),
        "bornHost": pa.array(["127.0.0.1:1"] * n), "storeHost": pa.array(["[::1]:10911"] * n),
        "flag": pa.array([0] * n, pa.int32()), "sysFlag": pa.array([0] * n, pa.int32()),
        "reconsumeTimes": pa.array([0] * n, pa.int32()), "preparedTransactionOffset": pa.array([0] * n, pa.int64()),
        "bodyCRC": pa.array([-1] * n, pa.int32()),
    }
    return pa.RecordBatch.from_arrays([cols[f.name] for f in C.ARROW_SCHEMA], schema=C.ARROW_SCHEMA)


def _select(rb, names):
    return pa.RecordBatch.from_arrays([rb.column(n) for n in names], names=names)


@pytest.mark.parametrize("include_body", [True, False])
@pytest.mark.parametrize("plain", [0, 5, 300])
def test_jsonl_lines_are_the_per_message_lines(include_body, plain):
    rb = _select(_batch(plain), E._columns("jsonl", include_body))
    w = E._JsonlWriter("-", include_body)
    w.fh = io.BytesIO()
    w.write(rb)
    got = w.fh.getvalue()
    want = b"".join(w._line(rb, i) for i in range(rb.num_rows))
    assert got == want
    lines = [json.loads(x) for x in got.splitlines()]
    assert len(lines) == rb.num_rows
    assert lines[plain + 4]["properties"] == {"A": "2", "B": "3"}  # a repeated name: the last value
    if include_body:
        enc = {(x["body_encoding"], x["body"]) for x in lines}
        assert ("base64", "//4gbm90IHV0Zi04") in enc and ("utf-8", 'a "quoted" body') in enc


def test_plain_rows_take_the_column_path():
    """Rows with nothing to escape never reach the per-row path (that is what makes it fast)."""
    rb = _select(_batch(50), E._columns("jsonl", True)).slice(0, 50)
    w = E._JsonlWriter("-", True)
    w.fh = io.BytesIO()
    w._line = None  # would fail if called
    w.write(rb)
    assert w.fh.getvalue().count(b"\n") == 50


@pytest.mark.parametrize("plain", [0, 7])
def test_csv_is_what_pyarrows_csv_writer_writes(plain, tmp_path):
    rb = _select(_batch(plain), E._columns("csv", True))
    out = tmp_path / "ours.csv"
    w = E._CsvWriter(str(out), rb.schema)
    w.write(rb)
    w.write(rb.slice(3, 4))  # a sliced batch too
    w.close()
    # the reference: the same text columns through pyarrow's own writer
    ref_cols, fields = [], []
    for f in rb.schema:
        col = rb.column(f.name)
        if f.name == "keys":
            col = pa.array([" ".join(k) for k in col.to_pylist()], pa.string())
        elif f.name == "properties":
            col = pa.array([E._dump_line(dict(p))[:-1].decode("utf-8") for p in col.to_pylist()], pa.string())
        elif f.name == "body":
            col = pa.array(E._body_texts(col), pa.string())
        ref_cols.append(col)
        fields.append(pa.field(f.name, col.type, nullable=True))
    schema = pa.schema(fields)
    ref = pa.BufferOutputStream()
    with pcsv.CSVWriter(ref, schema) as cw:
        full = pa.RecordBatch.from_arrays(ref_cols, schema=schema)
        cw.write_batch(full)
        cw.write_batch(full.slice(3, 4))
    assert out.read_bytes() == ref.getvalue().to_pybytes()


def test_time_text_matches_the_zoned_cast_everywhere():
    us = [0, -1, 999, 1_764_120_061_579_000, -62_135_596_800_000_000, 253_402_300_799_999_999, 2**62, -(2**62)]
    col = pa.array(us, C.TS_TYPE)
    assert E._time_text(col).to_pylist() == [s.encode() for s in col.cast(pa.string()).to_pylist()]
