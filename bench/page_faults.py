"""What a first write into a fresh page of a shared file mapping costs, against faulting the same
pages in ahead with ``MappedFile.populate`` (``MADV_POPULATE_WRITE``, the GIL released).

Run:  .venv/bin/python bench/page_faults.py          (a 64 MiB segment, 3 repetitions)

Each repetition creates a fresh preallocated segment (as the store does) in bench/out and writes one
byte into every 4 KiB page through the mapping: once with nothing done before (every write takes a
page fault, in the writing thread, with the GIL held) and once after ``populate`` of the range. The
table (medians, per page) goes to stdout and, with the command, to bench/results/page_faults.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from rmqstore.io.mapped_file import MappedFile  # noqa: E402

PAGE = 4096


def _touch(mf: MappedFile, size: int) -> tuple[float, int]:
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = time.perf_counter()
    for off in range(0, size, PAGE):
        mf.mm[off] = 1
    return time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "page_faults.md"))
    args = ap.parse_args()
    size = args.mib << 20
    pages = size // PAGE
    work = os.path.join(ROOT, "bench", "out")
    os.makedirs(work, exist_ok=True)
    rows: dict[str, list] = {"first write, nothing done before": [], "populate (GIL released)": [],
                             "first write after populate": []}
    for _ in range(args.repeat):
        d = tempfile.mkdtemp(prefix="b-", dir=work)
        try:
            plain = MappedFile(os.path.join(d, "00000000000000000000"), size, create=True)
            secs, faults = _touch(plain, size)
            rows["first write, nothing done before"].append((secs, faults))
            plain.close()
            mf = MappedFile(os.path.join(d, f"{size:020d}"), size, create=True)
            t = time.perf_counter()
            if not mf.populate(0, size):
                sys.exit("MADV_POPULATE_WRITE is not supported here (Linux 5.14+)")
            rows["populate (GIL released)"].append((time.perf_counter() - t, 0))
            rows["first write after populate"].append(_touch(mf, size))
            mf.close()
        finally:
            shutil.rmtree(d, ignore_errors=True)
    lines = [f"| what ({args.mib} MiB, {pages} pages) | µs per page | page faults per page |", "|---|---:|---:|"]
    for name, res in rows.items():
        us = statistics.median(s for s, _ in res) / pages * 1e6
        fl = statistics.median(f for _, f in res) / pages
        lines.append(f"| {name} | {us:.2f} | {fl:.2f} |")
    table = "\n".join(lines)
    print(table)
    cmd = "python bench/page_faults.py" + "".join(f" {a}" for a in sys.argv[1:])
    with open(args.out, "w") as fh:
        fh.write(f"# First-write page faults vs populate\n\nProduced by `{cmd}` on "
                 f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {os.cpu_count()} CPUs, Linux "
                 f"{platform.release()}, medians of {args.repeat} repetitions, on `{work}`.\n\n{table}\n")


if __name__ == "__main__":
    main()
