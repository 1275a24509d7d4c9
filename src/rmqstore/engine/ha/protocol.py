"""RocketMQ's classic HA protocol on the wire (``DefaultHAClient`` / ``DefaultHAConnection``;
4.9.8 ``HAService`` / ``HAConnection``): no handshake, big-endian, two frames.

* slave -> master, a report: ``i64 slaveMaxOffset`` (8 bytes). The first one chooses where the
  master starts; every later one is the slave's acknowledgement.
* master -> slave, a transfer: ``i64 phyOffset, i32 bodySize`` (12 bytes) and ``bodySize`` raw
  commitlog bytes of ONE segment; ``bodySize = 0`` is the heartbeat.

:class:`ReportReader` and :class:`FrameReader` cut a byte stream into those frames without
holding more than one frame (bounded buffers); both raise :class:`~rmqstore.errors.HAProtocolError`
on values the protocol does not allow."""
from __future__ import annotations

import struct

from ...config import HA_MAX_BATCH
from ...errors import HAProtocolError

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
REPORT_SIZE = REPORT.size      # 8
HEADER_SIZE = HEADER.size      # 12
#: the slave's read buffer upstream (``READ_MAX_BUFFER_SIZE``): a frame must fit it
READ_BUFFER_SIZE = 4 * 1024 * 1024


def encode_report(offset: int) -> bytes:
    return REPORT.pack(offset)


def encode_header(phy_offset: int, body_size: int) -> bytes:
    return HEADER.pack(phy_offset, body_size)


def start_offset(report: int, master_max: int, segment_size: int) -> int:
    """Where the master starts sending after a first report (``WriteSocketService``): a report of
    0 starts at the first byte of the master's last segment, anything else where it says."""
    if report == 0:
        return max(0, master_max - master_max % segment_size)
    return report


class ReportReader:
    """The master's side: 8-byte reports out of whatever the socket gives (at most 7 bytes kept)."""

    __slots__ = ("_rest",)

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes) -> list[int]:
        """The complete reports in ``data`` (after what was left over), in order."""
        buf = self._rest + data if self._rest else data
        n = len(buf) - len(buf) % REPORT_SIZE
        self._rest = bytes(buf[n:])
        return [v for (v,) in REPORT.iter_unpack(buf[:n])] if n else []


class FrameReader:
    """The slave's side: transfer frames out of the stream, into one buffer of at most
    ``READ_BUFFER_SIZE`` bytes. :meth:`frames` yields ``(phy_offset, body memoryview)``; the view
    is valid until the next :meth:`recv_into_buffer`."""

    def __init__(self, max_body: int = HA_MAX_BATCH) -> None:
        self.buf = bytearray(READ_BUFFER_SIZE)
        self.start = 0   # first unconsumed byte
        self.end = 0     # end of received bytes
        self.max_body = max_body

    def space(self) -> memoryview:
        """Where the next bytes go (the consumed prefix is dropped first when needed)."""
        if self.start and (self.end == len(self.buf) or self.start == self.end):
            n = self.end - self.start
            self.buf[:n] = self.buf[self.start:self.end]
            self.start, self.end = 0, n
        return memoryview(self.buf)[self.end:]

    def received(self, n: int) -> None:
        self.end += n

    def next_frame(self) -> tuple[int, memoryview] | None:
        """The next complete frame, or None until more bytes come."""
        avail = self.end - self.start
        if avail < HEADER_SIZE:
            return None
        phy, size = HEADER.unpack_from(self.buf, self.start)
        if phy < 0 or size < 0 or size > self.max_body:
            raise HAProtocolError(f"HA frame header offset={phy} bodySize={size}: expected offset >= 0 and "
                                  f"0 <= bodySize <= {self.max_body}")
        if avail < HEADER_SIZE + size:
            return None
        body = memoryview(self.buf)[self.start + HEADER_SIZE:self.start + HEADER_SIZE + size]
        self.start += HEADER_SIZE + size
        return phy, body

    def clear(self) -> None:
        self.start = self.end = 0
