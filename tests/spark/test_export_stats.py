"""export (Parquet by topic and date) and stats, compared with what MessageStore reads."""
from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from datetime import datetime, timezone

import pytest

from rmqstore import MessageStore
from rmqstore.engine.index import IndexService
from rmqstore.errors import OutputExistsError
from rmqstore.format.hashes import index_key_hash
from rmqstore.layout import infer_config
from rmqstore.spark.jobs import export, stats

from tests.kit import store_records


def test_export_by_topic_and_date(spark, vectors, tmp_path):
    v = vectors["rollover"]
    out = str(tmp_path / "pq")
    res = export(spark, v.path, out, v.config, include_body=True)
    recs = store_records(v.path, v.config)
    assert res["rows"] == len(recs)
    parts = sorted(os.listdir(out))
    assert {p for p in parts if p.startswith("topic=")} == {f"topic={t}" for t in {r.topic for r in recs}}
    df = spark.read.parquet(out)
    got = {r.commitLogOffset: r for r in df.select("commitLogOffset", "topic", "date", "body", "msgId").collect()}
    days = {(r.topic, datetime.fromtimestamp(r.store_timestamp / 1000, tz=timezone.utc).strftime("%Y-%m-%d"))
            for r in recs}
    assert res["files"] == len(df.inputFiles()) == len(days)  # one file per topic and day
    for rec in recs:
        r = got[rec.phy_offset]
        day = datetime.fromtimestamp(rec.store_timestamp / 1000, tz=timezone.utc).strftime("%Y-%m-%d")
        assert (r.topic, str(r.date), bytes(r.body), r.msgId) == (rec.topic, day, rec.body, rec.msg_id)
    with pytest.raises(OutputExistsError, match="already exists"):
        export(spark, v.path, out, v.config)


def test_export_without_body(spark, vectors, tmp_path):
    v = vectors["basic"]
    res = export(spark, v.path, str(tmp_path / "pq"), v.config)
    df = spark.read.parquet(str(tmp_path / "pq"))
    assert "body" not in df.columns and res["rows"] == df.count() == len(v.messages())
    want = {r.phy_offset: r.properties for r in store_records(v.path, v.config)}
    assert {r.commitLogOffset: dict(r.properties) for r in df.select("commitLogOffset", "properties").collect()} == want


def _expected_stats(path, cfg, top):
    cfg = infer_config(path, cfg)
    recs = store_records(path, cfg)
    per_queue = defaultdict(list)
    for r in recs:
        per_queue[(r.topic, r.queue_id)].append(r)
    keys = Counter((r.topic, k) for r in recs if r.transaction_type != 0xC for k in r.keys)
    uniq = Counter(r.uniq_key for r in recs if r.uniq_key is not None and r.transaction_type != 0xC)
    strings = {f"{r.topic}#{k}" for r in recs if r.transaction_type != 0xC
               for k in ([r.uniq_key] if r.uniq_key is not None else []) + r.keys}
    by_hash = defaultdict(set)
    for s in strings:
        t, _, k = s.partition("#")
        by_hash[index_key_hash(t, k)].add(s)
    with MessageStore.open(path, cfg, read_only=True) as st:
        cq = {k: (c.min_offset, c.max_offset) for k, c in st.consume_queues.items()}
        svc = IndexService(path, cfg, read_only=True)
        svc.load(True)
        files = []
        for f in svc.files:
            n = f.index_count - 1
            import numpy as np
            from rmqstore.format import index_file as IF
            items = np.frombuffer(f.mf.mm, dtype=IF.ITEM_DTYPE, count=n, offset=IF.item_pos(f.slot_num, 1))
            slots = Counter((items["key_hash"].astype(np.int64) % f.slot_num).tolist())
            files.append((f.name, n, len(slots), max(slots.values(), default=0)))
        svc.close()
    return recs, per_queue, keys, uniq, by_hash, cq, files


@pytest.mark.parametrize("which", ["rollover", "generated"])
def test_stats(spark, vectors, generated, which):
    if which == "generated":
        path, cfg = generated.path, generated.config
    else:
        path, cfg = vectors[which].path, vectors[which].config
    top = 5
    got = stats(spark, path, cfg, top=top)
    json.dumps(got)  # JSON-serialisable
    recs, per_queue, keys, uniq, by_hash, cq, files = _expected_stats(path, cfg, top)
    assert got["records"] == len(recs) and got["bytes"] == sum(r.store_size for r in recs)
    assert [(q["topic"], q["queue_id"]) for q in got["queues"]] == sorted(per_queue)
    for q in got["queues"]:
        rs = per_queue[(q["topic"], q["queue_id"])]
        ts = [r.store_timestamp for r in rs]
        in_cq = [r for r in rs if r.transaction_type not in (0x4, 0xC)]
        assert q["messages"] == len(rs) and q["bytes"] == sum(r.store_size for r in rs)
        assert (q["first_store_timestamp"], q["last_store_timestamp"]) == (min(ts), max(ts))
        assert q["in_consume_queue"] == len(in_cq)
        if in_cq:
            lo, hi = cq[(q["topic"], q["queue_id"])]
            assert (lo, hi) == (q["min_queue_offset"], q["max_queue_offset"] + 1) and hi - lo == len(in_cq)
        assert q["peak_per_minute"] == max(Counter(t // 60_000 for t in ts).values())
        assert q["per_minute"] == round(len(rs) / max(1.0, (max(ts) - min(ts)) / 60_000), 3)
    want_top = sorted(keys.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    assert [(k["topic"], k["key"], k["messages"]) for k in got["top_keys"]] == [(t, k, n) for (t, k), n in want_top]
    dups = {u: n for u, n in uniq.items() if n > 1}
    d = got["duplicate_uniq_keys"]
    assert (d["keys"], d["extra_records"]) == (len(dups), sum(n - 1 for n in dups.values()))
    if which == "generated":
        assert d["keys"] >= 199
    hc = got["hash_collisions"]
    colliding = {h: s for h, s in by_hash.items() if len(s) > 1}
    assert (hc["distinct_keys"], hc["distinct_hashes"]) == (sum(len(s) for s in by_hash.values()), len(by_hash))
    assert (hc["colliding_hashes"], hc["colliding_keys"]) == (len(colliding), sum(len(s) for s in colliding.values()))
    for e in hc["examples"]:
        assert sorted(colliding[e["hash"]])[:5] == e["keys"]
    assert [(f["file"], f["items"], f["slots_used"], f["longest_chain"]) for f in hc["index_files"]] == files
