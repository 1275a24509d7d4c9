"""engine/ha/master.py: what a master sends a slave that speaks the protocol by hand: nothing
before the first report, the start rule, frames of at most haTransferBatchSize bytes that never
cross a segment, heartbeats after haSendHeartbeatInterval, new data at once."""
from __future__ import annotations

import socket
import time

from rmqstore.config import MessageStoreConfig
from rmqstore.engine.ha import HEADER_SIZE, FrameReader, encode_report
from rmqstore.message_store import MessageStore
from rmqstore.types import Message

SEG = 64 * 1024
CFG = dict(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=4000, max_hash_slot_num=64,
           max_index_num=512, ha_send_heartbeat_interval=300, ha_transfer_batch_size=5000)


def read_frames(sock: socket.socket, seconds: float, until=None) -> list[tuple[int, bytes]]:
    """Frames read for ``seconds``, or until ``until(frames)`` holds."""
    fr, out = FrameReader(), []
    sock.settimeout(0.05)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (until is not None and until(out)):
        try:
            n = sock.recv_into(fr.space())
        except socket.timeout:
            continue
        if not n:
            break
        fr.received(n)
        while (f := fr.next_frame()) is not None:
            out.append((f[0], bytes(f[1])))
    return out


def test_what_a_master_sends(tmp_path):
    with MessageStore.open(str(tmp_path / "m"), MessageStoreConfig(**CFG)) as m:
        for i in range(200):
            m.put_message(Message.create("T", b"w" * 700, queue_id=0))
        end = m.commit_log.confirm_offset
        last = end - end % SEG
        ha = m.start_ha("127.0.0.1", 0)
        with socket.create_connection(ha.address, timeout=2) as c:
            assert read_frames(c, 0.3) == []                 # nothing before the first report
            c.sendall(encode_report(0))
            frames = read_frames(c, 10, until=lambda fs: sum(len(b) for _, b in fs) >= end - last)
            assert frames[0][0] == last                      # a report of 0: the master's last segment
            assert b"".join(b for _, b in frames) == bytes(m.commit_log.queue.last.mm[:end - last])
            assert all(len(b) <= 5000 for _, b in frames)
            hb = read_frames(c, 10, until=len)               # idle: heartbeats at the next offset
            assert hb and all(f == (end, b"") for f in hb)
            c.sendall(encode_report(end))
            r = m.put_message(Message.create("T", b"n" * 100, queue_id=0))
            got = read_frames(c, 10, until=len)
            assert got[0][0] == end and got[0][1] == bytes(m.commit_log.get_data(r.phy_offset, r.wrote_bytes))


def test_frames_never_cross_a_segment(tmp_path):
    with MessageStore.open(str(tmp_path / "m"), MessageStoreConfig(**CFG)) as m:
        for i in range(300):
            m.put_message(Message.create("T", b"w" * 650, queue_id=0))
        ha = m.start_ha("127.0.0.1", 0)
        with socket.create_connection(ha.address, timeout=2) as c:
            c.sendall(encode_report(1000))                   # any other report: exactly there
            want = m.commit_log.confirm_offset - 1000
            frames = read_frames(c, 10, until=lambda fs: sum(len(b) for _, b in fs) >= want)
        offs = [o for o, b in frames if b]
        assert offs[0] == 1000
        for o, b in frames:
            assert o // SEG == (o + len(b) - 1) // SEG or not b
        data = b"".join(b for _, b in frames)
        assert len(data) == m.commit_log.confirm_offset - 1000
        assert HEADER_SIZE == 12
