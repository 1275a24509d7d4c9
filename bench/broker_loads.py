"""The broker's send rows, paired (imported by bench/broker.py): each round runs every row against
every server variant in alternating order, and reads the broker process's CPU seconds (user + system,
all its threads: psutil) over the timed part only.

Rows:
* ``cpp1`` / ``cpp8``: sync sends from 1 / 8 C++-client processes (PyPI rocketmq 0.4.4), 100-byte bodies;
* ``cpp8sync``: ``cpp8`` against a SYNC_FLUSH store (a send is answered once its record is on disk);
* ``grpc``: the RocketMQ 5.x Python client (PyPI rocketmq-python-client 5.1.2) over gRPC, sync sends,
  one producer;
* ``batch``: a raw remoting load generator sending SEND_BATCH_MESSAGE frames as the Java client
  builds them (``MessageBatch.generateFromList`` + ``MessageDecoder.encodeMessages``: per message
  totalSize, magic 0, bodyCRC 0, flag, body, properties in ``HashMap`` order with WAIT, TAGS and a
  UNIQ_KEY each; V2 request header with ``batch=true``), 32 x 1 KiB per batch, 4 requests in flight on
  one connection (the Java client's 4 threads share one channel).

Variants: ``null`` (the same broker answering puts without storing), ``serve`` (this tree) and,
with ``--old REV``, ``old`` (the broker of git revision REV, run from an exported copy of its
``src``).
"""
from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRPC_PY = os.path.join(ROOT, ".clients", "grpc-py", "bin", "python")
GRPC_DRIVER = os.path.join(ROOT, "tests", "broker", "clients", "grpc_py_client.py")
ROWS = ("cpp1", "cpp8", "cpp8sync", "grpc", "batch", "raw1", "raw8")
ROW_TITLES = {"cpp1": "C++ client, 1 producer, sync sends", "cpp8": "C++ client, 8 producer processes",
              "cpp8sync": "C++ client, 8 producer processes, SYNC_FLUSH store",
              "grpc": "5.x Python client (gRPC), 1 producer, sync sends",
              "batch": "raw SEND_BATCH_MESSAGE (32 x 1 KiB, 4 in flight)",
              "raw1": "raw SEND_MESSAGE as the C++ client frames it, 1 connection",
              "raw8": "raw SEND_MESSAGE as the C++ client frames it, 8 connections"}


def export_tree(rev: str, out_dir: str) -> str:
    """``src`` of git revision ``rev`` exported under ``out_dir``; returns the path for PYTHONPATH."""
    dest = os.path.join(out_dir, f"tree-{rev}")
    if not os.path.isdir(os.path.join(dest, "src", "rmqstore")):
        os.makedirs(dest, exist_ok=True)
        archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "src"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return os.path.join(dest, "src")


def cpu_seconds(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


# --- the 5.x Python client ------------------------------------------------------------------------
class GrpcProducer:
    """The 5.x Python client driver (tests/broker/clients/grpc_py_client.py) in its own process."""

    def __init__(self, endpoint: str, topic: str, home: str):
        env = dict(os.environ, HOME=home)
        self.proc = subprocess.Popen([GRPC_PY, GRPC_DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)
        self.call({"op": "producer", "endpoints": endpoint, "topics": [topic]})

    def call(self, cmd: dict) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        out = json.loads(self.proc.stdout.readline())
        if not out.get("ok"):
            raise RuntimeError(f"gRPC client: {out.get('error')}")
        return out

    def close(self) -> None:
        try:
            self.call({"op": "shutdown"})
        finally:
            self.proc.stdin.close()
            self.proc.wait(60)


# --- the raw batch generator ----------------------------------------------------------------------
_uniq = itertools.count()

#: messages per batch of the raw batch rows
BATCH = 32


def java_batch_body(n: int, size: int) -> bytes:
    """``MessageDecoder.encodeMessages`` of n messages as ``DefaultMQProducer.send(Collection)`` makes
    them: each gets a UNIQ_KEY, keeps WAIT=true and its TAGS; properties in ``HashMap(16)`` order."""
    from rmqstore.format.javalang import hashmap_order

    body = b"x" * size
    out = []
    for _ in range(n):
        props = {"WAIT": "true", "TAGS": "TagA", "UNIQ_KEY": f"7F00000100002A9F{next(_uniq):016X}"}
        p = "".join(f"{k}\x01{props[k]}\x02" for k in hashmap_order(list(props), 16)).encode()
        total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(p)
        out.append(b"".join((total.to_bytes(4, "big"), bytes(8), (0).to_bytes(4, "big"), len(body).to_bytes(4, "big"),
                             body, len(p).to_bytes(2, "big"), p)))
    return b"".join(out)


def batch_frame(R, opaque: int, topic: str, queue_id: int, body: bytes) -> bytes:
    ext = {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": int(time.time() * 1000),
           "h": 0, "i": "WAIT\x01true\x02", "j": 0, "k": False, "m": True}
    return R.encode(R.request(R.RequestCode.SEND_BATCH_MESSAGE, ext, body, opaque=opaque))


def batch_load(port: int, batches: int, *, per_batch: int = BATCH, size: int = 1024, in_flight: int = 4,
               topic: str = "BenchBatch") -> tuple[int, float]:
    """Send ``batches`` batches over one connection, ``in_flight`` unanswered at a time; returns
    (messages acknowledged, seconds). Bodies are built before the clock starts."""
    from rmqstore.broker import remoting as R

    bodies = [java_batch_body(per_batch, size) for _ in range(min(batches, 64))]
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = R.FrameReader()
    sent = done = ok = 0
    t0 = time.perf_counter()
    while done < batches:
        while sent < batches and sent - done < in_flight:
            sock.sendall(batch_frame(R, sent, topic, sent % 4, bodies[sent % len(bodies)]))
            sent += 1
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("server closed the connection")
        for frame in reader.feed(data):
            resp = R.decode(frame)
            done += 1
            ok += per_batch if resp.code == 0 else 0
    secs = time.perf_counter() - t0
    sock.close()
    return ok, secs


def warm_batch(port: int) -> None:
    batch_load(port, 4)


# --- raw single sends, and the bare server (the floor) ---------------------------------------------
def cpp_send_frame(R, opaque: int, i: int, queue_id: int, topic: str = "BenchRaw") -> bytes:
    """A SEND_MESSAGE (10) frame as PyPI rocketmq 0.4.4 (the C++ client) writes it: a JSON header whose
    extFields mix strings and numbers, KEYS/TAGS/UNIQ_KEY/WAIT/index properties, a 100-byte body."""
    props = (f"KEYS\x01key-{i}\x02TAGS\x01TagA\x02UNIQ_KEY\x010100007F00000EF1{i:016X}\x02WAIT\x01true\x02"
             f"index\x01{i}\x02")
    ext = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "iQHPp0FNqlmJDdvjJbHCxOAbqmw=", "batch": "0",
           "bornTimestamp": str(int(time.time() * 1000)), "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
           "flag": 0, "producerGroup": "P", "properties": props, "queueId": queue_id, "reconsumeTimes": "0",
           "sysFlag": 0, "topic": topic, "unitMode": "0"}
    header = json.dumps({"code": 10, "extFields": ext, "flag": 0, "language": "CPP", "opaque": opaque, "remark": "",
                         "version": 63}, separators=(",", ":")).encode() + b"\n"
    body = b"x" * 100
    return (8 + len(header) - 4 + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body


def single_load(port: int, sends: int, conns: int) -> tuple[int, float]:
    """``sends`` SEND_MESSAGE frames over ``conns`` connections, one unanswered per connection (a
    sync producer each), from one process; returns (acknowledged, seconds). Frames are built first."""
    import selectors

    from rmqstore.broker import remoting as R

    per = sends // conns
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
    frames = [[cpp_send_frame(R, i, c * per + i, c % 4) for i in range(per)] for c in range(conns)]
    sel = selectors.DefaultSelector()
    state = {}
    for c, s in enumerate(socks):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state[s] = [c, 0, R.FrameReader()]
        sel.register(s, selectors.EVENT_READ)
    ok = 0
    t0 = time.perf_counter()
    for s, (c, _, _) in state.items():
        s.sendall(frames[c][0])
    live = len(socks)
    while live:
        for key, _ in sel.select():
            s = key.fileobj
            st = state[s]
            for frame in st[2].feed(s.recv(1 << 16)):
                ok += R.decode(frame).code == 0
                st[1] += 1
                if st[1] < per:
                    s.sendall(frames[st[0]][st[1]])
                else:
                    live -= 1
                    sel.unregister(s)
    secs = time.perf_counter() - t0
    for s in socks:
        s.close()
    return ok, secs


def bare_server(port: int) -> None:
    """The floor: an asyncio server that cuts frames and answers each with a canned SEND answer, nothing
    decoded (the event loop, the socket reads and writes of one request, in Python)."""
    import asyncio

    from rmqstore.broker import remoting as R

    answer = R.encode(R.RemotingCommand(0, 1, R.RESPONSE_FLAG, None, {
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "msgId": "7F00000100002A9F0000000000000000",
        "queueId": "0", "queueOffset": "0", "transactionId": "0100007F00000EF10000000000000000"}))

    class Bare(asyncio.Protocol):
        def connection_made(self, transport):
            self.t, self.reader = transport, R.FrameReader()

        def data_received(self, data):
            for _ in self.reader.feed(data):
                self.t.write(answer)

    async def main():
        server = await asyncio.get_running_loop().create_server(Bare, "127.0.0.1", port)
        print("READY", "", flush=True)
        async with server:
            await server.serve_forever()
    asyncio.run(main())


__all__ = ["ROWS", "ROW_TITLES", "export_tree", "cpu_seconds", "GrpcProducer", "batch_load", "warm_batch",
           "single_load", "bare_server"]
