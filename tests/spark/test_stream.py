"""Streaming reads of a store while another process writes it: every record exactly once across
micro-batches, never a half-written one (each row equals what MessageStore reads afterwards)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rmqstore import MessageStore

from tests.kit import record_offsets, row_of, spark_row

COLS = ["commitLogOffset", "topic", "queueId", "queueOffset", "storeSize", "bodyCRC", "body", "msgId", "keys",
        "uniqKey", "properties"]


def _collect_stream(spark, path: str, checkpoint: str, trigger: dict, **options):
    batches: list[tuple[int, list]] = []

    def sink(df, batch_id):
        batches.append((batch_id, [spark_row(r) for r in df.select(*COLS).collect()]))

    reader = spark.readStream.format("rocketmq").option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load(path).writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
         .trigger(**trigger).start())
    return q, batches


def _check(batches, path, cfg):
    seen = [r for _, rows in batches for r in rows]
    offs = [r["commitLogOffset"] for r in seen]
    assert len(offs) == len(set(offs)), "a record was emitted twice"
    with MessageStore.open(path, cfg, read_only=True) as st:
        assert sorted(offs) == record_offsets(st)
        for r in seen:
            want = row_of(st.look_message_by_offset(r["commitLogOffset"]))
            assert r == {k: want[k] for k in COLS}, r["commitLogOffset"]
    return seen


def test_stream_follows_a_live_writer(spark, tmp_path):
    from storegen import small_config

    path = str(tmp_path / "live")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent)] + sys.path))
    writer = subprocess.Popen([sys.executable, str(Path(__file__).parent / "live_writer.py"), path, "4000", "5"],
                              env=env)
    try:
        deadline = time.time() + 30
        while not os.path.isdir(os.path.join(path, "commitlog")) or not os.listdir(os.path.join(path, "commitlog")):
            assert time.time() < deadline and writer.poll() is None
            time.sleep(0.05)
        q, batches = _collect_stream(spark, path, str(tmp_path / "cp"), {"processingTime": "150 milliseconds"},
                                     maxBytesPerTrigger="96k")
        try:
            assert writer.wait(timeout=120) == 0
            cfg = small_config(commitlog=64 * 1024)
            with MessageStore.open(path, cfg, read_only=True) as st:
                total = len(record_offsets(st))
            while sum(len(rows) for _, rows in batches) < total and time.time() < deadline + 90:
                time.sleep(0.2)
            q.processAllAvailable()
        finally:
            q.stop()
    finally:
        writer.kill()
    seen = _check(batches, path, cfg)
    assert len(seen) == total == 4000
    assert len([b for b in batches if b[1]]) > 3  # the data arrived over several micro-batches


def test_available_now_in_capped_batches(spark, vectors, tmp_path):
    v = vectors["rollover"]
    q, batches = _collect_stream(spark, v.path, str(tmp_path / "cp"), {"availableNow": True},
                                 maxBytesPerTrigger="300k")
    q.awaitTermination(120)
    seen = _check(batches, v.path, v.config)
    assert len(seen) == len(v.messages())
    assert len([b for b in batches if b[1]]) == 4  # 1.1 MB of commitlog in 300 KB triggers
