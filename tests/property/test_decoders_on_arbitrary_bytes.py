"""Every decoder on arbitrary bytes: it answers or raises rmqstore's typed error (or, for the pure
parsers, a ValueError), never anything else, and never loops (hypothesis; deadline on each)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqstore.engine.consumer_offsets import decode_offset_table
from rmqstore.errors import RmqStoreError
from rmqstore.format import consume_queue as CQ
from rmqstore.format import message as M
from rmqstore.format import properties as P
from rmqstore.format.checkpoint import CheckpointValues
from rmqstore.format.compression import CompressionError, decompress
from rmqstore.format.msgid import decode_offset_msg_id, parse_host, uniq_key_timestamp

RECORD_HEAD = M.I32.pack(200) + M.I32.pack(M.MAGIC_V1)  # a plausible start, to get past the first check
SETTINGS = settings(max_examples=300, deadline=2000)


def _bytes():
    return st.one_of(st.binary(max_size=600), st.binary(max_size=400).map(lambda b: RECORD_HEAD + b))


@SETTINGS
@given(_bytes(), st.booleans(), st.booleans())
def test_decode_message(data, crc, torn):
    try:
        rec = M.decode_message(data, 0, len(data), check_crc=crc, check_torn=torn)
    except RmqStoreError:
        return
    assert rec.store_size <= len(data)


@SETTINGS
@given(_bytes())
def test_walk_and_decode_batch(data):
    starts, stop, pos = M.walk_records(data, 0, len(data))
    assert stop in ("end", "blank", "limit", "invalid") and 0 <= pos <= len(data)
    batch = M.decode_batch(np.frombuffer(data, dtype=np.uint8), starts)
    assert 0 <= batch.first_invalid() <= len(batch)


@SETTINGS
@given(_bytes())
def test_read_layout(data):
    try:
        lay = M.read_layout(data, 0, len(data))
    except ValueError:
        return
    assert lay.body_len >= 0 or lay.body_len == -1


@SETTINGS
@given(st.binary(max_size=300))
def test_properties(data):
    props = P.parse_properties(data)
    assert all(isinstance(k, str) and isinstance(v, str) and k and v for k, v in props.items())
    P.split_keys(props.get("KEYS"))


@SETTINGS
@given(st.binary(max_size=300))
def test_consume_queue_units_and_checkpoint(data):
    units = CQ.decode_units(data[: len(data) - len(data) % CQ.UNIT_SIZE])
    assert units.size == len(data) // CQ.UNIT_SIZE
    if len(data) >= 40:
        CheckpointValues.unpack(data[:4096].ljust(4096, b"\0"))


@SETTINGS
@given(st.text(max_size=70))
def test_ids_and_hosts(text):
    for fn in (decode_offset_msg_id, uniq_key_timestamp):
        try:
            fn(text)
        except (RmqStoreError, ValueError):
            pass
    try:
        parse_host(text)
    except ValueError:
        pass


@SETTINGS
@given(st.binary(max_size=300), st.sampled_from([0x1, 0x101, 0x201, 0x301, 0x401]))
def test_compressed_bodies(data, flag):
    try:
        decompress(data, flag)
    except CompressionError:
        pass


@SETTINGS
@given(st.text(max_size=200))
def test_consumer_offset_files(text):
    try:
        table = decode_offset_table(text, "consumerOffset.json")
    except RmqStoreError:
        return
    assert all(isinstance(q, int) and isinstance(o, int) for v in table.values() for q, o in v.items())
