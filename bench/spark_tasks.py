"""Per-task timing of the Spark rebuild's jobs, from Spark's own REST API (the UI enabled for this).

Not collected by pytest. Usage::

    .venv/bin/python bench/spark_tasks.py [--store DIR] [--master local[2]] [--runs 3]

Runs the rebuild ``--runs`` times in one session (the first warms it up) and prints, for the last
run's two jobs (dispatch, then write), each task's launch time, duration, run time, deserialisation,
result serialisation, JVM GC and scheduler delay: whether the tasks are balanced and how much of a
job is Spark's own overhead.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spark_bench  # noqa: E402  (also puts tests/spark on the path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default=os.path.join(spark_bench.ROOT, "bench", "out", "prebuilt-spark-1000000", "store"))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from pyspark.sql import SparkSession

    from rmqstore.layout import infer_config
    from rmqstore.spark.jobs import get_spark, rebuild

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # the session get_spark then reuses, with the UI (and its REST API) on
    SparkSession.builder.master(args.master).appName("rmqstore-tasks").config("spark.ui.enabled", "true") \
        .config("spark.ui.showConsoleProgress", "false").getOrCreate()
    spark = get_spark(args.master)
    cfg = infer_config(args.store, spark_bench.bench_config())
    out_root = tempfile.mkdtemp(prefix="spark-tasks-")
    try:
        for i in range(args.runs):
            out = os.path.join(out_root, str(i))
            r = rebuild(spark, args.store, out, cfg)
            shutil.rmtree(out)
        print(f"{args.master}, last of {args.runs} runs: {r['seconds']:.2f} s, steps "
              + ", ".join(f"{k} {v:.2f} s" for k, v in r["steps"].items()))
        sc = spark.sparkContext
        api = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"
        stages = sorted(json.load(urllib.request.urlopen(f"{api}/stages")), key=lambda s: s["stageId"])[-2:]
        print("\n| job | task | launched | duration (ms) | run | deserialise | result serialise | GC | scheduler delay |")
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
        for job, s in zip(("dispatch", "write"), stages):
            tasks = json.load(urllib.request.urlopen(f"{api}/stages/{s['stageId']}/{s['attemptId']}/taskList?length=1000"))
            for t in sorted(tasks, key=lambda t: t["index"]):
                m = t.get("taskMetrics", {})
                print(f"| {job} | {t['index']} | {t['launchTime'][11:23]} | {t['duration']} | {m.get('executorRunTime')} | "
                      f"{m.get('executorDeserializeTime')} | {m.get('resultSerializationTime')} | {m.get('jvmGcTime')} | "
                      f"{t.get('schedulerDelay')} |")
    finally:
        spark.stop()
        shutil.rmtree(out_root, ignore_errors=True)


if __name__ == "__main__":
    main()
