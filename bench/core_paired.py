"""The store's core rows, old tree against new tree, in paired alternating rounds (issue 14's table).

Not collected by pytest. Usage (from the new tree's root)::

    .venv/bin/python bench/core_paired.py --old OLD_TREE --new NEW_TREE [--rounds 5] [--quick] [--workdir DIR]

(e.g. ``git worktree add /tmp/old c387f73`` for OLD_TREE, ``.`` for NEW_TREE). Rows:

* put_message: msgs/s, 128-byte bodies with one key, one thread, dispatcher running (harness ``rmq_put``);
* put_messages(256): msgs/s, the same messages in batches of 256 (harness ``rmq_put``);
* dispatch: records/s of ``MessageStore.dispatch()`` into consume queues and index, timed alone: a fresh
  store is filled with ``put_messages(256)`` while its dispatcher is shut down (as the harness's
  ``rmq_put(dispatch=False)`` does), then everything is dispatched in the calling thread;
* get_message: msgs/s pulling every queue in batches of 32 (harness ``rmq_pull``, read-only open);
* query: ``query_message`` by key (exact), queries/s (harness ``rmq_query``); get_message and query read
  one store of keyed 128-byte messages (harness ``_prebuilt``) built once;
* recovery: MB/s of abnormal recovery (``abort`` file, zeroed checkpoint: every record CRC-checked and
  re-dispatched), one segment of 1 KiB records (``durability.build_store``/``bench_recover``, as
  ``recovery_paired.py``), built once and reset before every open;
* Spark rebuild: MB/s of commitlog, ``rmqstore.spark.jobs.rebuild`` on local[2] (new SparkSession per
  child, one warm-up run, then the median of the timed runs) over a generated store
  (``tests/spark/storegen.py``, as ``spark_bench.py``) built once.

Every measurement is a fresh child process (this file with ``--child``) whose ``PYTHONPATH`` and
``sys.path`` start with the tree's ``src`` (Spark's Python workers inherit it; the child checks where
``rmqstore`` was imported from, in the driver and in a worker). The measuring code is this tree's
``bench/`` for both trees, so only the library differs. Stores are built once, by the new tree. In each
round every row runs in both trees back to back, old first on even rounds and new first on odd ones;
ratios are new/old per round. Peak RSS: the child's ``ru_maxrss`` (``os.wait4``); for Spark the whole
process tree (driver, JVM, Python workers) sampled every 0.1 s.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = ("put_message", "put_messages(256)", "dispatch", "get_message", "query", "recovery", "spark_rebuild")
UNITS = {"recovery": "MB/s", "spark_rebuild": "MB/s", "query": "queries/s", "dispatch": "records/s"}
FULL = dict(put=200_000, batch=500_000, dispatch=1_000_000, prebuilt=1_000_000, queries=20_000,
            recovery_mib=1024, spark_msgs=800_000, spark_runs=3)
QUICK = dict(put=50_000, batch=200_000, dispatch=200_000, prebuilt=200_000, queries=5_000,
             recovery_mib=128, spark_msgs=200_000, spark_runs=1)
# seconds per child on the 2-core machine (for the printed estimate): fixed start-up + per unit
COST = dict(put=(1.5, 2.5e-5), batch=(1.5, 1.2e-5), dispatch=(1.5, 1.2e-5), prebuilt=(1.5, 1.0e-5),
            queries=(2.5, 3e-5), recovery_mib=(1.5, 4e-3), spark_msgs=(12.0, 5e-6))


# ------------------------------------------------------------------------------------------------
# child side: one measurement of one tree, a JSON line on stdout
# ------------------------------------------------------------------------------------------------

def _child_imports(tree: str):
    """This tree's library first on the path, then this file's bench/ helpers (harness, durability)."""
    src = os.path.join(tree, "src")
    sys.path.insert(0, src)
    import rmqstore

    assert rmqstore.__file__.startswith(src + os.sep), (rmqstore.__file__, src)
    sys.path.insert(1, HERE)
    import harness

    while sys.path[0] != src:  # harness puts its own tree's src first: the library stays the tree's
        sys.path.pop(0)
    return harness


def _dispatch(H, n: int) -> dict:
    from rmqstore import MessageStore

    d = H._tmp()
    msgs = H._messages(n, 128, True, 256)
    want = sum(m.queue_id == 0 for m in msgs)
    try:
        with MessageStore.open(d, H._cfg()) as st:
            st.reput.shutdown()  # the dispatcher off before the first append (harness rmq_put(dispatch=False))
            for i in range(0, n, 256):
                assert st.put_messages(msgs[i:i + 256]).ok
            msgs.clear()
            assert st.get_max_offset_in_queue("Bench", 0) == 0
            secs = H._timed(st.dispatch)
            assert st.get_max_offset_in_queue("Bench", 0) == want
        return {"ops": n, "seconds": secs}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _recovery(store: str, seg: int) -> dict:
    import durability

    with open(os.path.join(store, "abort"), "w") as fh:  # the worst crash, as recovery_paired.py's child
        fh.write("0")
    with open(os.path.join(store, "checkpoint"), "r+b") as fh:
        fh.write(bytes(4096))
    r = durability.bench_recover(store, seg)
    assert r["mode"] == "abnormal", r
    return {"ops": r["bytes"] / 1e6, "seconds": r["seconds"], "records": r["records"]}


def _spark_rebuild(store: str, runs: int, tree: str) -> dict:
    sys.path.insert(1, os.path.join(os.path.dirname(HERE), "tests", "spark"))
    import spark_bench
    from rmqstore.layout import infer_config
    from rmqstore.spark.jobs import get_spark, rebuild

    cfg = infer_config(store, spark_bench.bench_config())
    spark = get_spark("local[2]", app_name="rmqstore-core-paired")
    out_root = tempfile.mkdtemp(prefix="spark-out-")
    try:
        where = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("rmqstore").__file__).collect()[0]
        assert where.startswith(os.path.join(tree, "src") + os.sep), f"a Python worker imported {where}"
        got = []
        for i in range(runs + 1):  # the first run warms the session up
            out = os.path.join(out_root, str(i))
            t = time.perf_counter()
            r = rebuild(spark, store, out, cfg)
            got.append((time.perf_counter() - t, r["end_offset"], r["records"]))
            shutil.rmtree(out)
        secs, nbytes, records = sorted(got[1:])[(runs - 1) // 2]
        return {"ops": nbytes / 1e6, "seconds": secs, "records": records}
    finally:
        spark.stop()
        shutil.rmtree(out_root, ignore_errors=True)


def child(row: str, tree: str, p: dict) -> dict:
    H = _child_imports(tree)
    if row == "put_message":
        return H.rmq_put(p["put"], 128, True)
    if row == "put_messages(256)":
        return H.rmq_put(p["batch"], 128, True, 1, 256)
    if row == "dispatch":
        return _dispatch(H, p["dispatch"])
    if row == "get_message":
        r = H.rmq_pull(p["prebuilt_path"])
        assert r["ops"] == p["prebuilt"], r
        return r
    if row == "query":
        return H.rmq_query(p["prebuilt_path"], p["prebuilt"], p["queries"], True)
    if row == "recovery":
        return _recovery(p["recovery_path"], p["recovery_mib"] << 20)
    if row == "spark_rebuild":
        return _spark_rebuild(p["spark_path"], p["spark_runs"], tree)
    if row == "build":
        return _build(H, p)
    raise ValueError(row)


def _build(H, p: dict) -> dict:
    """The shared stores, written by the new tree, each once (a ``.complete`` marker)."""
    import durability

    work = os.environ["RMQ_BENCH_DIR"]
    t = [time.monotonic()]
    H._prebuilt(p["prebuilt"], 128, "q")
    t.append(time.monotonic())
    rec = os.path.join(work, f"recovery-{p['recovery_mib']}")
    if not os.path.exists(os.path.join(rec, ".complete")):
        shutil.rmtree(rec, ignore_errors=True)
        durability.build_store(rec, p["recovery_mib"] << 20)
        open(os.path.join(rec, ".complete"), "w").close()
    t.append(time.monotonic())
    spark = os.path.join(work, f"spark-{p['spark_msgs']}")
    if not os.path.exists(os.path.join(spark, ".complete")):
        shutil.rmtree(spark, ignore_errors=True)
        sys.path.insert(1, os.path.join(os.path.dirname(HERE), "tests", "spark"))
        import spark_bench
        from storegen import generate

        generate(os.path.join(spark, "store"), p["spark_msgs"], spark_bench.bench_config(), batch=256)
        open(os.path.join(spark, ".complete"), "w").close()
    t.append(time.monotonic())
    return {"ops": 0, "seconds": t[-1] - t[0], "steps": [round(b - a, 1) for a, b in zip(t, t[1:])]}


# ------------------------------------------------------------------------------------------------
# parent side
# ------------------------------------------------------------------------------------------------

def run_child(row: str, tree: str, params: dict, work: str) -> dict:
    """One measurement in a fresh interpreter; its result with ``rate`` and ``rss_mb`` added."""
    from spark_bench import tree_rss  # (bench/ is this script's directory)

    os.sync()  # what earlier children left dirty is written back before, not during, this one
    env = dict(os.environ, PYTHONPATH=os.path.join(tree, "src"), RMQ_BENCH_DIR=work, TMPDIR=work)
    err_path = os.path.join(work, "child.stderr")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", row, "--tree", tree, "--params", json.dumps(params)]
    t0 = time.monotonic()
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, text=True)
        peak, done = [0], threading.Event()
        if row == "spark_rebuild":
            def sample():
                while not done.is_set():
                    peak[0] = max(peak[0], tree_rss(proc.pid))
                    time.sleep(0.1)
            threading.Thread(target=sample, daemon=True).start()
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        done.set()
    if proc.returncode != 0:
        with open(err_path) as fh:
            tail = fh.read()[-4000:]
        raise RuntimeError(f"{row} in {tree} failed ({proc.returncode}):\n{tail}")
    res = json.loads(out.strip().splitlines()[-1])
    res["rate"] = res["ops"] / res["seconds"] if res["seconds"] else 0.0
    res["rss_mb"] = max(peak[0] / 2**20, usage.ru_maxrss / 1024)
    res["wall"] = time.monotonic() - t0
    return res


def _rev(tree: str) -> str:
    def git(*a):
        return subprocess.run(["git", "-C", tree, *a], capture_output=True, text=True).stdout.strip()
    rev = git("rev-parse", "--short", "HEAD") or "?"
    return rev + ("+dirty" if git("status", "--porcelain", "--untracked-files=no", "--", "src") else "")


def estimate_seconds(p: dict, rounds: int) -> float:
    per_round = 0.0
    for key, row in (("put", 1), ("batch", 1), ("dispatch", 1), ("prebuilt", 1), ("queries", 1),
                     ("recovery_mib", 1), ("spark_msgs", p["spark_runs"] + 1)):
        fixed, unit = COST[key]
        per_round += 2 * (fixed + unit * p[key] * row)
    per_round += 2 * COST["prebuilt"][1] * p["prebuilt"]  # get_message pulls them all
    build = 40e-6 * p["prebuilt"] + 0.05 * p["recovery_mib"] + 75e-6 * p["spark_msgs"]
    return build + rounds * per_round


def table(res: dict, p: dict) -> list[str]:
    names = {"put_message": "put_message (1 thread, 128 B, 1 key)", "put_messages(256)": "put_messages(256)",
             "dispatch": f"dispatch ({p['dispatch']:,} records into CQ + index)",
             "get_message": f"get_message (pull 32, {p['prebuilt']:,} msgs)",
             "query": f"query_message by key ({p['prebuilt']:,} keys)",
             "recovery": f"recovery, abnormal ({p['recovery_mib']} MiB of 1 KiB records)",
             "spark_rebuild": f"Spark rebuild, local[2] ({res['spark_rebuild']['new'][0]['ops']:.0f} MB commitlog)"}
    lines = ["| row | unit | old median | new median | new/old (median of per-round ratios) | ratio min–max "
             "| peak RSS MB old / new |", "|---|---|---:|---:|---:|---:|---:|"]
    for row in ROWS:
        old, new = res[row]["old"], res[row]["new"]
        ratios = [n["rate"] / o["rate"] for o, n in zip(old, new)]
        o, n = (statistics.median(x["rate"] for x in v) for v in (old, new))
        lines.append(f"| {names[row]} | {UNITS.get(row, 'msgs/s')} | {o:,.0f} | {n:,.0f} | "
                     f"{statistics.median(ratios):.2f} | {min(ratios):.2f}–{max(ratios):.2f} | "
                     f"{max(x['rss_mb'] for x in old):,.0f} / {max(x['rss_mb'] for x in new):,.0f} |")
    rec = statistics.median(x["rate"] for x in res["recovery"]["new"])
    size = "" if p["recovery_mib"] >= 1024 else f" (measured on {p['recovery_mib']} MiB, not the target's 1 GiB)"
    lines += ["", f"Recovery target (abnormal recovery of 1 GiB of 1 KiB records at >= 500 MB/s): new tree "
                  f"{rec:,.0f} MB/s, {'met' if rec >= 500 else 'not met'}{size}."]
    return lines


def measure(a, p: dict, work: str) -> dict:
    res: dict = {row: {"old": [], "new": []} for row in ROWS}
    t0 = time.monotonic()
    for r in range(a.rounds):
        for row in ROWS:
            order = [("old", a.old), ("new", a.new)]
            for which, tree in (order if r % 2 == 0 else order[::-1]):
                got = run_child(row, tree, p, work)
                res[row][which].append(got)
                print(f"round {r + 1} {row} {which}: {got['rate']:,.1f} {UNITS.get(row, 'msgs/s')} "
                      f"(child {got['wall']:.1f} s)", file=sys.stderr)
        spent = time.monotonic() - t0
        print(f"round {r + 1} done after {spent / 60:.1f} min; projected total {spent / (r + 1) * a.rounds / 60:.1f} "
              "min of rounds", file=sys.stderr)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", help="a checkout of the tree before the change")
    ap.add_argument("--new", help="a checkout of the tree after it (its bench/ is not used: this file's is)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes (recovery of 128 MiB): a smoke run")
    ap.add_argument("--workdir", help="stores and scratch (default: a new directory in /tmp, removed at the end; "
                                      "a given one is kept, and its stores are reused by the next run)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    ap.add_argument("--params", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.tree, json.loads(a.params))))
        return
    if not (a.old and a.new):
        ap.error("--old and --new are required")
    a.old, a.new = os.path.abspath(a.old), os.path.abspath(a.new)
    p = dict(QUICK if a.quick else FULL)
    print(f"expected duration: about {estimate_seconds(p, a.rounds) / 60:.0f} min on an idle 2-core machine "
          "(stores built once, then the rounds; a loaded machine takes longer: after each round the projection from "
          "the time measured is printed)", file=sys.stderr, flush=True)
    work = a.workdir or tempfile.mkdtemp(prefix="core-paired-", dir="/tmp")
    os.makedirs(work, exist_ok=True)
    work = os.path.abspath(work)
    p.update(prebuilt_path=os.path.join(work, f"prebuilt-q-{p['prebuilt']}-128"),
             recovery_path=os.path.join(work, f"recovery-{p['recovery_mib']}"),
             spark_path=os.path.join(work, f"spark-{p['spark_msgs']}", "store"))
    t0, load0 = time.monotonic(), os.getloadavg()[0]
    try:
        b = run_child("build", a.new, p, work)
        print(f"stores ready in {b['seconds']:.0f} s (get/query, recovery, Spark: {b['steps']} s)", file=sys.stderr)
        res = measure(a, p, work)
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)
    cmd = " ".join(["python", "bench/core_paired.py"] + sys.argv[1:])
    print(f"`{cmd}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.monotonic() - t0:.0f} s): "
          f"old {_rev(a.old)}, new {_rev(a.new)}, {a.rounds} rounds, {os.cpu_count()} CPUs, 1-minute load "
          f"average {load0:.1f} before and {os.getloadavg()[0]:.1f} after.\n")
    print("\n".join(table(res, p)))


if __name__ == "__main__":
    main()
