"""What running the dispatcher beside a batch producer costs, against dispatching after it.

Not collected by pytest. Usage::

    .venv/bin/python bench/dispatch_overlap.py [--pairs 16] [--switch-interval S]

Each pair of windows puts the same 100,000 keyed 128-byte messages in batches of 256 into a fresh
store, in one process, alternating which goes first:

- ``concurrent``: the store as opened (its dispatcher thread builds the consume queues and the index
  while the producer runs), then ``wait_dispatched()``;
- ``after``: the dispatcher stopped before the clock starts; once every batch is in, the calling
  thread dispatches everything (``reput.do_reput()``).

Printed: the median put time and put-plus-dispatch time of each, and the medians of the paired
ratios (concurrent / after). ``--switch-interval`` sets ``sys.setswitchinterval`` (default: Python's
5 ms) to see how much of the difference is the GIL being handed back and forth.
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402

from rmqstore import MessageStore  # noqa: E402


def window(msgs: list, concurrent: bool) -> tuple[float, float]:
    d = tempfile.mkdtemp(dir=H.WORK)
    try:
        with MessageStore.open(d, H._cfg()) as st:
            if not concurrent:
                st.reput.shutdown()
            gc.collect()
            gc.freeze()
            t = time.perf_counter()
            for i in range(0, len(msgs), 256):
                st.put_messages(msgs[i:i + 256])
            put = time.perf_counter() - t
            if concurrent:
                st.wait_dispatched()
            else:
                st.reput.do_reput()
            total = time.perf_counter() - t
            assert st.reput.reput_from == st.commit_log.confirm_offset
        return put, total
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--switch-interval", type=float, default=None)
    args = ap.parse_args()
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    os.makedirs(H.WORK, exist_ok=True)
    msgs = H._messages(100_000, 128, True, 256)
    res: dict[str, list[tuple[float, float]]] = {"concurrent": [], "after": []}
    for p in range(args.pairs):
        for kind in (("concurrent", "after") if p % 2 == 0 else ("after", "concurrent")):
            res[kind].append(window(msgs, kind == "concurrent"))
    print(f"{args.pairs} pairs, switch interval {sys.getswitchinterval() * 1000:g} ms")
    print("| windows | put (ms, median) | put + dispatch (ms, median) |")
    print("|---|---:|---:|")
    for kind, rows in res.items():
        print(f"| {kind} | {statistics.median(r[0] for r in rows) * 1e3:.0f} | "
              f"{statistics.median(r[1] for r in rows) * 1e3:.0f} |")
    pairs = list(zip(res["concurrent"], res["after"]))
    print(f"\nPaired concurrent / after: put {statistics.median(c[0] / a[0] for c, a in pairs):.3f}, "
          f"put + dispatch {statistics.median(c[1] / a[1] for c, a in pairs):.3f}")


if __name__ == "__main__":
    main()
