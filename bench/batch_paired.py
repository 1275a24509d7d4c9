"""A broker's batch path in-process, two source trees in alternating, paired rounds: the body of a
``SEND_BATCH_MESSAGE`` cut into columns, the put of four such batches as one group, their dispatch.

Run:  .venv/bin/python bench/batch_paired.py --old 31f1133 [--rounds 3] [--groups 1000]
      .venv/bin/python bench/batch_paired.py --micro [--rounds 12]

Each measurement is a fresh child process with a fresh store under ``bench/out/batch_paired``: 4
batches of 32 x 1 KiB as the Java client builds them (``broker_loads.java_batch_body``), one queue
each, put with ``MessageStore.put_group`` (each answer's msgId formatted, as the broker does), then one
``do_reput``, ``--groups`` times; prints the mean microseconds per batch of each step and the
medians of the rounds. The old tree runs from ``git archive`` (``broker_loads.export_tree``).
``--micro`` times three of the put's steps in this tree against the way they were done before (the
fallback each keeps), ``timeit`` in alternating rounds: a batch's 32 offsetMsgIds, its 32 header
rows, ``time_diff_seconds`` of a round's 128 store times against one begin time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "bench", "out", "batch_paired")

CODE = r'''
import json, shutil, sys, time
sys.path.insert(0, {src!r}); sys.path.insert(0, {bench!r})
import broker_loads as L
from rmqstore import Message, MessageStore, MessageStoreConfig
from rmqstore.broker import messages as BM
from rmqstore.engine.put_batch import RawBatch
shutil.rmtree({store!r}, ignore_errors=True)
st = MessageStore.open({store!r}, MessageStoreConfig())
st.reput.set_inline(True)
bodies = [L.java_batch_body(32, 1024) for _ in range(16)]
def rounds(n):
    cols = put = disp = 0.0
    for r in range(n):
        t0 = time.perf_counter()
        items = []
        for q in range(4):
            flags, bs, props = BM.batch_columns(bodies[(4 * r + q) % 16])
            items.append(RawBatch(Message(topic="BenchBatch", body=b"", queue_id=q, born_timestamp=1,
                                          born_host="127.0.0.1:5555", store_host="127.0.0.1:10911"), flags, bs, props))
        t1 = time.perf_counter()
        for res in st.put_group(items):
            assert res.ok and res.msg_id
        t2 = time.perf_counter()
        st.reput.do_reput()
        t3 = time.perf_counter()
        cols, put, disp = cols + t1 - t0, put + t2 - t1, disp + t3 - t2
    return {{"columns": cols / n / 4 * 1e6, "put": put / n / 4 * 1e6, "dispatch": disp / n / 4 * 1e6}}
rounds(50)
out = rounds({groups})
st.close()
shutil.rmtree({store!r}, ignore_errors=True)
print(json.dumps(out))
'''


def run(src: str, groups: int) -> dict[str, float]:
    code = CODE.format(src=src, bench=HERE, store=os.path.join(OUT, "store"), groups=groups)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def micro(rounds: int) -> None:
    import timeit

    import numpy as np

    from rmqstore.format import encode_batch as E
    from rmqstore.format import msgid
    from rmqstore.format.index_file import time_diff_seconds

    host, tail = bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F]), b"\x09BenchTopic"
    offs, ts = np.arange(32, dtype=np.int64) * 1100 + 10**9, np.full(128, 1_700_000_123_456, dtype=np.int64)
    row, begin = E._batch_row(tail, 0, host, host), 1_700_000_000_000

    def ids(kept: int):
        def f():
            msgid.IDS_PACKED = kept  # (0: the numpy fill)
            return msgid.encode_offset_msg_ids(host, offs)
        return f
    steps = {"32 offsetMsgIds (numpy fill / struct)": (ids(0), ids(1024)),
             "32 header rows (np.repeat / cached bytes)": (
                 lambda: np.repeat(row, 32),
                 lambda: np.frombuffer(bytearray(E._batch_rows(tail, 0, host, host, 32)), dtype=E.FIXED_V4_DTYPE)),
             "time_diff_seconds, one begin (np.clip / new)": (
                 lambda: time_diff_seconds(ts, np.array(begin)), lambda: time_diff_seconds(ts, begin))}
    print("| step | before (us) | now (us) | before / now (median, range) |\n|---|---:|---:|---|")
    for name, (old, new) in steps.items():
        assert np.asarray(old()).tobytes() == np.asarray(new()).tobytes(), name  # (the same answer)
        t: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(rounds):
            for which, f in ((("old", old), ("new", new)) if r % 2 == 0 else (("new", new), ("old", old))):
                t[which].append(min(timeit.repeat(f, number=2000, repeat=3)) / 2000 * 1e6)
        ratios = [o / n for o, n in zip(t["old"], t["new"])]
        print(f"| {name} | {statistics.median(t['old']):.1f} | {statistics.median(t['new']):.1f} | "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    msgid.IDS_PACKED = 1024


def main() -> None:
    sys.path.insert(0, HERE)
    import broker_loads as L

    ap = argparse.ArgumentParser()
    ap.add_argument("--old", help="git revision of the old tree (required but with --micro)")
    ap.add_argument("--micro", action="store_true", help="time three put steps against their fallbacks")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--groups", type=int, default=1000, help="groups of 4 batches per measurement")
    a = ap.parse_args()
    if a.micro:
        return micro(a.rounds)
    if not a.old:
        ap.error("--old is required")
    os.makedirs(OUT, exist_ok=True)
    trees = {"old": L.export_tree(a.old, OUT), "new": os.path.join(ROOT, "src")}
    got: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for r in range(a.rounds):
        for which in (("old", "new") if r % 2 == 0 else ("new", "old")):
            res = run(trees[which], a.groups)
            for step, us in res.items():
                got[which].setdefault(step, []).append(us)
            print(f"round {r} {which}: " + ", ".join(f"{k} {v:.1f} us" for k, v in res.items()), flush=True)
    print(f"| step (us a batch) | old ({a.old}) | new | old / new |\n|---|---:|---:|---:|")
    for step in got["new"]:
        o, n = statistics.median(got["old"][step]), statistics.median(got["new"][step])
        print(f"| {step} | {o:.1f} | {n:.1f} | {o / n:.2f} |")


if __name__ == "__main__":
    main()
