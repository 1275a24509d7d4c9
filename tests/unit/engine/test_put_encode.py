"""engine/put_encode.py: what the put path does outside the append lock. A message is checked
(FORMAT.md §2.7) and encoded into the record RocketMQ writes once the lock's stamps are in; a batch
is split into the columns of the vectorised encoder, or sent to the general path."""
from __future__ import annotations

import struct

import pytest

from rmqstore import Message, PutMessageStatus
from rmqstore.engine import put_encode as PE
from rmqstore.format.encode import fill_prop_crc
from rmqstore.format.msgid import parse_host
from rmqstore.format.record_layout import stamp_record
from tests.kit import cfg, load_vector, message_from_input, msg, stored_record

STORE_HOST = parse_host("10.0.0.1:10911")


@pytest.mark.parametrize("name", ["basic", "propcrc", "rollover"])
def test_encode_message_then_the_stamps_give_the_records_rocketmq_wrote(name):
    vs = load_vector(name)
    config, wrote = vs.config, []
    for m_in, m in zip(vs.input["messages"], vs.messages()):
        e = PE.encode_message(message_from_input(m_in, wrote), config, parse_host("1.1.1.1:1"))
        wrote.append(m["phyOffset"])
        assert isinstance(e, PE.Encoded)
        assert (e.total, e.key, e.tx_type, e.store_timestamp, e.born_unset, e.store_host_raw, e.wait) == (
            m["storeSize"], (m["topic"], m["queueId"]), 0, m["storeTimestamp"], False, STORE_HOST, True)
        stamp_record(e.rec, 0, m["queueOffset"], m["phyOffset"], m["storeTimestamp"])
        if config.enabled_append_prop_crc:
            assert e.rec.endswith(b"__CRC32#\x010000000000\x02")  # reserved, filled under the lock
            fill_prop_crc(e.rec, 0, e.total)
        assert bytes(e.rec) == stored_record(vs, m)


def test_encode_message_fills_in_the_store_host_born_host_and_born_time():
    e = PE.encode_message(msg("T", b"x"), cfg(), STORE_HOST)
    assert e.born_unset and e.store_timestamp is None and e.store_host_raw == STORE_HOST
    assert e.rec[48:56] == bytes([127, 0, 0, 1, 0, 0, 0, 0]) and e.rec[64:72] == STORE_HOST  # born 127.0.0.1:0
    v6 = PE.encode_message(msg("T", b"x", born_host="[::1]:5"), cfg(), STORE_HOST)
    assert struct.unpack_from(">i", v6.rec, 36)[0] == 0x10 and v6.total == 91 + 12 + 1 + 1


def _status(m: Message, **config) -> tuple:
    r = PE.encode_message(m, cfg(**config), STORE_HOST)
    return (r.status, r.error) if not isinstance(r, PE.Encoded) else ("encoded", r.total)


def _body(m: Message, body) -> Message:
    m.body = body
    return m


@pytest.mark.parametrize("m, config, status, why", [
    (msg("bad topic"), {}, PutMessageStatus.MESSAGE_ILLEGAL, "does not match"),
    (msg("T\n"), {}, PutMessageStatus.MESSAGE_ILLEGAL, "does not match"),
    (msg("T" * 256), {}, PutMessageStatus.MESSAGE_ILLEGAL, "the limit is 255"),
    (msg("T" * 128), dict(auto_message_version_on_topic_len=False), PutMessageStatus.MESSAGE_ILLEGAL, "V2 magic"),
    (_body(msg("T"), None), {}, PutMessageStatus.MESSAGE_ILLEGAL, "body is null"),
    (msg("T", queue_id=-1), {}, PutMessageStatus.MESSAGE_ILLEGAL, "queue id -1"),
    (msg("T", props={"INNER_NUM": "2"}), {}, PutMessageStatus.MESSAGE_ILLEGAL, "INNER_NUM property"),
    (msg("T", sys_flag=0x80), {}, PutMessageStatus.MESSAGE_ILLEGAL, "BatchCQ"),
    (msg("SCHEDULE_TOPIC_XXXX", props={"DELAY": "x"}), {}, PutMessageStatus.MESSAGE_ILLEGAL, "DELAY on"),
    (msg("T", props={"K": "v" * 32765}), dict(mapped_file_size_commit_log=1 << 20),
     PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, "32768 bytes"),
    (msg("T", props={"K": "v" * 32745}), dict(mapped_file_size_commit_log=1 << 20, enabled_append_prop_crc=True),
     PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, "32768 bytes"),
    (msg("T", b"x" * 11), dict(max_message_size=10), PutMessageStatus.MESSAGE_ILLEGAL, "maxMessageSize is 10"),
    (msg("T", b"x" * 3997), {}, PutMessageStatus.MESSAGE_ILLEGAL, "cannot fit a 4096-byte segment"),
    (msg("T", born_host="nohost"), {}, PutMessageStatus.MESSAGE_ILLEGAL, "bad host"),
])
def test_encode_message_refuses_what_rocketmq_refuses(m, config, status, why):
    got, error = _status(m, **config)
    assert got == status and why in error


@pytest.mark.parametrize("m, config, total", [
    (msg("T" * 128), {}, 91 + 1 + 128 + 1),                          # V2: a 2-byte topic length
    (msg("T", props={"K": "v" * 32764}), dict(mapped_file_size_commit_log=1 << 20), 91 + 1 + 1 + 32767),
    (msg("T", b"x" * 10), dict(max_message_size=10), 91 + 10 + 1),
    (msg("T", b"x" * 3996), {}, 4096 - 8),                          # room left for the blank
    (msg("SCHEDULE_TOPIC_XXXX", props={"DELAY": "3"}), {}, 91 + 1 + 19 + 8),
])
def test_encode_message_takes_what_is_just_within_the_limits(m, config, total):
    assert _status(m, **config) == ("encoded", total)


@pytest.mark.parametrize("value, delayed", [
    (None, False), ("", False), ("0", False), ("-1", False), ("3", True), ("+3", True), (3, True), (0, False),
    ("x", True), (" 3", True), ("99999999999", True),
])
def test_is_delayed_as_java_parses_the_delay_level(value, delayed):
    assert PE.is_delayed(value) is delayed


def test_born_columns_say_which_born_times_the_store_time_replaces():
    cols, unset = PE.born_columns([5, 6])
    assert cols.tolist() == [5, 6] and unset is None
    assert PE.born_columns([None, None]) == (None, True)
    cols, unset = PE.born_columns([5, None, 7])
    assert cols.tolist() == [5, 0, 7] and unset.tolist() == [False, True, False]


def test_shared_columns_send_mixed_batches_to_the_general_path():
    same = [msg("T", b"a", flag=3), msg("T", b"b", flag=3)]
    assert PE.shared_columns(same) == (3, 0, 0, 0)
    flags, sys_flags, reconsume, prepared = PE.shared_columns([msg("T", flag=1), msg("T", flag=2, sys_flag=2)])
    assert list(flags) == [1, 2] and sys_flags.tolist() == [0, 2] and list(reconsume) == [0, 0]
    for batch in ([msg("T"), msg("U")], [msg("T"), msg("T", queue_id=1)], [msg("T"), msg("T", born_host="1.2.3.4:5")],
                  [msg("T", sys_flag=0x8)] * 2, [msg("T"), msg("T", sys_flag=0x4)], [msg("T", sys_flag=0x10)] * 2):
        assert PE.shared_columns(batch) is None


def test_batch_properties_encode_or_refuse_a_fast_batch():
    assert PE.batch_properties([{"a": "1"}, {"b": "22", "c": None}, {}]) == [b"a\x011\x02", b"b\x0122\x02", b""]
    assert PE.batch_properties([{"DELAY": "0"}, {"DELAY": ""}]) == [b"DELAY\x010\x02", b"DELAY\x01\x02"]
    assert PE.batch_properties([{"a": "1"}, {"DELAY": "2"}]) is None
    assert PE.batch_properties([{"INNER_NUM": "1"}]) is None


def test_props_bytes_leave_out_none_values_and_keep_the_order():
    assert PE.props_bytes(msg("T", props={"b": "2", "a": None, "c": 3})) == b"b\x012\x02c\x013\x02"
    assert PE.props_bytes(msg("T", props=[("z", "1"), ("y", "2")])) == b"z\x011\x02y\x012\x02"
    assert PE.message_columns([msg("T", b"1", props={"a": "b"}, born_timestamp=9), msg("T", b"2")]) == (
        [b"1", b"2"], [{"a": "b"}, None], [9, None])


def test_range_checked_answers_an_out_of_range_field_with_message_illegal():
    class Log:
        @PE.range_checked
        def put(self, arg):
            for m in arg if isinstance(arg, list) else [arg]:
                struct.pack(">i", m.flag)
            return "put"

        @PE.range_checked
        def put_reconsume(self, m):
            return struct.pack(">i", m.reconsume_times)

    assert Log().put(msg("T", flag=2**31 - 1)) == "put"
    r = Log().put([msg("T"), msg("T", flag=2**31)])
    assert r.status == PutMessageStatus.MESSAGE_ILLEGAL
    assert r.error == "flag=2147483648 does not fit its signed 32-bit field"
    r = Log().put(msg("T", flag=-2**31 - 1))
    assert r.status == PutMessageStatus.MESSAGE_ILLEGAL and "flag=-2147483649" in r.error
    m = msg("T")
    m.reconsume_times = "x"  # a struct error that no range explains is raised
    with pytest.raises(struct.error):
        Log().put_reconsume(m)
