"""The remoting codec: frames as RocketMQ's RemotingCommand writes and reads them."""
from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqstore.broker import remoting as R


def _frame_header(frame: bytes) -> tuple[int, int, int]:
    length, word = struct.unpack_from(">ii", frame)
    return length, word >> 24, word & 0xFFFFFF


def test_json_frame_layout_matches_remoting_command():
    cmd = R.request(105, {"topic": "T"}, b"xyz", opaque=7)
    frame = R.encode(cmd)
    length, kind, hlen = _frame_header(frame)
    assert kind == R.JSON and length == len(frame) - 4 and 4 + hlen + 3 == length
    header = json.loads(frame[8:8 + hlen])
    assert header["code"] == 105 and header["opaque"] == 7 and header["extFields"] == {"topic": "T"}
    assert header["flag"] == 0 and header["language"] == "JAVA" and frame.endswith(b"xyz")


def test_binary_header_layout():
    cmd = R.RemotingCommand(code=11, opaque=0x01020304, flag=R.RESPONSE_FLAG, remark="hé", ext={"k": "v"},
                            body=b"B", language="CPP", version=401, serialize=R.ROCKETMQ)
    frame = R.encode(cmd)
    _, kind, hlen = _frame_header(frame)
    h = frame[8:8 + hlen]
    assert kind == R.ROCKETMQ
    assert struct.unpack_from(">hbhii", h) == (11, 1, 401, 0x01020304, 1)
    assert h[13:17] == (3).to_bytes(4, "big") and h[17:20] == "hé".encode()
    assert h[20:24] == (1 + 2 + 1 + 4).to_bytes(4, "big")  # extFields: i16 key len, key, i32 value len, value
    assert h[24:] == b"\x00\x01k\x00\x00\x00\x01v"
    back = R.decode(frame[4:])
    assert (back.code, back.opaque, back.remark, back.ext, back.body, back.language, back.is_response) == \
        (11, 0x01020304, "hé", {"k": "v"}, b"B", "CPP", True)


@given(code=st.integers(-32768, 32767), opaque=st.integers(-(1 << 31), (1 << 31) - 1), flag=st.integers(0, 3),
       remark=st.none() | st.text(min_size=1, max_size=20), body=st.binary(max_size=64),
       ext=st.dictionaries(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=16), max_size=5),
       serialize=st.sampled_from([R.JSON, R.ROCKETMQ]))
def test_round_trip_both_serializations(code, opaque, flag, remark, body, ext, serialize):
    cmd = R.RemotingCommand(code, opaque, flag, remark, ext, body, serialize=serialize)
    back = R.decode(R.encode(cmd)[4:])
    assert (back.code, back.opaque, back.flag, back.remark, back.ext, back.body, back.serialize) == \
        (code, opaque, flag, remark, ext, body, serialize)


def test_json_ext_fields_numbers_become_strings():
    header = json.dumps({"code": 15, "opaque": 1, "flag": 2, "extFields": {"queueId": 3, "commitOffset": 12,
                                                                           "x": True}}).encode()
    frame = (len(header)).to_bytes(4, "big") + header
    cmd = R.decode(frame)
    assert cmd.ext == {"queueId": "3", "commitOffset": "12", "x": "true"} and cmd.is_oneway


@pytest.mark.parametrize("ext, expected", [
    ({"topic": "T", "queueId": "3"}, {"topic": "T", "queueId": "3"}),  # all strings: taken as decoded
    ({"topic": "T", "gone": None}, {"topic": "T"}),                    # a null value is left out
    ({"topic": "T", "q": 1.5, "o": {"a": 1}}, {"topic": "T", "q": "1.5", "o": '{"a":1}'}),
])
def test_json_ext_fields_as_fastjson_reads_them(ext, expected):
    header = json.dumps({"code": 10, "opaque": 7, "extFields": ext}).encode()
    cmd = R.decode((len(header)).to_bytes(4, "big") + header)
    assert cmd.ext == expected and all(type(v) is str for v in cmd.ext.values())


def test_a_json_header_with_a_lone_surrogate_decodes_as_json_loads_does():
    header = b'{"code":10,"extFields":{"k":"' + "\ud800".encode("utf-8", "surrogatepass") + b'"}}'
    assert R.decode((len(header)).to_bytes(4, "big") + header).ext == {"k": "\ud800"}


@pytest.mark.parametrize("frame, message", [
    (b"\x00\x00", "shorter than"),
    ((100).to_bytes(4, "big") + b"{}", "bad header length 100"),
    ((2).to_bytes(4, "big") + b"{x", "not JSON"),
    ((2).to_bytes(4, "big") + b"[]", "expected an object"),
    (((7 << 24) | 2).to_bytes(4, "big") + b"{}", "unknown serialize type 7"),
    (((1 << 24) | 4).to_bytes(4, "big") + b"abcd", "shorter than its fixed"),
])
def test_malformed_frames_raise_frame_error(frame, message):
    with pytest.raises(R.FrameError, match=message):
        R.decode(frame)


def test_binary_string_past_header_is_refused():
    h = bytearray(struct.pack(">hbhii", 10, 0, 0, 1, 0)) + (999).to_bytes(4, "big") + b"ab" + (0).to_bytes(4, "big")
    frame = ((1 << 24) | len(h)).to_bytes(4, "big") + bytes(h)
    with pytest.raises(R.FrameError, match="runs past the header"):
        R.decode(frame)


def test_frame_reader_cuts_stream_and_bounds_lengths():
    a, b = R.encode(R.request(1, {"a": "1"})), R.encode(R.request(2, body=b"zz"))
    reader = R.FrameReader()
    stream = a + b
    got = []
    for i in range(len(stream)):  # byte by byte: frames come out whole, once
        got += reader.feed(stream[i:i + 1])
    assert [R.decode(f).code for f in got] == [1, 2] and reader.pending == 0
    with pytest.raises(R.FrameError, match="frame length -1"):
        R.FrameReader().feed(b"\xff\xff\xff\xff")
    with pytest.raises(R.FrameError, match="frame length 16777217"):
        R.FrameReader().feed((R.MAX_FRAME + 1).to_bytes(4, "big"))


def test_header_accessor_parses_as_java():
    h = R.Header(R.request(1, {"n": "42", "bad": " 4", "big": "3000000000", "b": "TRUE"}))
    assert h.int("n") == 42 and h.long("big") == 3000000000 and h.bool("b") is True
    assert h.int("missing", 5) == 5 and h.bool("missing") is False
    with pytest.raises(R.HeaderError, match="<missing> is null"):
        h.str("missing")
    with pytest.raises(R.HeaderError, match="<bad>"):
        h.int("bad")
    with pytest.raises(R.HeaderError, match="<big>"):
        h.int("big")


_HEADERS = [b'{"code":10,"extFields":{"a":123456789012345678901234567890,"b":1.5,"c":true,"d":null,"e":7},"opaque":3}',
            b'{"code":10,"extFields":{"n":{"x":1.0,"y":[1,2]},"s":"\\ud800"},"flag":0}',
            b'{"code":10,"opaque":18446744073709551617,"flag":0}', b'{"code":10,"opaque":1e400}',
            b'{"code":10,"extFields":{"v":NaN}}', b'{"code":10,"remark":"r\\u00e9","language":"CPP","version":63}']


@pytest.mark.parametrize("header", _HEADERS)
def test_json_headers_decode_the_same_with_or_without_orjson(header, monkeypatch):
    frame = len(header).to_bytes(4, "big") + header + b"body"
    with_orjson = _outcome(frame)
    monkeypatch.setattr(R, "_ORJSON_LOADS", None)
    assert _outcome(frame) == with_orjson


def _outcome(frame: bytes):
    try:
        return R.decode(frame)
    except R.FrameError as e:
        return str(e)


def test_orjson_is_used_for_the_usual_header():
    assert R._ORJSON_LOADS is not None  # (a core dependency: the fast parse is what the broker runs)
    cmd = R.decode((32).to_bytes(4, "big") + b'{"code":10,"extFields":{"q":0}} ')
    assert cmd.code == 10 and cmd.ext == {"q": "0"}


@given(st.integers(-2**31, 2**31 - 1), st.integers(0, 3), st.integers(-2**31, 2**31 - 1),
       st.one_of(st.none(), st.text()), st.dictionaries(st.text(), st.text(), max_size=5),
       st.sampled_from(R.LANGUAGES + ("X\"y", "é")), st.integers(-1000, 1000))
def test_json_answer_text_is_the_encoders(code, flag, opaque, remark, ext, language, version):
    cmd = R.RemotingCommand(code, opaque, flag, remark, ext, b"", language, version)
    doc = {"code": code, "extFields": ext, "flag": flag, "language": language, "opaque": opaque,
           "serializeTypeCurrentRPC": "JSON", "version": version}
    if remark is not None:
        doc["remark"] = remark
    assert R._encode_json(cmd) == json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


@given(st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1),
       st.dictionaries(st.text(), st.text(), max_size=6))
def test_json_answer_frame_is_what_encode_writes(code, opaque, ext):
    """A handler's own answer frame (extFields formatted by it) equals the encoder's frame of the command."""
    cmd = R.RemotingCommand(code, opaque, R.RESPONSE_FLAG, None, ext)
    ext_json = "{" + ",".join(f"{R.json_string(k)}:{R.json_string(v)}" for k, v in ext.items()) + "}"
    assert R.json_answer_frame(code, opaque, ext_json) == R.encode(cmd)


@given(st.text())
def test_json_string_escapes_as_the_encoder(text):
    assert R.json_string(text) == json.dumps(text, ensure_ascii=False)


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=6), st.lists(st.integers(0, 200), max_size=8))
def test_frame_reader_gives_the_same_frames_however_the_stream_is_cut(bodies, cuts):
    """Whole frames per read (the reader's shortcut), several per read, and frames split anywhere."""
    frames = [R.encode(R.request(i, body=body)) for i, body in enumerate(bodies)]
    stream = b"".join(frames)
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    for reads in ([stream[a:b] for a, b in zip(points, points[1:])], frames):
        reader, got = R.FrameReader(), []
        for chunk in reads:
            got += reader.feed(chunk)
        assert [bytes(f) for f in got] == [f[4:] for f in frames] and reader.pending == 0


@given(st.integers(-2**31, 2**31 - 1), st.text(), st.booleans(),
       st.lists(st.text("0123456789ABCDEF", min_size=32, max_size=32), min_size=1, max_size=40).map(",".join),
       st.integers(-1, 2**31 - 1), st.integers(0, 2**63 - 1), st.one_of(st.none(), st.text()))
def test_a_send_answer_frame_is_what_encode_writes(opaque, region, trace, msg_id, qid, offset, uniq):
    """The send processor's answer frame (its extFields' text formatted in one piece) equals the
    encoder's frame of the command with the same extFields in the same order (a batch's msgId: the
    ids joined by commas)."""
    from rmqstore.broker.send import _answer_ext_json, _ext_head, _plain_ids

    assert _plain_ids(msg_id)

    ext = {"MSG_REGION": region, "TRACE_ON": "true" if trace else "false", "msgId": msg_id, "queueId": str(qid),
           "queueOffset": str(offset)}
    if uniq is not None:
        ext["transactionId"] = uniq
    cmd = R.RemotingCommand(R.ResponseCode.SUCCESS, opaque, R.RESPONSE_FLAG, None, ext)
    ext_json = _answer_ext_json(_ext_head(region, trace), msg_id, qid, offset, uniq)
    assert R.json_answer_frame(R.ResponseCode.SUCCESS, opaque, ext_json) == R.encode(cmd)


@pytest.mark.parametrize("msg_id, plain", [("0A0B,0C0D", True), ("0A0B", True), ('0A"B', False), ("0A\\B", False),
                                           ("\u00e9", False), ("", False)])
def test_only_plain_msg_ids_skip_the_encoder(msg_id, plain):
    from rmqstore.broker.send import _plain_ids

    assert _plain_ids(msg_id) is plain
