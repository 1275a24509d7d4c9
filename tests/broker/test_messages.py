"""How the broker builds stored messages: Java HashMap property order, batches, delay and half
messages."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from rmqstore import Message
from rmqstore.broker import messages as M
from rmqstore.format.javalang import hashmap_order, parse_long

HERE = Path(__file__).resolve().parent


def test_hashmap_order_matches_java():
    """Orders printed by OpenJDK 17's ``new HashMap<>(128)`` for 40 key sets (some past the 96-key
    resize threshold), generated once with a small Java program (see the file's keys)."""
    cases = json.loads((HERE / "java_hashmap_orders.json").read_text())
    assert len(cases) == 40 and max(len(c["put"]) for c in cases) > 96
    for case in cases:
        assert hashmap_order(case["put"], 128) == case["order"]


def test_java_properties_reorders_like_the_broker():
    props = {"KEYS": "k", "TAGS": "TagA", "UNIQ_KEY": "AB", "CLUSTER": "DefaultCluster", "WAIT": "true"}
    got = [k for k, _ in M.java_properties(props)]
    assert sorted(got) == sorted(props) and got == hashmap_order(list(props), 128)


def test_parse_long_is_java_strict():
    assert parse_long("-9223372036854775808") == -(1 << 63)
    for bad in ("9223372036854775808", " 1", "1_0", "", "+"):
        with pytest.raises(ValueError):
            parse_long(bad)


def _batch(*msgs: tuple[int, bytes, bytes]) -> bytes:
    out = b""
    for flag, body, props in msgs:
        total = 22 + len(body) + len(props)
        out += (total.to_bytes(4, "big") + b"\0" * 8 + flag.to_bytes(4, "big", signed=True) + len(body).to_bytes(4, "big") + body
                + len(props).to_bytes(2, "big") + props)
    return out


def test_decode_batch_and_its_errors():
    raw = _batch((1, b"a", b"KEYS\x01k1\x02"), (0, b"", b""))
    assert M.decode_batch(raw) == [(1, b"a", "KEYS\x01k1\x02"), (0, b"", "")]
    with pytest.raises(ValueError, match="needs at least 22"):
        M.decode_batch(raw[:-1])
    long_body = bytearray(_batch((0, b"abc", b"")))
    long_body[16:20] = (50).to_bytes(4, "big")
    with pytest.raises(ValueError, match="body length 50 runs past the batch"):
        M.decode_batch(bytes(long_body))
    bad = bytearray(raw)
    bad[0:4] = (99).to_bytes(4, "big")
    with pytest.raises(ValueError, match="totalSize 99"):
        M.decode_batch(bytes(bad))
    stuck = bytearray(_batch((0, b"", b"")))  # totalSize 0 = 22 + bodyLen 0 + propertiesLen -22: no progress
    stuck[0:4], stuck[20:22] = bytes(4), (-22).to_bytes(2, "big", signed=True)
    with pytest.raises(ValueError, match="properties length -22"):
        M.decode_batch(bytes(stuck))


@settings(max_examples=300, deadline=None)
@given(hs.lists(hs.tuples(hs.integers(-5, 5), hs.binary(max_size=8), hs.binary(max_size=8)), max_size=4),
       hs.lists(hs.tuples(hs.integers(0, 40), hs.integers(0, 255)), max_size=3), hs.integers(0, 3))
def test_batch_columns_take_what_the_careful_walk_takes(messages, edits, cut):
    """The fast walk of a batch body answers as the field-by-field one (which says what is wrong)."""
    raw = bytearray(_batch(*messages))
    for at, value in edits:  # damage some bytes
        if at < len(raw):
            raw[at] = value
    raw = bytes(raw[:len(raw) - cut])
    try:
        want = M._checked_columns(raw)
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e))):
            M.batch_columns(raw)
    else:
        assert M.batch_columns(raw) == want


def test_delayed_message_goes_to_schedule_topic_capped_at_max_level():
    props = {"DELAY": "40", "TAGS": "t"}
    msg = M.schedule_if_delayed(Message(topic="T", queue_id=3), props, 18)
    assert (msg.topic, msg.queue_id) == ("SCHEDULE_TOPIC_XXXX", 17)
    assert dict(msg.properties) == {"DELAY": "18", "TAGS": "t", "REAL_TOPIC": "T", "REAL_QID": "3"}
    plain = Message(topic="T")
    assert M.schedule_if_delayed(plain, {"DELAY": "0"}, 18) is plain and plain.topic == "T"
    prepared = Message(topic="T", sys_flag=M.TRANSACTION_PREPARED_TYPE)
    assert M.schedule_if_delayed(prepared, {"DELAY": "2"}, 18).topic == "T"
    with pytest.raises(ValueError):
        M.delay_level({"DELAY": " 2"})  # Integer.parseInt refuses it: the send is refused


def test_half_message_layout():
    msg = M.half_message(Message(topic="T", queue_id=2, sys_flag=M.TRANSACTION_PREPARED_TYPE | 1),
                         {"UNIQ_KEY": "U1", "TRAN_MSG": "true", "PGROUP": "pg"})
    assert (msg.topic, msg.queue_id, msg.sys_flag) == ("RMQ_SYS_TRANS_HALF_TOPIC", 0, 1)
    assert dict(msg.properties)["__transactionId__"] == "U1" and dict(msg.properties)["REAL_QID"] == "2"
