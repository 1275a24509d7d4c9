"""How the dispatcher thread slows a put_messages(256) producer in the same interpreter.

Paired in-process windows: one store, 100,000 keyed 128-byte messages per window in batches of
256, the variants alternating window by window (so that each pair sees the same state of this
noisy VM), medians over the windows:

* ``dispatch``: the default store, dispatcher running;
* ``stub``: the dispatcher running with its field extraction replaced by a stub that returns
  columns of the right shape (decoding, consume-queue and index writes still done);
* ``stopped``: the append path alone, on a second store whose dispatcher is shut down (the two
  stores grow alike; all windows interleave in a rotating order).

For each window with the dispatcher running it records how many records the dispatcher finished
inside the window. On the stopped store two helper threads stand in for a dispatcher: one that
holds the GIL through 100 small numpy calls in every ~0.6 ms, one that runs long GIL-free numpy
calls. Run: ``.venv/bin/python bench/dispatch_interplay.py [pairs]``; prints a Markdown report.
"""
from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import WORK, _cfg, _messages  # noqa: E402

from rmqstore import MessageStore  # noqa: E402
from rmqstore.engine import dispatch as D  # noqa: E402

N = 100_000
_real_extract = D.extract_dispatch_columns
_mode = ["dispatch"]
_done = [0]


def _stub_columns(u8, batch, delay_levels_ms, topic_cache):
    n = len(batch)
    rec = np.repeat(np.arange(n, dtype=np.int64), 2)
    return D.DispatchColumns(np.zeros(n, dtype=np.int64), ["Bench"], np.zeros(n, dtype=np.int64), rec,
                             (batch.phy_offset[rec] * 2654435761 + np.tile([0, 1], n)) % (2**31 - 1))


def _extract(u8, batch, delay_levels_ms, topic_cache):
    _done[0] += len(batch)
    if _mode[0] == "stub":
        return _stub_columns(u8, batch, delay_levels_ms, topic_cache)
    return _real_extract(u8, batch, delay_levels_ms, topic_cache)


def _window(st, msgs) -> float:
    t = time.perf_counter()
    for i in range(0, N, 256):
        st.put_messages(msgs[i:i + 256])
    return N / (time.perf_counter() - t)


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    D.extract_dispatch_columns = _extract
    msgs = _messages(N, 128, True, 256)
    os.makedirs(WORK, exist_ok=True)
    dirs = [tempfile.mkdtemp(prefix="interplay-", dir=WORK) for _ in range(2)]
    rates: dict[str, list[float]] = {}
    done: dict[str, list[int]] = {}
    stop = [False]
    small, big = np.arange(100), np.arange(200_000)

    def gil_holder():
        while not stop[0]:
            for _ in range(100):
                small.sum()
            time.sleep(0.0005)

    def gil_free():
        while not stop[0]:
            np.cumsum(big)

    try:
        # two stores that grow alike: one with its dispatcher, one with it stopped (a stopped
        # dispatcher does not come back), their windows interleaved in a rotating order
        with MessageStore.open(dirs[0], _cfg()) as live, MessageStore.open(dirs[1], _cfg()) as alone:
            alone.reput.shutdown()
            gc.collect()
            gc.freeze()
            variants = ["dispatch", "stub", "stopped", "stopped + GIL-holding thread", "stopped + GIL-free thread"]
            for r in range(pairs):
                for v in variants[r % 5:] + variants[:r % 5]:
                    helper = {"stopped + GIL-holding thread": gil_holder, "stopped + GIL-free thread": gil_free}.get(v)
                    th = None
                    if helper is not None:
                        stop[0] = False
                        th = threading.Thread(target=helper, daemon=True)
                        th.start()
                    if v in ("dispatch", "stub"):
                        _mode[0] = v
                        live.wait_dispatched()
                        _done[0] = 0
                        rates.setdefault(v, []).append(_window(live, msgs))
                        done.setdefault(v, []).append(_done[0])
                    else:
                        rates.setdefault(v, []).append(_window(alone, msgs))
                    if th is not None:
                        stop[0] = True
                        th.join()
            live.wait_dispatched()
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
    base = statistics.median(rates["stopped"])
    print(f"# Dispatcher interplay ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {pairs} windows per "
          f"variant, {N:,} messages each)\n")
    print("| variant | median msgs/s | vs stopped | records dispatched inside the window (median) |")
    print("|---|---:|---:|---:|")
    for k, v in rates.items():
        med = statistics.median(v)
        extra = f"{statistics.median(done[k]):,.0f}" if k in done else ""
        print(f"| {k} | {med:,.0f} | {med / base:.2f}× | {extra} |")
    full, got = np.array(rates["dispatch"] + rates["stub"]), np.array(done["dispatch"] + done["stub"])
    lost = (N / full - N / base) * 1e6  # µs of producer time lost per window
    if got.std() > 0:
        slope = float(np.polyfit(got, lost, 1)[0])
        print(f"\nProducer time lost per window against records dispatched inside it (dispatch and stub windows, "
              f"least squares): {slope:.2f} µs per dispatched record.")
    print("\nPaired ratios (each window against the other variant's window of the same round):")
    pr = [a / b for a, b in zip(rates["stub"], rates["dispatch"])]
    print(f"- stub / dispatch: median {statistics.median(pr):.3f} (from {min(pr):.2f} to {max(pr):.2f})")


if __name__ == "__main__":
    main()
