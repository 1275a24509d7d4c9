"""The broker's send path in-process, without sockets: the C++ client's ``SEND_MESSAGE`` frames
(``broker_loads.cpp_send_frame``) fed to ``--conns`` connections of a running ``Broker`` through fake
transports, one frame per connection per pass of the event loop (each read its own callback, as
asyncio's selector schedules them). Prints the event-loop thread's CPU µs per message (the first
fifth of the sends is a warm-up).

    .venv/bin/python bench/broker_inproc.py serve --conns 8 --sends 16000
    PYTHONPATH=<other tree>/src .venv/bin/python bench/broker_inproc.py null --conns 1

Deterministic instructions per message (the CPU clocks of a shared machine move by ±30%): the
difference of two runs under ``valgrind --tool=callgrind --callgrind-out-file=/dev/null``, with
``--sends 2400`` and ``--sends 400``, divided by 2,000 (the ``Collected`` line of each).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

import broker_loads as L

from rmqstore import MessageStore
from rmqstore.broker import Broker, BrokerConfig
from rmqstore.broker import remoting as R
from rmqstore.broker.server import Connection


class FakeTransport:
    """What a connection writes to, counted and dropped."""

    def __init__(self, i: int):
        self.written = 0
        self.peer = ("127.0.0.1", 40000 + i)

    def write(self, data: bytes) -> None:
        self.written += 1

    def get_extra_info(self, name: str, default=None):
        return self.peer if name == "peername" else default

    def set_write_buffer_limits(self, high=None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


#: with --batch, the frames of one read: the raw batch generator's requests in flight arrive together
BATCH_READ = 4


def _frames(conns: int, per: int, batch: bool) -> list[list[bytes]]:
    """Per connection, ``per`` reads: one C++ client send each, or ``BATCH_READ`` SEND_BATCH_MESSAGE
    frames of 32 x 1 KiB (for the four queues of the topic)."""
    if not batch:
        return [[L.cpp_send_frame(R, i, c * per + i, c % 4) for i in range(per)] for c in range(conns)]
    bodies = [L.java_batch_body(L.BATCH, 1024) for _ in range(16)]
    return [[b"".join(L.batch_frame(R, i * BATCH_READ + k, "BenchBatch", k, bodies[(i + k) % len(bodies)])
                      for k in range(BATCH_READ)) for i in range(per)] for c in range(conns)]


async def _drive(b: Broker, conns: int, sends: int, batch: bool) -> tuple[float, int, int]:
    """(loop thread CPU seconds, messages timed, answers written)."""
    per = sends // conns
    frames = _frames(conns, per, batch)
    cs = []
    for c in range(conns):
        conn = Connection(b.server)
        conn.connection_made(FakeTransport(c))
        cs.append(conn)
    loop = asyncio.get_running_loop()

    async def run(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            for c in range(conns):
                loop.call_soon(cs[c].data_received, frames[c][i])
            await asyncio.sleep(0)
        for _ in range(5):  # (the last dispatch round, after its coalescing time)
            await asyncio.sleep(0.002)

    await run(0, per // 5)
    t0 = time.thread_time()
    await run(per // 5, per)
    timed = (per - per // 5) * conns * (L.BATCH * BATCH_READ if batch else 1)
    return time.thread_time() - t0, timed, sum(c.transport.written for c in cs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["serve", "null"])
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--sends", type=int, default=16000, help="reads (each one send, or with --batch four batches)")
    ap.add_argument("--batch", action="store_true", help=f"{BATCH_READ} SEND_BATCH_MESSAGE frames of 32 x 1 KiB per read")
    a = ap.parse_args()
    store = tempfile.mkdtemp(prefix="rmqstore-inproc-")
    try:
        st = MessageStore.open(store)
        b = Broker(st, BrokerConfig(broker_name="bench"), listen="127.0.0.1:0")
        if a.kind == "null":
            import broker as B
            B.null_put(b)
        b.start()
        cpu, n, answers = asyncio.run_coroutine_threadsafe(_drive(b, a.conns, a.sends, a.batch), b.loop).result(600)
        b.stop()
        st.close()
    finally:
        shutil.rmtree(store, ignore_errors=True)
    expected = a.sends // a.conns * a.conns * (BATCH_READ if a.batch else 1)
    if answers != expected:
        sys.exit(f"{answers} answers for {expected} requests")
    print(f"{a.kind} conns={a.conns}{' batch' if a.batch else ''} {cpu / n * 1e6:.1f} us/msg ({n} sends timed, {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
