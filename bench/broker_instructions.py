"""The broker's instructions per message, counted rather than timed: ``rmqstore serve`` (the server
process of ``bench/broker.py``) runs under ``valgrind --tool=callgrind`` while a raw load generator
of ``bench/broker_loads.py`` sends to it, for this tree and for the tree of ``--old REV``.

    .venv/bin/python bench/broker_instructions.py --old ce37334 [--rows batch,raw1,raw8] [--null]

Each row starts the server twice per tree, once with a short load and once with a long one; the
difference of the two counts divided by the difference of messages is the server's instructions per
message, every thread of it (event loop, put, dispatch, flush), without its start and stop. Rows:
``batch`` SEND_BATCH_MESSAGE frames of 32 x 1 KiB, four in flight on one connection; ``raw1`` and
``raw8`` the C++ client's SEND_MESSAGE frames (100-byte bodies), one sync sender per connection on
one or eight connections. ``--rounds N`` repeats the count, trees alternating, and reports the
median. The CPU clocks of a shared two-core machine move by 30% from one run to the next; these
counts move less, but not by nothing: how many requests one read of the event loop finds (so how
many go in one group and one dispatch round) still depends on the timing, and the batch row's count
moved by up to 15% between two runs of one tree. What they leave out: the kernel's work (socket
reads and writes, page-cache copies: user space is counted only) and what an instruction costs
(cache misses of cold data). valgrind runs the server about 60 times slower, so the loads here are
small.
"""
from __future__ import annotations

import argparse
import os
import statistics
import shutil
import signal
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import broker_loads as L  # noqa: E402
from broker import _free_port  # noqa: E402

#: row: (short load, long load) in requests, the connections, messages per request
ROWS = {"batch": (100, 400, 1, L.BATCH), "raw1": (400, 2000, 1, 1), "raw8": (800, 4000, 8, 1)}


def server_instructions(tree: str | None, row: str, requests: int, kind: str = "serve") -> int:
    """Instructions of one server process of ``tree`` (None: this one) that took ``requests`` of ``row``
    after a short warm-up (the same in every run); ``kind`` "null": the null server of ``broker.py``
    (the same process, but a put is acknowledged without storing anything)."""
    store, log = tempfile.mkdtemp(prefix="rmqstore-instr-"), tempfile.mktemp(prefix="rmqstore-callgrind-")
    port = _free_port()
    env = dict(os.environ, RMQSTORE_BENCH_TREE=tree) if tree else None
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", f"--log-file={log}",
                             sys.executable, os.path.join(BENCH, "broker.py"), "--server", kind, "--store", store,
                             "--port", str(port)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"server under valgrind did not start: {line!r}")
        conns = ROWS[row][2]
        if row == "batch":
            L.warm_batch(port)
            done, _ = L.batch_load(port, requests)
        else:
            L.single_load(port, 8 * conns, conns)
            done, _ = L.single_load(port, requests, conns)
        if done != requests * ROWS[row][3]:
            raise RuntimeError(f"{row}: {done} of {requests * ROWS[row][3]} messages acknowledged")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(600)
        shutil.rmtree(store, ignore_errors=True)
    with open(log) as fh:
        counts = [int(x.split()[-1].replace(",", "")) for x in fh if "Collected" in x]
    os.unlink(log)
    if not counts:
        raise RuntimeError(f"no instruction count in valgrind's log of {row}")
    return counts[0]


def per_message(tree: str | None, row: str, kind: str = "serve") -> float:
    short, long, _, per_request = ROWS[row]
    a, b = server_instructions(tree, row, short, kind), server_instructions(tree, row, long, kind)
    return (b - a) / ((long - short) * per_request)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", help="also count the server of this git revision")
    ap.add_argument("--rows", default="batch,raw1,raw8")
    ap.add_argument("--rounds", type=int, default=1, help="counts per tree and row (the median is reported)")
    ap.add_argument("--null", action="store_true", help="count the null server of this tree too (what storing costs)")
    a = ap.parse_args()
    rows = a.rows.split(",")
    if unknown := set(rows) - set(ROWS):
        sys.exit(f"unknown rows {sorted(unknown)} (known: {', '.join(ROWS)})")
    old = L.export_tree(a.old, os.path.join(BENCH, "out", "broker")) if a.old else None
    lines = ["| row | instructions per message | old tree | old / new |", "|---|---:|---:|---:|"]
    for row in rows:
        got: dict = {None: [], old: []}
        for r in range(a.rounds):
            for tree in ([None, old] if r % 2 == 0 else [old, None]) if old else [None]:
                got[tree].append(per_message(tree, row))
                print(f"{row} round {r} {'old' if tree else 'new'}: {got[tree][-1]:,.0f}", flush=True)
        new = statistics.median(got[None])
        was = statistics.median(got[old]) if old else None
        lines.append(f"| {row} | {new:,.0f} | " + (f"{was:,.0f} | {was / new:.2f} |" if was else "| |"))
        if a.null:
            null = per_message(None, row, "null")
            print(f"{row} null server: {null:,.0f}", flush=True)
            lines.append(f"| {row}, null server | {null:,.0f} | | |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
