"""``rmqstore export`` throughput per format, old tree against new tree in paired, alternating rounds.

Not collected by pytest. Usage::

    .venv/bin/python bench/export_formats.py [--messages 300032] [--rounds 5] [--old DIR] [--out FILE]

A store of ``--messages`` messages with 1,024-byte text bodies (printable ASCII without quote or
backslash) and one key each is written with
``put_messages`` into 128 MiB commitlog segments (kept in ``/tmp/rmqstore-export-bench`` between runs). Each
measurement is one export in a fresh subprocess (``export()`` of the tree's ``src/``), its peak RSS
from ``wait4``; MB/s is commitlog data over the export's own wall time. ``--old`` is a checkout of
the tree to compare with (e.g. ``git worktree add /tmp/old <rev>``); rounds alternate the order
(old first, then new first) so that drift on a shared machine hits both alike.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("parquet", "jsonl", "csv")

_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from rmqstore.export import export
r = export(sys.argv[2], sys.argv[3], sys.argv[4])
print(json.dumps({"messages": r.messages, "bytes": r.commitlog_bytes, "seconds": r.seconds, "out_bytes": r.out_bytes}))
"""


def make_store(path: str, n: int) -> None:
    from rmqstore import Message, MessageStore, MessageStoreConfig

    cfg = MessageStoreConfig().replace(mapped_file_size_commit_log=128 << 20)
    text = bytes(c for c in range(32, 127) if c not in b'"\\')  # printable ASCII that JSON need not escape
    body = (text * 11)[:1024]
    with MessageStore.open(path, cfg) as st:
        for start in range(0, n, 256):
            batch = [Message.create("BenchTopic", body, queue_id=(start // 256) % 4, keys=f"key-{i}")
                     for i in range(start, min(n, start + 256))]
            st.put_messages(batch)


def run_one(tree: str, store: str, fmt: str, out_dir: str) -> dict:
    out = os.path.join(out_dir, f"out.{fmt}")
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, os.path.join(tree, "src"), store, out, fmt],
                            stdout=subprocess.PIPE, text=True)
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"export {fmt} with {tree} failed")
    res = json.loads(stdout.strip().splitlines()[-1])
    res["peak_rss_mb"] = usage.ru_maxrss / 1024
    os.unlink(out)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=300_032)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--old", help="a checkout of the tree to compare with")
    ap.add_argument("--store", default="/tmp/rmqstore-export-bench/store")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "export.md"))
    args = ap.parse_args()
    command = "python " + " ".join([os.path.relpath(__file__, ROOT)] + sys.argv[1:])
    if not os.path.isdir(os.path.join(args.store, "commitlog")):
        sys.path.insert(0, str(ROOT / "src"))
        t = time.perf_counter()
        make_store(args.store, args.messages)
        print(f"store written in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    trees = [("new", str(ROOT))] + ([("old", args.old)] if args.old else [])
    out_dir = os.path.join(os.path.dirname(args.store), "out")
    os.makedirs(out_dir, exist_ok=True)
    runs: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for fmt in FORMATS:
            order = trees if r % 2 == 0 else list(reversed(trees))
            for name, tree in order:
                res = run_one(tree, args.store, fmt, out_dir)
                runs.setdefault((name, fmt), []).append(res)
                print(f"round {r + 1} {fmt} {name}: {res['bytes'] / res['seconds'] / 1e6:.1f} MB/s, "
                      f"{res['peak_rss_mb']:.0f} MB", file=sys.stderr)
    shutil.rmtree(out_dir, ignore_errors=True)
    text = report(runs, trees, command, args)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


def report(runs, trees, command: str, args) -> str:
    first = runs[("new", FORMATS[0])][0]
    lines = ["# rmqstore export: MB/s of commitlog per format", "",
             f"Produced by `{command}` on {time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} CPUs: "
             f"{first['messages']:,} messages, {first['bytes'] / 1e6:,.0f} MB of commitlog (1,024-byte bodies, "
             f"one key, 128 MiB segments); {args.rounds} rounds, median (min-max); peak RSS of the export process.",
             "", "| format | tree | MB/s median (min-max) | peak RSS MB | output MB |", "|---|---|---:|---:|---:|"]
    for fmt in FORMATS:
        for name, _ in trees:
            rs = runs[(name, fmt)]
            mbs = [x["bytes"] / x["seconds"] / 1e6 for x in rs]
            lines.append(f"| {fmt} | {name} | {statistics.median(mbs):.0f} ({min(mbs):.0f}-{max(mbs):.0f}) | "
                         f"{max(x['peak_rss_mb'] for x in rs):.0f} | {rs[0]['out_bytes'] / 1e6:.0f} |")
    if len(trees) > 1:
        lines += ["", "Paired ratio new/old per round (same round, adjacent runs):", ""]
        for fmt in FORMATS:
            ratios = [n["seconds"] and o["seconds"] / n["seconds"] for n, o in zip(runs[("new", fmt)], runs[("old", fmt)])]
            lines.append(f"* {fmt}: " + ", ".join(f"{x:.2f}x" for x in ratios) + f" (median {statistics.median(ratios):.2f}x)")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
