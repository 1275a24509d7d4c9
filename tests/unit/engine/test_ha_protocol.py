"""engine/ha/protocol.py: the classic HA frames byte for byte as RocketMQ's ``DefaultHAClient``
(``reportOffset.putLong``) and ``DefaultHAConnection`` (``byteBufferHeader.putLong(offset).putInt(size)``)
lay them out: big-endian, 8-byte reports, 12-byte headers; the start rule for a report of 0."""
from __future__ import annotations

import pytest

from rmqstore.engine.ha import protocol as P
from rmqstore.errors import HAProtocolError


def test_report_is_a_big_endian_long():
    assert P.encode_report(0x0102030405060708) == bytes.fromhex("0102030405060708")
    assert P.encode_report(0) == b"\0" * 8
    assert P.REPORT_SIZE == 8


def test_header_is_long_offset_then_int_size():
    assert P.encode_header(0x1122334455667788, 0x0A0B0C0D) == bytes.fromhex("1122334455667788" "0A0B0C0D")
    assert P.encode_header(1 << 30, 0) == bytes.fromhex("0000000040000000" "00000000")  # a heartbeat
    assert P.HEADER_SIZE == 12


def test_report_reader_takes_reports_split_anywhere():
    r = P.ReportReader()
    stream = b"".join(P.encode_report(v) for v in (5, 1 << 40, 77))
    got = []
    for i in range(0, len(stream), 3):
        got += r.feed(stream[i:i + 3])
    assert got == [5, 1 << 40, 77]
    assert r.feed(b"\xff" * 7) == []          # incomplete: kept
    assert r.feed(b"\xff") == [-1]            # (negative: the service judges it)


@pytest.mark.parametrize("report, master_max, expected", [
    (0, 0, 0), (0, 100, 0), (0, 1000, 1000), (0, 2500, 2000), (0, 1999, 1000), (1234, 5000, 1234)])
def test_start_rule(report, master_max, expected):
    assert P.start_offset(report, master_max, 1000) == expected


def frames_of(stream: bytes, piece: int, max_body: int = 1 << 20) -> list[tuple[int, bytes]]:
    fr = P.FrameReader(max_body)
    out = []
    for i in range(0, len(stream), piece):
        data = stream[i:i + piece]
        space = fr.space()
        space[:len(data)] = data
        fr.received(len(data))
        while (f := fr.next_frame()) is not None:
            out.append((f[0], bytes(f[1])))
    return out


@pytest.mark.parametrize("piece", [1, 5, 12, 13, 1000])
def test_frame_reader_splits_frames_and_heartbeats(piece):
    frames = [(4096, b"a" * 30), (4126, b""), (4126, bytes(range(200))), (4326, b"z")]
    stream = b"".join(P.encode_header(o, len(b)) + b for o, b in frames)
    assert frames_of(stream, piece) == frames


@pytest.mark.parametrize("offset, size", [(-1, 0), (0, -5), (0, 2_000_000)])
def test_frame_reader_refuses_impossible_headers(offset, size):
    with pytest.raises(HAProtocolError, match="bodySize"):
        frames_of(P.encode_header(offset, size) + b"x" * 20, 64, max_body=1 << 20)


def test_frame_reader_buffer_is_bounded_and_reused():
    fr = P.FrameReader()
    body = b"q" * 3_000_000
    stream = (P.encode_header(0, len(body)) + body) * 3
    got, pos = 0, 0
    while pos < len(stream):
        space = fr.space()
        n = min(len(space), len(stream) - pos, 1_000_000)
        space[:n] = stream[pos:pos + n]
        fr.received(n)
        pos += n
        while (f := fr.next_frame()) is not None:
            assert bytes(f[1]) == body
            got += 1
    assert got == 3 and len(fr.buf) == P.READ_BUFFER_SIZE
