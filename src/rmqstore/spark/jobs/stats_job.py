"""The Spark stats: per queue and topic counts, sizes and rates, top keys, duplicate UNIQ_KEYs,
index hash collisions and the index files' profile, from a full scan."""
from __future__ import annotations

import json
import os
import time

from pyspark import StorageLevel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ...config import MessageStoreConfig
from ...io import paths
from .. import fs as RFS
from .. import tasks as I
from .. import scan as S
from ..options import StoreLoc
from .runtime import Steps, fs_spec, job_conf, job_split_size, parallelism, per_store, read_store, register, stores

_TX = "(sysFlag & 12)"


# ================================================================================================
# stats
# ================================================================================================

def _ms(col: str):
    return F.unix_millis(F.col(col))


def stats(spark: SparkSession, store_dir, cfg: MessageStoreConfig | None = None, top: int = 10,
          options: dict | None = None) -> dict:
    """Statistics of a store from a full scan of its commitlog (JSON-serialisable):

    * ``queues``: per topic and queue id, ``messages`` (records), ``in_consume_queue`` (those that get
      a consume-queue unit: not PREPARED/ROLLBACK), ``bytes``, first/last queue offset and store time,
      ``per_minute`` (average over the time span, at least one minute) and ``peak_per_minute``;
    * ``topics``: the same per topic; ``records``, ``bytes``, ``first/last_store_timestamp`` overall;
    * ``top_keys``: the most frequent KEYS tokens (topic, key, messages);
    * ``duplicate_uniq_keys``: UNIQ_KEYs carried by more than one record (count, extra records, top);
    * ``hash_collisions``: distinct ``topic#key`` strings vs distinct index hashes, the hashes shared by
      different keys (examples), and for each index file its items, used slots and longest chain.

    ``store_dir`` is anything :func:`stores` takes; several stores are answered per broker name
    (``stores``) with the totals ``records`` and ``bytes``.
    """
    locs = stores(store_dir, cfg, options)
    register(spark)
    with job_conf(spark, **{"spark.sql.shuffle.partitions": str(2 * parallelism(spark))}):
        return per_store(locs, lambda loc: _stats(spark, loc, top, job_split_size(spark, [loc]), options),
                          ("records", "bytes"))


def _stats(spark: SparkSession, loc: StoreLoc, top: int, split: int, options: dict | None) -> dict:
    t0 = time.perf_counter()
    steps = Steps()
    store_dir, cfg = loc.store_dir, loc.cfg
    schema = ("topic STRING, queueId INT, queueOffset BIGINT, storeSize INT, storeTimestamp TIMESTAMP, "
              "sysFlag INT")
    recs = read_store(spark, store_dir, cfg, schema=schema, includeBody=False, splitSize=split, **(options or {}))
    recs = recs.withColumn("ts", _ms("storeTimestamp")).withColumn("inCq", F.expr(f"{_TX} NOT IN (4, 12)"))
    by_minute = recs.groupBy("topic", "queueId", F.floor(F.col("ts") / 60_000).alias("minute")).count()
    peak = by_minute.groupBy("topic", "queueId").agg(F.max("count").alias("peak"))
    per_queue = (recs.groupBy("topic", "queueId").agg(
        F.count(F.lit(1)).alias("messages"), F.sum(F.col("inCq").cast("long")).alias("inCq"),
        F.sum("storeSize").alias("bytes"), F.min("queueOffset").alias("minQ"), F.max("queueOffset").alias("maxQ"),
        F.min("ts").alias("first"), F.max("ts").alias("last"))
        .join(peak, ["topic", "queueId"]).orderBy("topic", "queueId").collect())
    steps.mark("queues")
    queues = []
    for r in per_queue:
        span_min = max(1.0, (r["last"] - r["first"]) / 60_000)
        queues.append({"topic": r.topic, "queue_id": r.queueId, "messages": r.messages,
                       "in_consume_queue": r.inCq, "bytes": r["bytes"], "min_queue_offset": r.minQ,
                       "max_queue_offset": r.maxQ, "first_store_timestamp": r["first"],
                       "last_store_timestamp": r["last"], "per_minute": round(r.messages / span_min, 3),
                       "peak_per_minute": r.peak})
    topics: dict[str, dict] = {}
    for q in queues:
        t = topics.setdefault(q["topic"], {"topic": q["topic"], "queues": 0, "messages": 0, "bytes": 0,
                                           "first_store_timestamp": q["first_store_timestamp"],
                                           "last_store_timestamp": q["last_store_timestamp"]})
        t["queues"] += 1
        t["messages"] += q["messages"]
        t["bytes"] += q["bytes"]
        t["first_store_timestamp"] = min(t["first_store_timestamp"], q["first_store_timestamp"])
        t["last_store_timestamp"] = max(t["last_store_timestamp"], q["last_store_timestamp"])
    out = {"store": store_dir, "broker_name": loc.broker_name, "records": sum(q["messages"] for q in queues),
           "bytes": sum(q["bytes"] for q in queues),
           "first_store_timestamp": min((q["first_store_timestamp"] for q in queues), default=None),
           "last_store_timestamp": max((q["last_store_timestamp"] for q in queues), default=None),
           "queues": queues, "topics": sorted(topics.values(), key=lambda t: t["topic"])}
    out.update(_key_stats(spark, store_dir, cfg, top, steps, split))
    out["seconds"] = time.perf_counter() - t0
    out["steps"] = steps.times
    return out


def _key_stats(spark: SparkSession, store_dir: str, cfg: MessageStoreConfig, top: int, steps: Steps,
               split: int) -> dict:
    seg_size = cfg.mapped_file_size_commit_log
    spans = S.plan_spans(S.list_segments(store_dir, seg_size), seg_size, split)
    groups = [[[0, sp.seg, sp.start, sp.end] for sp in g] for g in S.group_spans(spans, split)]
    empty = {"top_keys": [], "duplicate_uniq_keys": {"keys": 0, "extra_records": 0, "top": []},
             "hash_collisions": {"distinct_keys": 0, "distinct_hashes": 0, "colliding_hashes": 0,
                                 "colliding_keys": 0, "examples": [], "slots": cfg.max_hash_slot_num,
                                 "index_files": []}}
    if not groups:
        return empty
    spec = {"store": store_dir, "cfg": I.cfg_to_json(cfg), "groups": groups, "fs": fs_spec(store_dir)}
    keys = spark.read.format("rmqstore_keys").option("spec", json.dumps(spec)).load() \
        .persist(StorageLevel.MEMORY_AND_DISK)
    cached = [keys]
    try:
        top_keys = [{"topic": r.topic, "key": r.key, "messages": r["count"]} for r in
                    keys.where("NOT uniq").groupBy("topic", "key").count()
                    .orderBy(F.desc("count"), "topic", "key").limit(top).collect()]
        steps.mark("top_keys")
        dup = (keys.where("uniq").groupBy("key").agg(F.count(F.lit(1)).alias("n"),
                                                     F.sort_array(F.collect_set("topic")).alias("topics"))
               .where("n > 1").persist(StorageLevel.MEMORY_AND_DISK))
        cached.append(dup)
        dsum = dup.agg(F.count(F.lit(1)).alias("k"), F.sum(F.col("n") - 1).alias("extra")).collect()[0]
        dup_top = [{"uniq_key": r.key, "records": r.n, "topics": r.topics}
                   for r in dup.orderBy(F.desc("n"), "key").limit(top).collect()]
        steps.mark("duplicates")
        distinct = keys.select(F.concat_ws("#", "topic", "key").alias("k"), "hash").distinct()
        by_hash = (distinct.groupBy("hash").agg(F.count(F.lit(1)).alias("n"),
                                                F.slice(F.sort_array(F.collect_list("k")), 1, 5).alias("keys"))
                   .persist(StorageLevel.MEMORY_AND_DISK))
        cached.append(by_hash)
        agg = by_hash.agg(F.count(F.lit(1)).alias("hashes"), F.sum("n").alias("keys"),
                          F.sum(F.when(F.col("n") > 1, 1).otherwise(0)).alias("colliding"),
                          F.sum(F.when(F.col("n") > 1, F.col("n")).otherwise(0)).alias("colliding_keys")).collect()[0]
        examples = [{"hash": r.hash, "keys": r["keys"], "distinct_keys": r.n} for r in
                    by_hash.where("n > 1").orderBy(F.desc("n"), "hash").limit(top).collect()]
        steps.mark("collisions")
    finally:
        for df in cached:
            df.unpersist()
    profile = _index_profile(spark, store_dir, cfg)
    steps.mark("index_files")
    return {"top_keys": top_keys,
            "duplicate_uniq_keys": {"keys": dsum.k, "extra_records": int(dsum.extra or 0), "top": dup_top},
            "hash_collisions": {"distinct_keys": int(agg["keys"] or 0), "distinct_hashes": agg.hashes,
                                "colliding_hashes": int(agg.colliding or 0),
                                "colliding_keys": int(agg.colliding_keys or 0), "examples": examples,
                                "slots": cfg.max_hash_slot_num, "index_files": profile}}


def _index_profile(spark: SparkSession, store_dir: str, cfg: MessageStoreConfig) -> list[dict]:
    """Per index file of the store: items, used slots, longest and mean slot chain."""
    if RFS.is_remote(store_dir):
        names = [n for n, _ in RFS.list_files(store_dir, RFS.settings_for(store_dir), paths.INDEX)]
        files = names
    else:
        d = paths.index_dir(store_dir)
        names = sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n))) if os.path.isdir(d) else []
        files = [os.path.join(d, n) for n in names]
    if not names:
        return []
    groups = I.group_evenly(files, 2 * parallelism(spark))
    spec = {"groups": groups, "slots": cfg.max_hash_slot_num, "items": cfg.max_index_num, "store": store_dir,
            "fs": fs_spec(store_dir)}
    rows = {r.file: r for r in spark.read.format("rmqstore_index_profile").option("spec", json.dumps(spec))
            .load().collect()}
    out = []
    for n in names:
        r = rows[n]
        out.append({"file": n, "items": r["items"], "slots_used": r.slotsUsed, "longest_chain": r.longestChain,
                    "mean_chain": round(r["items"] / r.slotsUsed, 3) if r.slotsUsed else 0.0,
                    "hash_slot_count": r.hashSlotCount, "begin_timestamp": r.beginTs, "end_timestamp": r.endTs})
    return out
