"""Embedded use, side by side in one run: consumer-group ``poll`` against the raw ``get_message``
loop and the consuming peers of the harness, and the disk a new embedded store allocates with 1,
1,000 and 1,000,000 messages beside diskcache and persist-queue holding the same items.

Run:  .venv/bin/python bench/embedded.py [--rounds 5] [--out bench/results/embedded.md]

Reading rows use the harness's workloads and child processes (a fresh fork per measurement, peak RSS
its own, implementations rotated by round); disk rows are measured once (they do not vary) as the
blocks the files occupy (``du``), not their sizes.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as H  # noqa: E402

from rmqstore import Message, MessageStore, MessageStoreConfig  # noqa: E402

N_STORE = 1_000_000


def rmq_poll(store, max_messages, touch=False):
    """Every message of the prebuilt store through a consumer group (read-only store, 4 queues);
    ``touch``: read each record's body and keys too (what a diskcache item hands back: records
    decode properties, hosts and msgId on first read)."""
    with MessageStore.open(store, H._cfg(mapped_file_size_commit_log=256 << 20), read_only=True) as st:
        c = st.consumer("bench", "Bench")
        total = [0]

        def run():
            while batch := c.poll(max_messages=max_messages, timeout_s=0):
                total[0] += len(batch)
                if touch:
                    for rec in batch:
                        if not rec.body or not rec.keys:
                            raise AssertionError(f"record {rec.phy_offset} without body or key")
        secs = H._timed(run)
    return {"ops": total[0], "seconds": secs}


def _allocated(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def disk_rmqstore(d: str, n: int) -> None:
    body = H._body(128)
    with MessageStore.open(d) as st:  # no config: the embedded preset
        assert st.cfg == MessageStoreConfig.embedded()
        for i in range(0, n, 256):
            st.put_messages([Message.create("Bench", body, keys=[f"key-{j}"], queue_id=0)
                             for j in range(i, min(n, i + 256))])


def disk_diskcache(d: str, n: int) -> None:
    import diskcache
    body = H._body(128)
    q = diskcache.Deque(directory=d)
    for i in range(0, n, 10_000):
        q.extend((f"key-{j}", body) for j in range(i, min(n, i + 10_000)))
    q.cache.close()


def disk_persistqueue(d: str, n: int) -> None:
    import persistqueue
    body = H._body(128)
    q = persistqueue.Queue(os.path.join(d, "q"), autosave=False)
    for j in range(n):
        q.put((f"key-{j}", body))
    del q  # nothing consumed: every item stays on disk


def disk_row(fn, n: int) -> dict:
    d = H._tmp()
    try:
        t = time.perf_counter()
        fn(d, n)
        return {"bytes": _allocated(d), "seconds": time.perf_counter() - t}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(H.ROOT, "bench", "results", "embedded.md"))
    ap.add_argument("--reads-only", action="store_true",
                    help="measure the reading rows only; keep the disk rows of the existing --out file")
    args = ap.parse_args()
    started = time.time()
    print(f"building the prebuilt store ({N_STORE:,} keyed messages)...", flush=True)
    prebuilt = H._prebuilt(N_STORE, 128, "q")
    n_peer = 25_000
    impls = [
        ("rmqstore get_message loop (pull 32, all 4 queues)", (H.rmq_pull, prebuilt)),
        ("rmqstore consumer poll(max_messages=100)", (rmq_poll, prebuilt, 100)),
        ("rmqstore consumer poll(max_messages=1000)", (rmq_poll, prebuilt, 1000)),
        ("rmqstore consumer poll(max_messages=100), body and keys read", (rmq_poll, prebuilt, 100, True)),
        ("diskcache.Deque (iterate)", (H.peer_get, "diskcache.Deque", n_peer, 128)),
        ("persistqueue.Queue (get + task_done)", (H.peer_get, "persistqueue.Queue", n_peer, 128)),
        ("persistqueue.SQLiteQueue (get)", (H.peer_get, "persistqueue.SQLiteQueue", n_peer, 128)),
        ("litequeue (pop + done)", (H.peer_get, "litequeue", n_peer, 128)),
    ]
    res: dict[str, list[dict]] = {name: [] for name, _ in impls}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", flush=True)
        k = r % len(impls)
        for name, (fn, *fargs) in impls[k:] + impls[:k]:
            out = H.run_child(fn, *fargs)
            out["rate"] = out["ops"] / out["seconds"]
            res[name].append(out)
    rate = {name: statistics.median(x["rate"] for x in rs) for name, rs in res.items()}
    raw = rate[impls[0][0]]
    peers = {n: v for n, v in rate.items() if not n.startswith("rmqstore")}
    best_peer = max(peers, key=peers.get)
    lines = ["# Embedded use: consumer groups and disk allocation", "",
             f"Command: `.venv/bin/python bench/embedded.py --rounds {args.rounds}"
             f"{' --reads-only' if args.reads_only else ''}`, run "
             f"{dt.datetime.utcnow().strftime('%Y-%m-%d %H:%M')} UTC, {time.time() - started:.0f} s. "
             f"Machine: {H.machine()}.", "",
             f"## Reading everything back in order ({N_STORE:,} messages of 128 B in 4 queues; peers {n_peer:,})", "",
             "| implementation | median msgs/s | ratio to the get_message loop | peak RSS (MB) |", "|---|---:|---:|---:|"]
    for name, _ in impls:
        lines.append(f"| {name} | {rate[name]:,.0f} | {rate[name] / raw:.2f} | "
                     f"{max(x['rss_mb'] for x in res[name]):.0f} |")
    poll = rate["rmqstore consumer poll(max_messages=100)"]
    used = rate["rmqstore consumer poll(max_messages=100), body and keys read"]
    lines += ["", "| target | measured | met |", "|---|---:|---|",
              f"| poll ≥ 0.9× the raw get_message loop | {poll / raw:.2f}× | {'yes' if poll >= 0.9 * raw else '**no**'} |",
              f"| poll ≥ 2× the fastest peer ({best_peer}) | {poll / peers[best_peer]:.1f}× | "
              f"{'yes' if poll >= 2 * peers[best_peer] else '**no**'} |",
              f"| the same, each record's body and keys read (a diskcache item is its key and body) | "
              f"{used / peers[best_peer]:.1f}× | {'yes' if used >= 2 * peers[best_peer] else '**no**'} |", ""]
    if args.reads_only:
        with open(args.out) as fh:
            old = fh.read()
        disk = old[old.index("## Disk allocated"):]
        text = "\n".join(lines) + "\n" + disk.replace("## Disk allocated", "## Disk allocated (from the previous "
                                                      "full run, not measured again)", 1)
        with open(args.out, "w") as fh:
            fh.write(text)
        print(text)
        return
    lines += ["## Disk allocated (`du`: blocks the files occupy) for n messages of 128 B with one key", "",
              "| n | rmqstore, embedded preset | diskcache.Deque | persistqueue.Queue | rmqstore, broker preset (for reference) |",
              "|---:|---:|---:|---:|---:|"]
    broker_one = None
    for n in (1, 1000, N_STORE):
        print(f"disk rows, {n:,} messages", flush=True)
        row = [disk_row(f, n)["bytes"] for f in (disk_rmqstore, disk_diskcache, disk_persistqueue)]
        if broker_one is None:
            broker_one = MessageStoreConfig().mapped_file_size_commit_log + MessageStoreConfig().index_file_size + \
                MessageStoreConfig().cq_file_size
        ref = f"{broker_one / 1e6:,.0f} MB (reserved at open)" if n == 1 else ""
        lines.append(f"| {n:,} | " + " | ".join(f"{b / 1e6:,.2f} MB" for b in row) + f" | {ref} |")
    lines += ["", "rmqstore reserves each file whole when it creates it (a full disk then shows as an error at "
              "creation, never as a SIGBUS); the embedded preset's files are 32 MiB (commitlog), 1 MB per queue "
              "(consume queue) and 8.4 MB (index). The broker preset reserves 1 GiB + 6 MB + 420 MB.", ""]
    text = "\n".join(lines)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
