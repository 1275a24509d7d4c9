"""Spark pipeline benchmark: source throughput and rebuild time on local[1] vs local[2], against the
in-process single-threaded rebuild (engine/rebuild.py), with peak RSS beside every number.

Not collected by pytest. Usage::

    .venv/bin/python bench/spark_bench.py [--store DIR | --messages N] [--repeat R] [--out bench/results/spark.md]

Without ``--store`` a store is generated (tests/spark/storegen.py: 4 topics x 4 queues, tags, 1-3
keys, UNIQ_KEYs, 1-300 byte bodies, 32 MiB commitlog segments). Every measurement runs in a fresh
subprocess (a new SparkSession for Spark ones) whose whole process tree (driver, JVM, Python
workers) is sampled for RSS; Spark figures are taken after one warm-up run in the same session and
are the median of ``--repeat`` runs (the in-process rebuild: the median of ``--repeat`` runs). The table goes to stdout and to ``--out`` with the command line.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "spark"))


def bench_config():
    from storegen import small_config

    return small_config(commitlog=32 << 20).replace(mapped_file_size_consume_queue=6_000_000,
                                                    max_hash_slot_num=500_000, max_index_num=2_000_000)


# ------------------------------------------------------------------------------------------------
# Child side: one measurement, result as JSON on the last line of stdout
# ------------------------------------------------------------------------------------------------

def child(kind: str, store: str, master: str | None, repeat: int) -> dict:
    from rmqstore.layout import infer_config

    cfg = infer_config(store, bench_config())
    out_root = tempfile.mkdtemp(prefix="spark-bench-out-")
    try:
        if kind == "inprocess_rebuild":
            from rmqstore.rebuild import rebuild

            runs = []
            for i in range(repeat):
                out = os.path.join(out_root, str(i))
                runs.append(rebuild(store, out, cfg))
                shutil.rmtree(out)
            mid = _median(runs, lambda r: r.seconds)
            return {"seconds": mid.seconds, "records": mid.records, "bytes": mid.end_offset}
        from rmqstore.spark.jobs import get_spark, read_store, rebuild

        spark = get_spark(master, app_name="rmqstore-bench")
        try:
            if kind == "source":
                def once():
                    t = time.perf_counter()
                    df = read_store(spark, store, cfg)
                    df.write.format("noop").mode("overwrite").save()  # every column of every row, no output
                    return time.perf_counter() - t
                once()  # warm-up
                secs = sorted(once() for _ in range(repeat))[(repeat - 1) // 2]
                records = read_store(spark, store, cfg, schema="commitLogOffset BIGINT").count()
                return {"seconds": secs, "records": records, "bytes": _data_bytes(store, cfg)}
            if kind == "spark_rebuild":
                results = []
                for i in range(repeat + 1):  # the first one warms the session up
                    out = os.path.join(out_root, str(i))
                    results.append(rebuild(spark, store, out, cfg))
                    shutil.rmtree(out)
                mid = _median(results[1:], lambda r: r["seconds"])
                return {"seconds": mid["seconds"], "records": mid["records"], "bytes": mid["end_offset"],
                        "steps": mid["steps"]}
        finally:
            spark.stop()
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    raise ValueError(kind)


def _median(runs: list, key):
    """The median run (the lower one of an even count)."""
    return sorted(runs, key=key)[(len(runs) - 1) // 2]


def _data_bytes(store: str, cfg) -> int:
    from rmqstore import MessageStore

    with MessageStore.open(store, cfg, read_only=True) as st:
        return st.max_phy_offset - st.min_phy_offset


# ------------------------------------------------------------------------------------------------
# Parent side
# ------------------------------------------------------------------------------------------------

def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its children (0 when it is gone)."""
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p] + p.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def measure(kind: str, store: str, master: str | None, repeat: int) -> dict:
    load_before = os.getloadavg()[0]
    cmd = [sys.executable, __file__, "--child", kind, "--store", store, "--repeat", str(repeat)]
    if master:
        cmd += ["--master", master]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = 0
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, _ = proc.communicate()
    done.set()
    th.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} {master or ''} failed:\n{out}")
    res = json.loads(out.strip().splitlines()[-1])
    res["peak_rss_mb"] = peak / 2**20
    res["load"] = (load_before, os.getloadavg()[0])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", help="existing store (default: generate one)")
    ap.add_argument("--messages", type=int, default=1_000_000, help="messages of the generated store")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (the median is kept)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "spark.md"))
    ap.add_argument("--only", choices=["rebuild"], help="measure only the Spark rebuild (local[1], local[2])")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.store, args.master, args.repeat)))
        return
    env = "".join(f"{k}={os.environ[k]} " for k in ("RMQSTORE_MALLOC_TUNING",) if k in os.environ)
    command = env + "python " + " ".join([os.path.relpath(__file__, ROOT)] + sys.argv[1:])
    tmp = None
    store = args.store
    if store is None:
        from storegen import generate

        tmp = tempfile.mkdtemp(prefix="spark-bench-store-")
        store = os.path.join(tmp, "store")
        t = time.perf_counter()
        info = generate(store, args.messages, bench_config(), batch=256)
        print(f"generated {info['messages']:,} messages in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    try:
        rows = []
        plan = [("inprocess_rebuild", None), ("source", "local[1]"), ("source", "local[2]"),
                ("spark_rebuild", "local[1]"), ("spark_rebuild", "local[2]")]
        if args.only == "rebuild":
            plan = [p for p in plan if p[0] == "spark_rebuild"]
        for kind, master in plan:
            print(f"measuring {kind} {master or ''} ...", file=sys.stderr)
            rows.append((kind, master, measure(kind, store, master, args.repeat)))
        text = report(rows, store, command)
        print(text)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def report(rows, store: str, command: str) -> str:
    import platform

    data_mb = rows[0][2]["bytes"] / 1e6
    records = rows[0][2]["records"]
    lines = [
        "# Spark pipeline benchmark",
        "",
        f"Produced by `{command}` on {time.strftime('%Y-%m-%d %H:%M %Z')}: {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {_spark_version()}. Store: {records:,} records, "
        f"{data_mb:,.1f} MB of commitlog data{'' if 'spark-bench-store' in store else ' (' + store + ')'}.",
        "Spark rows are warm (the median of the runs after one warm-up in the same session). Peak RSS is the "
        "whole process tree (driver, JVM, Python workers). The machine is shared: the 1-minute load "
        "average around each measurement is given (2 CPUs; a load above 2 means other processes "
        "competed for them).",
        "",
        "| what | master | seconds | MB/s | records/s | peak RSS (MB) | load avg before/after |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    names = {"inprocess_rebuild": "rebuild, in-process (engine/rebuild.py)", "source": "source full scan (noop sink)",
             "spark_rebuild": "rebuild, Spark"}
    by = {}
    for kind, master, r in rows:
        by[(kind, master)] = r
        lines.append(f"| {names[kind]} | {master or '-'} | {r['seconds']:.2f} | {data_mb / r['seconds']:,.1f} | "
                     f"{r['records'] / r['seconds']:,.0f} | {r['peak_rss_mb']:,.0f} | "
                     f"{r['load'][0]:.1f} / {r['load'][1]:.1f} |")
    r1, r2 = by[("spark_rebuild", "local[1]")], by[("spark_rebuild", "local[2]")]
    ratio = r1["seconds"] / r2["seconds"]
    lines += [
        "",
        f"* Rebuild local[2] vs local[1]: **{ratio:.2f}x** faster (target from the performance issue: 1.6x; "
        f"{'met' if ratio >= 1.6 else 'not met'}).",
    ]
    if ("source", "local[1]") in by:
        s1, s2 = by[("source", "local[1]")], by[("source", "local[2]")]
        lines.append(f"* Source scan local[2] vs local[1]: {s1['seconds'] / s2['seconds']:.2f}x.")
    if ("inprocess_rebuild", None) in by:
        inproc = by[("inprocess_rebuild", None)]
        lines.append(f"* Spark rebuild local[2] vs the in-process rebuild: {inproc['seconds'] / r2['seconds']:.2f}x "
                     f"({'faster' if r2['seconds'] < inproc['seconds'] else 'slower'}).")
    lines += [f"* Rebuild steps (of the median run), local[1]: {_steps(r1)}; local[2]: {_steps(r2)}.", ""]
    return "\n".join(lines)


def _steps(r) -> str:
    return ", ".join(f"{k} {v:.2f}s" for k, v in r.get("steps", {}).items())


def _spark_version() -> str:
    try:
        import pyspark

        return f"PySpark {pyspark.__version__}"
    except ImportError:
        return "PySpark missing"


if __name__ == "__main__":
    main()
