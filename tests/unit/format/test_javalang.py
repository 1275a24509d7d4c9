"""Java's parsing rules on the write path: what RocketMQ's reader rejects, rmqstore never writes."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqstore import Message, MessageStore, MessageStoreConfig, PutMessageStatus
from rmqstore.format.javalang import parse_int, parse_port
from rmqstore.format.msgid import parse_host


@pytest.mark.parametrize("text, value", [("3", 3), ("+3", 3), ("-1", -1), ("0", 0), ("007", 7),
                                         ("2147483647", 2**31 - 1), ("-2147483648", -(2**31)),
                                         ("\u0661\u0662", 12), ("\uff13", 3)])
def test_what_integer_parse_int_accepts(text, value):
    assert parse_int(text) == value


@pytest.mark.parametrize("text", ["", " 3", "3 ", "3_0", "x", "+", "-", "2147483648", "-2147483649", "3.0",
                                  "0x10", "1e3", "\t3", "++3", "99999999999"])
def test_what_integer_parse_int_rejects_and_python_int_may_not(text):
    with pytest.raises(ValueError):
        parse_int(text)


@given(st.integers(-(2**31), 2**31 - 1))
def test_every_int32_round_trips(n):
    assert parse_int(str(n)) == n


@pytest.mark.parametrize("port", [" 80", "+80", "8_0", "70000", "", "٨٠"])
def test_ports_are_plain_ascii_numbers(port):
    with pytest.raises(ValueError):
        parse_port(port)
    with pytest.raises(ValueError):
        parse_host(f"1.2.3.4:{port}")


def test_hosts_as_rocketmq_writes_them():
    assert parse_host("[::ffff:10.1.2.3]:1234") == parse_host("10.1.2.3:1234")  # IPv4-mapped: stored as IPv4
    assert len(parse_host("[::1]:9876")) == 20
    for bad in ("::1:80", "[1.2.3.4:80", "1.2.3.4", "host:80"):
        with pytest.raises(ValueError):
            parse_host(bad)


CFG = MessageStoreConfig(mapped_file_size_commit_log=1 << 16, mapped_file_size_consume_queue=400,
                         max_hash_slot_num=16, max_index_num=64)


@pytest.mark.parametrize("delay", [" 3", "3_0", "x", "99999999999", "3 ", ""])
def test_schedule_topic_delay_must_parse_as_java_does(tmp_path, delay):
    """RocketMQ's recovery takes a SCHEDULE_TOPIC_XXXX record whose DELAY Integer.parseInt rejects for
    an invalid record and truncates the store there: such a put is MESSAGE_ILLEGAL, nothing written."""
    with MessageStore.open(tmp_path / "s", CFG) as st:
        r = st.put_message(Message(topic="SCHEDULE_TOPIC_XXXX", body=b"x", properties={"DELAY": delay}))
        if delay == "":  # parsing drops an empty value: nothing for Java to reject
            assert r.status is PutMessageStatus.PUT_OK
            return
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "Integer.parseInt" in r.error
        assert st.max_phy_offset == 0
        ok = st.put_message(Message(topic="SCHEDULE_TOPIC_XXXX", body=b"x", properties={"DELAY": "3"}))
        assert ok.status is PutMessageStatus.PUT_OK


@pytest.mark.parametrize("delay", [" 0", "x", "0x1"])
def test_a_batch_with_an_unparseable_delay_is_illegal(tmp_path, delay):
    with MessageStore.open(tmp_path / "s", CFG) as st:
        r = st.put_messages([Message(topic="T", body=b"x", properties={"DELAY": delay})] * 2)
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and st.max_phy_offset == 0
        assert st.put_messages([Message(topic="T", body=b"x", properties={"DELAY": "0"})] * 2).ok


def test_an_ipv4_mapped_born_host_is_stored_as_ipv4(tmp_path):
    with MessageStore.open(tmp_path / "s", CFG) as st:
        r = st.put_message(Message(topic="T", body=b"x", born_host="[::ffff:10.1.2.3]:1234"))
        rec = st.look_message_by_offset(r.phy_offset)
        assert rec.born_host == "10.1.2.3:1234" and not rec.sys_flag & 0x10  # no BORNHOST_V6 flag


@pytest.mark.parametrize("raw,trimmed", [(" a ", "a"), ("\t\x00a\x1f", "a"), ("\u00a0a\u3000", "\u00a0a\u3000"),
                                         ("", ""), ("  ", "")])
def test_java_trim_strips_only_up_to_u0020(raw, trimmed):
    from rmqstore.format.javalang import java_trim
    assert java_trim(raw) == trimmed
