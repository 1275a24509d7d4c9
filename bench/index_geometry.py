"""Inferring an index file's geometry from its contents: over a local mapping (``infer_geometry``, as
``layout.infer_config`` does) against through ranged reads of 16 MiB (``geometry_of`` with
``os.pread`` standing in for S3's ranged GETs, as ``spark.fs.index_geometry`` does), in alternating
rounds, each in a fresh process (wall time, peak RSS, bytes read):
``.venv/bin/python bench/index_geometry.py [--items N] [--rounds R]`` (RocketMQ's default geometry,
5,000,000 slots and 20,000,000 items: a 420 MB file, written to a temporary directory and removed)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from rmqstore.format import index_file as IX

SLOTS, ITEMS = 5_000_000, 20_000_000

_CHILD = """
import json, mmap, os, resource, sys, time
from rmqstore.format import index_file as IX
mode, path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
read = [0]
t = time.perf_counter()
if mode == "mapped":
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
        found = IX.infer_geometry(mm, size)
else:
    fd = os.open(path, os.O_RDONLY)
    def pread(pos, n):
        read[0] += n
        return os.pread(fd, n, pos)
    found = IX.geometry_of(pread, size, 16 << 20)
print(json.dumps({"found": found, "s": time.perf_counter() - t, "read_mb": read[0] >> 20,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10}))
"""


def write_index(path: str, n: int) -> None:
    """An index file of the default geometry with ``n`` items put in order (FORMAT.md §6.3)."""
    rng = np.random.default_rng(3)
    h = rng.integers(0, 2**31 - 1, n).astype(np.int64)
    slot, num = h % SLOTS, np.arange(1, n + 1)
    order = np.lexsort((num, slot))
    ss, nn = slot[order], num[order]
    same = ss[1:] == ss[:-1]
    prev = np.zeros(n + 1, np.int64)
    prev[nn[1:][same]] = nn[:-1][same]
    slots = np.zeros(SLOTS, ">i4")
    last = np.r_[~same, True]
    slots[ss[last]] = nn[last]
    items = np.zeros(n + 1, IX.ITEM_DTYPE)
    items["key_hash"][1:], items["phy_offset"][1:], items["prev_index"] = h, num * 100, prev
    with open(path, "wb") as f:
        f.write(IX.HEADER.pack(1, 2, 100, 100 * n, 0, n + 1))
        f.write(slots.tobytes())
        f.write(items.tobytes())
        f.truncate(IX.file_size(SLOTS, ITEMS))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=4_000_000, help="items written (of 20,000,000)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--write", metavar="PATH", help=argparse.SUPPRESS)  # (the child that writes the file)
    a = ap.parse_args()
    if a.write:
        return write_index(a.write, a.items)
    with tempfile.TemporaryDirectory() as d:  # (written by a child: a parent's peak RSS would pass to the runs)
        path = os.path.join(d, "20240101000000000")
        subprocess.run([sys.executable, __file__, "--write", path, "--items", str(a.items)], check=True)
        size = IX.file_size(SLOTS, ITEMS)
        runs: dict[str, list[dict]] = {"mapped": [], "ranged": []}
        for _ in range(a.rounds):
            for mode in runs:
                out = subprocess.run([sys.executable, "-c", _CHILD, mode, path, str(size)], check=True,
                                     capture_output=True, text=True).stdout
                runs[mode].append(json.loads(out))
    for mode, rs in runs.items():
        assert all(tuple(r["found"]) == (SLOTS, ITEMS) for r in rs), rs
        print(f"{mode}: median {statistics.median(r['s'] for r in rs):.3f} s, peak RSS {max(r['rss_mb'] for r in rs)} MB,"
              f" read {rs[0]['read_mb']} MB")
    ratios = [r["s"] / m["s"] for m, r in zip(runs["mapped"], runs["ranged"])]
    print(f"ranged/mapped per round: {', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f})")


if __name__ == "__main__":
    main()
