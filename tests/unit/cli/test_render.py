"""cli/render.py: how values are shown (times, bodies, sizes, hex dumps) and the JSON form of
records and results."""
from __future__ import annotations

import dataclasses
import enum
import math
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from rmqstore.cli import render as R
from rmqstore.format.record import MessageRecord


def test_fmt_ts_is_local_time_with_the_epoch_ms():
    assert R.fmt_ts(None) == "-" and R.fmt_ts(-1) == "-"
    got = R.fmt_ts(1_700_000_000_037)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.037 \(1700000000037\)", got)
    assert got.startswith(R.local_time(1_700_000_000_037))
    assert R.fmt_ts(10**20) == f"({10**20})"  # beyond what a datetime holds


def test_decode_body_is_text_or_hex():
    assert R.decode_body(b"hi \xc3\xa9") == ("utf-8", "hi é")
    assert R.decode_body(b"\xff\x00A") == ("hex", "ff0041")
    assert R.decode_body(b"") == ("utf-8", "")


def test_body_preview_escapes_and_cuts():
    assert R.body_preview(b"plain") == "plain"
    assert R.body_preview(b"a\nb") == "a\\nb"
    assert R.body_preview(b"\xff\xfe") == "hex:fffe"
    cut = R.body_preview(b"x" * 100, width=10)
    assert cut == "x" * 9 + "…" and len(cut) == 10
    assert R.body_preview(b"x" * 10, width=10) == "x" * 10


def test_hexdump_lines():
    assert R.hexdump(b"ABC") == "00000000  41 42 43" + " " * 39 + "  |ABC|"
    two = R.hexdump(bytes(range(18))).split("\n")
    assert len(two) == 2 and two[1].startswith("00000010  10 11 ") and two[1].endswith("|..|")
    assert two[0].endswith("|" + "." * 16 + "|")
    assert R.hexdump(b"") == ""


@pytest.mark.parametrize("n, want", [
    (None, "-"), (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (3 << 30, "3.0 GiB"),
    (5 << 40, "5.0 TiB"), (5 << 50, "5120.0 TiB"),
])
def test_fmt_bytes(n, want):
    assert R.fmt_bytes(n) == want


class _Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class _Result:
    name: str
    sizes: tuple


def test_to_jsonable():
    assert R.to_jsonable({"a": (1, 2.5, math.nan), 3: {"x"}, "e": _Colour.RED}) == {
        "a": [1, 2.5, None], "3": ["x"], "e": "red"}
    assert R.to_jsonable(b"\x01\xff") == "01ff" and R.to_jsonable(memoryview(b"\x02")) == "02"
    assert R.to_jsonable(np.int64(7)) == 7 and type(R.to_jsonable(np.int64(7))) is int
    assert R.to_jsonable(Path("/tmp/x")) == "/tmp/x"
    assert R.to_jsonable(_Result("r", (1, b"\x00"))) == {"name": "r", "sizes": [1, "00"]}
    arr = R.to_jsonable(np.array([[1, 2], [3, 4]], dtype=np.int64))  # arrays of any size (not .item())
    assert arr == [[1, 2], [3, 4]] and type(arr[0][0]) is int
    assert R.to_jsonable(np.array(5.5)) == 5.5


def _record(**kw) -> MessageRecord:
    f = dict(phy_offset=4096, store_size=120, topic="T", queue_id=1, queue_offset=7, flag=0, sys_flag=0,
             body_crc=0, born_timestamp=1000, born_host="10.0.0.1:5000", store_timestamp=2000,
             store_host="10.0.0.2:10911", reconsume_times=0, prepared_transaction_offset=0, body=b"hello",
             properties={"TAGS": "TagA", "KEYS": "k1 k2"}, msg_id="0A00000200002A9F0000000000001000")
    f.update(kw)
    return MessageRecord(**f)


def test_record_dict_has_every_field_and_the_body_as_text_or_hex():
    d = R.record_dict(_record())
    assert (d["topic"], d["queue_offset"], d["phy_offset"], d["tags"], d["keys"], d["body_size"]) == (
        "T", 7, 4096, "TagA", ["k1", "k2"], 5)
    assert (d["body_encoding"], d["body"], d["compression"]) == ("utf-8", "hello", None)
    assert "body" not in R.record_dict(_record(), include_body=False)
    assert R.record_dict(_record(body=b"\xff"))["body"] == "ff"


def test_record_dict_shows_a_compressed_body_decoded_unless_asked_for_the_stored_bytes():
    stored = zlib.compress(b"the producer's bytes")
    rec = _record(sys_flag=0x1, body=stored)
    d = R.record_dict(rec)
    assert (d["body"], d["compression"], d["body_size"]) == ("the producer's bytes", "zlib", len(stored))
    assert R.record_dict(rec, stored_body=True)["body"] == stored.hex()
    damaged = R.record_dict(_record(sys_flag=0x1, body=b"not zlib"))
    assert damaged["body"] == "not zlib" and damaged["body_note"].startswith("stored bytes shown")
