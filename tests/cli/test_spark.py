"""`rmqstore spark rebuild|verify|export|stats` and `rmqstore demo` with its Spark step: one test
each, in-process (they share one local SparkSession), on the small `basic` vector store."""
from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.spark

MASTER = "local[2]"


@pytest.fixture(scope="module", autouse=True)
def _spark_available():
    pytest.importorskip("pyspark")
    if not any(os.access(os.path.join(p, "java"), os.X_OK) for p in os.environ.get("PATH", "").split(os.pathsep)) \
            and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java is needed for Spark")


def test_spark_rebuild(run, vectors, tmp_path, docref):
    vs = vectors.load("basic")
    got = run.json("spark", "rebuild", tmp_path / "out", "--store", vs.store, "--master", MASTER)
    docref.same_shape(docref.doc_json("spark rebuild"), got, "spark rebuild")
    assert got["records"] == len(vs.expected["putResults"])
    assert got["end_offset"] == vs.expected["api"]["maxPhyOffset"]
    assert got["consume_queues"] == sum(len(q) for q in vs.expected["api"]["consumeQueues"].values())
    assert vectors.tree_hashes(tmp_path / "out" / "consumequeue") == vectors.tree_hashes(vs.store / "consumequeue")
    ours = sorted(os.listdir(tmp_path / "out" / "index"))
    theirs = sorted(os.listdir(vs.store / "index"))
    assert got["index_files"] == len(theirs) == len(ours)
    for a, b in zip(theirs, ours):  # by position: index file names are creation times
        assert (vs.store / "index" / a).read_bytes() == (tmp_path / "out" / "index" / b).read_bytes()
    # the same output directory again: refused before any Spark work, a usage error (not an I/O one)
    before = vectors.tree_hashes(tmp_path / "out")
    assert "already holds" in run.fails(2, "spark", "rebuild", tmp_path / "out", "--store", vs.store,
                                        "--master", MASTER).stderr
    assert vectors.tree_hashes(tmp_path / "out") == before


def test_spark_stats(run, truth, docref):
    t = truth("basic")
    got = run.json("spark", "stats", "--top", 3, "--store", t.store, "--master", MASTER)
    docref.same_shape(docref.doc_json("spark stats"), got, "spark stats")
    assert got["records"] == len(t.rows) and got["bytes"] == sum(r["record"]["storeSize"] for r in t.rows)
    per_queue: dict = {}
    for r in t.rows:
        per_queue.setdefault((r["topic"], r["queue_id"]), []).append(r)
    assert [(q["topic"], q["queue_id"]) for q in got["queues"]] == sorted(per_queue)
    for q in got["queues"]:
        rows = per_queue[(q["topic"], q["queue_id"])]
        assert q["messages"] == len(rows) and q["bytes"] == sum(r["record"]["storeSize"] for r in rows)
        assert q["first_store_timestamp"] == min(r["store_ts"] for r in rows)
        assert q["last_store_timestamp"] == max(r["store_ts"] for r in rows)
    counts: dict = {}
    for r in t.rows:
        for k in r["props"].get("KEYS", "").split(" "):
            if k:
                counts[(r["topic"], k)] = counts.get((r["topic"], k), 0) + 1
    best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    assert [(k["topic"], k["key"], k["messages"]) for k in got["top_keys"]] == [(*tk, n) for tk, n in best]
    # the table mode renders this same result (no second Spark job): times as local time + epoch ms
    from rmqstore.cli.render import Output, local_time, render_mapping

    out = Output(json_mode=False)
    with out.console.capture() as cap:
        render_mapping(out, "stats", got)
    table = cap.get()
    first = got["first_store_timestamp"]
    assert local_time(first) in table and f"({first})" in table and best[0][0][1] in table
    assert all(str(q["bytes"]) in table for q in got["queues"])


def test_spark_export(run, truth, tmp_path, docref):
    pq = pytest.importorskip("pyarrow.parquet")
    t = truth("basic")
    out = tmp_path / "export"
    got = run.json("spark", "export", out, "--include-body", "--store", t.store, "--master", MASTER)
    docref.same_shape(docref.doc_json("spark export"), got, "spark export")
    assert got["rows"] == len(t.rows)
    table = pq.read_table(out).to_pylist()
    by_phy = {r["commitLogOffset"]: r for r in table}
    assert sorted(by_phy) == [r["phy"] for r in t.rows]
    for r in t.rows:
        row = by_phy[r["phy"]]
        assert (row["topic"], row["queueId"], row["queueOffset"]) == (r["topic"], r["queue_id"], r["queue_offset"])
        assert bytes(row["body"] or b"") == r["body"] and row["msgId"] == r["msg_id"]
    assert "already exists" in run.fails(2, "spark", "export", out, "--store", t.store, "--master", MASTER).stderr


def test_demo_with_spark_stats(run, tmp_path, docref):
    d = tmp_path / "demo"
    got = run.json("demo", "--dir", d, "--messages", 2000, "--master", MASTER)
    assert got["ok"] is True and got["messages"] == 2000
    docref.same_shape(docref.doc_json("demo"), got, "demo")
    docref.same_shape(docref.doc_json("spark stats"), got["spark_stats"], "demo.spark_stats")
    stats = got["spark_stats"]
    assert stats["records"] == 2000
    fast = run.json("stats", "--store", d)  # the consume-queue statistics agree with the full scan
    assert stats["bytes"] == fast["totals"]["bytes"] == got["bytes_written"]
    assert {(q["topic"], q["queue_id"], q["messages"]) for q in stats["queues"]} == \
        {(q["topic"], q["queue_id"], q["messages"]) for q in fast["queues"]}
    # the table mode's short Spark section, from this same result (no second Spark job)
    from rmqstore.cli.main import spark_summary
    from rmqstore.cli.render import Output, kv_table

    out = Output(json_mode=False)
    with out.console.capture() as cap:
        out.print(kv_table("Spark stats", spark_summary(stats)))
    text = cap.get()
    assert "2,000" in text and all(f"{t['topic']} {t['messages']:,}" in text for t in stats["topics"])


def test_spark_verify(run, copy_store, truth, docref):
    t = truth("basic")
    clean = run.json("spark", "verify", "--store", t.store, "--master", MASTER)
    assert clean["ok"] is True and clean["findings"] == [] and clean["summary"]["problems"] == 0
    assert clean["summary"]["records"] == len(t.rows)
    store = copy_store("basic")
    victim = t.rows[9]
    seg = store / "commitlog" / "00000000000000000000"
    data = seg.read_bytes()
    at = data.index(victim["body"], victim["phy"], victim["phy"] + victim["record"]["storeSize"])
    with open(seg, "r+b") as fh:  # one body byte: the record's CRC no longer matches
        fh.seek(at)
        fh.write(bytes([data[at] ^ 0x01]))
    r = run.fails(12, "spark", "verify", "--json", "--store", store, "--master", MASTER)
    got = json.loads(r.stdout)
    docref.same_shape(docref.doc_json("spark verify"), got, "spark verify")
    assert got["ok"] is False and got["summary"]["records"] == len(t.rows) - 1
    assert [(f["kind"], f["path"], f["offset"]) for f in got["findings"]] == [("record_crc", str(seg), victim["phy"])]
    # the same finding as the in-process verify
    local = json.loads(run.fails(12, "verify", "--json", "--store", store).stdout)
    assert [(f["kind"], f["path"], f["offset"]) for f in local["findings"]] == \
        [(f["kind"], f["path"], f["offset"]) for f in got["findings"]]


def test_spark_jobs_over_several_stores(run, copy_store, truth):
    """Repeated --store: one answer per broker (directory names here) with totals; the exit code
    says whether any store has problems; stores sharing a name are refused before any Spark work."""
    t = truth("basic")
    damaged = copy_store("basic")
    seg = damaged / "commitlog" / "00000000000000000000"
    victim = t.rows[3]
    data = seg.read_bytes()
    at = data.index(victim["body"], victim["phy"], victim["phy"] + victim["record"]["storeSize"])
    with open(seg, "r+b") as fh:  # one body byte: the record's CRC no longer matches
        fh.seek(at)
        fh.write(bytes([data[at] ^ 0x01]))
    got = json.loads(run.fails(12, "spark", "verify", "--json", "--limit", 5, "--store", damaged, "--store", t.store,
                               "--master", MASTER).stdout)
    per = got["summary"]["stores"]
    assert sorted(per) == ["basic-copy", "store"] and (per["store"]["problems"], per["basic-copy"]["problems"]) == (0, 1)
    assert got["summary"]["records"] == 2 * len(t.rows) - 1 and got["findings"][0]["path"] == str(seg)
    all_vectors = str(os.path.dirname(os.path.dirname(t.store))) + "/*/store"  # every vector store: all named "store"
    assert "several stores are named store" in run.fails(7, "spark", "stats", "--store", all_vectors).stderr
