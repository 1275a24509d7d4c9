"""Durability benchmarks: SYNC_FLUSH put throughput with group commit, and recovery time per GiB.

Run:  .venv/bin/python bench/durability.py                 (about 1 GiB of commitlog; a few minutes)
      .venv/bin/python bench/durability.py --gib 0.25      (a smaller store; times are scaled per GiB)

Every measurement runs in a fresh child process (fork), so the peak RSS printed beside it
(``resource.getrusage(RUSAGE_SELF).ru_maxrss`` in that child) is its own. Prints a markdown table
and writes it, with the command that produced it, to bench/results/durability.md.

* put: ``put_message`` under SYNC_FLUSH (every PUT_OK is on disk; concurrent puts share one msync),
  128-byte bodies, one key each (plus the UNIQ_KEY every producer adds), 1 and 8 threads, for a
  fixed time; msgs/s counts PUT_OK results.
* recovery: a store with one commitlog segment of the given size, filled (ASYNC_FLUSH, batches)
  and closed cleanly. *normal*: reopen after the clean close (the whole segment is scanned with CRC
  checks, nothing to re-dispatch). *abnormal*: an ``abort`` file and a zeroed checkpoint, the worst
  crash (no checkpoint ever written): the segment is scanned with CRC checks, every consume queue
  and the index are cut back to the start and everything is dispatched again.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # children.py

from rmqstore import Message, MessageStore, MessageStoreConfig  # noqa: E402

from children import run_child  # noqa: E402

GIB = 1 << 30


def _in_child(fn, *args) -> dict:
    """Run ``fn(*args)`` in a forked child (bench/children.py); its peak RSS in MiB included."""
    res = run_child(fn, *args)
    res["rss_mib"] = res["rss_mb"]
    return res


def _put_cfg() -> MessageStoreConfig:
    return MessageStoreConfig(flush_disk_type="SYNC_FLUSH", mapped_file_size_commit_log=256 << 20,
                              max_hash_slot_num=1 << 20, max_index_num=4 << 20)


def bench_put(workdir: str, threads: int, seconds: float) -> dict:
    path = tempfile.mkdtemp(prefix=f"put{threads}-", dir=workdir)
    body = bytes(range(128))
    counts = [0] * threads
    with MessageStore.open(path, _put_cfg()) as st:
        for i in range(50):  # warm up: segment created, first msyncs done
            st.put_message(Message.create("Bench", body, keys=[f"w{i}"]))
        stop = time.monotonic() + seconds

        def run(t: int) -> None:
            n = 0
            while time.monotonic() < stop:
                if st.put_message(Message.create("Bench", body, keys=[f"k{t}-{n}"], queue_id=t % 4)).ok:
                    n += 1
            counts[t] = n

        t0 = time.monotonic()
        ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        elapsed = time.monotonic() - t0
        n = sum(counts)
    shutil.rmtree(path, ignore_errors=True)
    return {"msgs": n, "seconds": elapsed, "rate": n / elapsed}


def _rec_cfg(seg: int) -> MessageStoreConfig:
    return MessageStoreConfig(flush_disk_type="ASYNC_FLUSH", mapped_file_size_commit_log=seg,
                              max_hash_slot_num=1 << 20, max_index_num=4 << 20)


def build_store(path: str, seg: int) -> dict:
    """Fill one segment of ``seg`` bytes (1 KiB bodies, one key each) and close cleanly."""
    body = os.urandom(1024)
    n = 0
    t0 = time.monotonic()
    with MessageStore.open(path, _rec_cfg(seg)) as st:
        limit = seg - (1 << 20)
        while st.max_phy_offset < limit:
            batch = [Message.create("Recovery", body, keys=[f"k{n + j}"], queue_id=(n // 32) % 8) for j in range(32)]
            assert st.put_messages(batch).ok
            n += 32
        st.wait_dispatched(timeout=600)
        size = st.max_phy_offset
    return {"messages": n, "bytes": size, "seconds": time.monotonic() - t0}


def bench_recover(path: str, seg: int) -> dict:
    t0 = time.monotonic()
    st = MessageStore.open(path, _rec_cfg(seg))
    t = time.monotonic() - t0
    rep = st.recovery_report
    out = {"seconds": t, "mode": rep.mode, "records": rep.records_scanned, "redispatched": rep.records_redispatched,
           "bytes": rep.end_offset - rep.start_offset}
    st.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0, help="commitlog size for the recovery runs (GiB)")
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each put measurement")
    ap.add_argument("--dir", default=os.path.join(ROOT, "bench", "out"), help="where the stores are created")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "durability.md"))
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="durability-", dir=args.dir)
    load_before = os.getloadavg()[0]
    rows = []
    try:
        for threads in (1, 8):
            r = _in_child(bench_put, work, threads, args.seconds)
            rows.append((f"put_message, SYNC_FLUSH, {threads} thread{'s' if threads > 1 else ''}, 128 B body, "
                         "1 key", f"{r['rate']:,.0f} msgs/s", f"{r['msgs']:,} puts in {r['seconds']:.1f} s",
                         f"{r['rss_mib']:.0f}"))
        seg = int(args.gib * GIB)
        seg -= seg % 4096
        path = os.path.join(work, "rec")
        b = _in_child(build_store, path, seg)
        gib = b["bytes"] / GIB
        normal = _in_child(bench_recover, path, seg)
        assert normal["mode"] == "normal", normal
        rows.append(("recovery, normal (clean shutdown)", f"{normal['seconds'] / gib:.2f} s/GiB",
                     f"{normal['seconds']:.2f} s for {gib:.2f} GiB, {normal['records']:,} records scanned",
                     f"{normal['rss_mib']:.0f}"))
        with open(os.path.join(path, "abort"), "w") as fh:
            fh.write("0")
        with open(os.path.join(path, "checkpoint"), "r+b") as fh:
            fh.write(bytes(4096))
        abnormal = _in_child(bench_recover, path, seg)
        assert abnormal["mode"] == "abnormal", abnormal
        rows.append(("recovery, abnormal (crash, no checkpoint)", f"{abnormal['seconds'] / gib:.2f} s/GiB",
                     f"{abnormal['seconds']:.2f} s for {gib:.2f} GiB, {abnormal['records']:,} records scanned, "
                     f"{abnormal['redispatched']:,} re-dispatched", f"{abnormal['rss_mib']:.0f}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cmd = " ".join([".venv/bin/python", "bench/durability.py"] + sys.argv[1:])
    lines = ["# Durability benchmarks", "", f"Command (from the repository root): `{cmd}`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
             f"{platform.system()} {platform.release()}; stores on {args.dir}; 1-minute load average "
             f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after the run (other jobs on the machine "
             "move these numbers, SYNC_FLUSH rates most: they are msync latency).",
             f"Recovery store: {b['messages']:,} messages with 1 KiB bodies in one {seg / GIB:.2f} GiB segment "
             f"({gib:.2f} GiB of records{'; times are per GiB, scaled from this size' if abs(gib - 1) > 0.05 else ''}).",
             "Peak RSS is `ru_maxrss` of the child that ran the measurement; it counts the resident pages of "
             "mapped files too (recovery maps and reads the whole segment: that page cache, shared and "
             "reclaimable, is most of its RSS), so it is not heap.",
             "", "| measurement | result | detail | peak RSS (MiB) |", "|---|---|---|---|"]
    lines += [f"| {a} | {b_} | {c} | {d} |" for a, b_, c, d in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
