"""What the consume-side numbers cost: the pull offset a pull answer notes (once per pull, not per
message), beside the committed-offset update that path already made, and the scrape-time count of
messages received by pop and not acked, over many open receipts.

Run:  .venv/bin/python bench/consume_metrics.py [--calls 200000] [--checkpoints 10000]
"""
from __future__ import annotations

import argparse
import json
import statistics
import timeit

from rmqstore.broker.pop import PopService
from rmqstore.broker.pop_records import Checkpoint
from rmqstore.engine.consumer_offsets import ConsumerOffsetManager


def per_call_us(fn, calls: int, rounds: int = 5) -> float:
    return statistics.median(timeit.timeit(fn, number=calls) / calls * 1e6 for _ in range(rounds))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--checkpoints", type=int, default=10_000)
    a = ap.parse_args()
    m = ConsumerOffsetManager(None)
    pull_us = per_call_us(lambda: m.commit_pull_offset("G", "Orders", 3, 12345), a.calls)
    commit_us = per_call_us(lambda: m.commit_offset("G", "Orders", 3, 12345), a.calls)
    pops = PopService.__new__(PopService)  # only its open receipts are needed
    pops.open = {}
    for i in range(a.checkpoints):
        ck = Checkpoint(group=f"G{i % 50}", topic="T", origin="T", queue_id=i % 8, start=i * 4, pop_time=i,
                        invisible_ms=60_000, offsets=[i * 4 + k for k in range(4)], reconsume=[0] * 4, fifo=False)
        pops.open[ck.key] = ck
    scan_ms = statistics.median(timeit.timeit(pops.in_flight_by_queue, number=5) / 5 * 1e3 for _ in range(5))
    print(json.dumps({"commit_pull_offset_us": round(pull_us, 3), "commit_offset_us": round(commit_us, 3),
                      "pop_inflight_scan_ms": round(scan_ms, 2), "open_checkpoints": a.checkpoints,
                      "messages_held": 4 * a.checkpoints}))


if __name__ == "__main__":
    main()
