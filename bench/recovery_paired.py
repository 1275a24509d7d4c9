"""Abnormal recovery, old tree against new tree, in paired alternating rounds.

Not collected by pytest. Usage::

    .venv/bin/python bench/recovery_paired.py --old /tmp/old-tree [--mib 256] [--rounds 5] [--store DIR]

A store of one ``--mib`` MiB commitlog segment of 1 KiB keyed messages is built once
(``bench/durability.py: build_store``). Each measurement is one process of the given tree opening it
as after the worst crash (``abort`` file, zeroed checkpoint: every record scanned with its CRC and
re-dispatched into consume queues and index); MB/s is recovered commitlog bytes over the open's wall
time. Rounds alternate the order (old first, then new first); ratios are new over old per round.
Then, in this process, the new tree's record CRC check (``format.message.body_crc_ok``) against a
plain ``zlib.crc32`` loop over the same bodies (the first 100,000 records), alternating, 5 times each.
Last, the new tree's phases: one abnormal recovery (one walk of the log) timed by phase, medians of
3 opens.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, os, sys
tree, store, seg = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, os.path.join(tree, "src")); sys.path.insert(0, os.path.join(tree, "bench"))
import durability
with open(os.path.join(store, "abort"), "w") as fh:
    fh.write("0")
with open(os.path.join(store, "checkpoint"), "r+b") as fh:
    fh.write(bytes(4096))
print(json.dumps(durability.bench_recover(store, seg)))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="a checkout of the tree to compare with")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--store", default="/tmp/rmqstore-recovery-bench")
    args = ap.parse_args()
    seg = args.mib << 20
    if not os.path.exists(os.path.join(args.store, ".complete")):
        sys.path.insert(0, str(ROOT / "src"))
        sys.path.insert(0, str(ROOT / "bench"))
        import durability

        durability.build_store(args.store, seg)
        open(os.path.join(args.store, ".complete"), "w").close()
    res: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(args.rounds):
        order = [("old", args.old), ("new", str(ROOT))]
        for name, tree in (order if r % 2 == 0 else order[::-1]):
            out = subprocess.run([sys.executable, "-c", _CHILD, tree, args.store, str(seg)], capture_output=True,
                                 text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            assert got["mode"] == "abnormal", got
            res[name].append(got["bytes"] / got["seconds"] / 1e6)
            print(f"round {r + 1} {name}: {res[name][-1]:.1f} MB/s", file=sys.stderr)
    ratios = [n / o for n, o in zip(res["new"], res["old"])]
    print(f"abnormal recovery of {args.mib} MiB: old {statistics.median(res['old']):.0f} MB/s, "
          f"new {statistics.median(res['new']):.0f} MB/s (medians); new/old per round "
          f"{', '.join(f'{x:.2f}' for x in ratios)}, median {statistics.median(ratios):.2f}x")
    print(crc_vs_zlib(args.store, seg))
    print(phases(args.store, seg))


_PHASES = r"""
import json, os, sys, time
store, seg = sys.argv[1], int(sys.argv[2])
import durability
from rmqstore.engine import dispatch as D
from rmqstore.engine import recovery as R
from rmqstore.engine.recovery import one_pass as O
with open(os.path.join(store, "abort"), "w") as fh:
    fh.write("0")
with open(os.path.join(store, "checkpoint"), "r+b") as fh:
    fh.write(bytes(4096))
spent = {}
def timed(mod, name):
    fn = getattr(mod, name)
    def run(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t
    setattr(mod, name, run)
for mod, name in ((R, "recover_after_crash"), (O, "QueueHints"), (O, "cut_derived_files"), (O, "scan_log"),
                  (D, "dispatch_batch"), (O, "flush_derived_files")):
    timed(mod, name)
got = durability.bench_recover(store, seg)
print(json.dumps(dict(spent, total=got["seconds"])))
"""


def phases(store: str, seg: int, rounds: int = 3) -> str:
    """Where the new tree's abnormal recovery (one walk of the log) spends its time, medians of
    ``rounds`` opens: reading the queues' hints, cutting the queues and index, the scan (which
    includes waiting for the dispatch thread), the dispatch thread's own time (overlapping the
    scan), and the flush."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "bench")]))
    runs = [json.loads(subprocess.run([sys.executable, "-c", _PHASES, store, str(seg)], capture_output=True, text=True,
                                      check=True, env=env).stdout.strip().splitlines()[-1]) for _ in range(rounds)]
    med = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}
    return (f"new tree, phases of one abnormal recovery (medians of {rounds}): total {med['total']:.2f} s; "
            f"hints {med.get('QueueHints', 0):.2f} s, cuts {med.get('cut_derived_files', 0):.2f} s, scan with "
            f"dispatch {med.get('scan_log', 0):.2f} s (dispatch thread {med.get('dispatch_batch', 0):.2f} s, "
            f"overlapping), flush {med.get('flush_derived_files', 0):.2f} s")


def crc_vs_zlib(store: str, seg: int, rounds: int = 5) -> str:
    """Seconds of the store's CRC check and of a plain zlib.crc32 loop over the same 100,000 bodies."""
    import mmap
    import time
    import zlib

    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np

    from rmqstore.format import message as M

    fd = os.open(os.path.join(store, "commitlog", "0" * 20), os.O_RDONLY)
    mm = mmap.mmap(fd, seg, prot=mmap.PROT_READ)
    starts, _, _ = M.walk_records(mm, 0, seg, 100_000)
    batch = M.decode_batch(np.frombuffer(mm, dtype=np.uint8), starts)
    pos, lens = batch.body_pos.tolist(), batch.body_len.tolist()
    ours, plain = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        assert M.body_crc_ok(mm, batch).all()
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        mv = memoryview(mm)
        [zlib.crc32(mv[a:a + n]) for a, n in zip(pos, lens)]
        plain.append(time.perf_counter() - t)
        del mv
    return (f"CRC check of {len(batch):,} bodies: body_crc_ok {statistics.median(ours):.3f} s, plain zlib.crc32 loop "
            f"{statistics.median(plain):.3f} s (medians of {rounds}); the check runs at "
            f"{statistics.median(plain) / statistics.median(ours):.2f}x the loop's speed")


if __name__ == "__main__":
    main()
