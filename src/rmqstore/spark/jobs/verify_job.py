"""The Spark verify: the checks of ``MessageStore.verify`` in parallel (:mod:`rmqstore.spark.verify`)."""
from __future__ import annotations

import json
import os
import time

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ...config import MessageStoreConfig
from ...io import paths
from .. import fs as RFS
from .. import tasks as I
from .. import scan as S
from ..options import StoreLoc
from .runtime import Steps, fs_spec, job_conf, job_split_size, parallelism, register, stores


# ================================================================================================
# verify
# ================================================================================================

FINDINGS_SCHEMA = "kind string, path string, offset long, detail string"


def verify(spark: SparkSession, store_dir, cfg: MessageStoreConfig | None = None, *,
           split_size: int | None = None, options: dict | None = None) -> tuple[DataFrame, dict]:
    """The checks of ``MessageStore.verify`` (read-only) in parallel: every record's framing and CRC,
    queue offsets per queue, every consume-queue unit against its record, every index item and the
    index's coverage of every key, the checkpoint, bytes after the end of valid data.

    Returns ``(findings, summary)``: a DataFrame with columns ``kind``, ``path``, ``offset``,
    ``detail`` (at most ``MAX_PER_KIND`` rows of a kind, as the store lists them, then one row saying
    how many more), and a dict with the count of each kind, ``records`` (valid records),
    ``problems`` (all findings), ``end_offset`` and ``seconds``.

    ``store_dir`` is anything :func:`stores` takes. Several stores: one findings DataFrame (paths
    name the files, so the stores apart) and a summary with ``stores`` (each store's, by broker
    name) and the totals ``records`` and ``problems``. A remote store's commitlog is checked in full
    (framing, CRCs, queue offsets); its consume queues, index files and checkpoint are not (they
    need the store opened on a filesystem): the summary says so in ``skipped``."""
    locs = stores(store_dir, cfg, options)
    if len(locs) == 1:
        return _verify_store(spark, locs[0], split_size)
    t0 = time.perf_counter()
    per = {loc.broker_name: _verify_store(spark, loc, split_size) for loc in locs}
    frames = [df for df, _ in per.values()]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    summary = {"records": sum(x["records"] for _, x in per.values()),
               "problems": sum(x["problems"] for _, x in per.values()),
               "stores": {name: x for name, (_, x) in per.items()}, "seconds": time.perf_counter() - t0}
    return df, summary


def _verify_store(spark: SparkSession, loc: StoreLoc, split_size: int | None) -> tuple[DataFrame, dict]:
    """:func:`verify` of one store."""
    from ...engine import verify as V
    from .. import verify as SV

    t0 = time.perf_counter()
    store_dir, cfg = loc.store_dir, loc.cfg
    remote = RFS.is_remote(store_dir)
    register(spark)
    spark.dataSource.register(SV.VerifySource)
    split_size = split_size or job_split_size(spark, [loc])
    P = 2 * parallelism(spark)
    seg_size = cfg.mapped_file_size_commit_log
    segments = S.list_segments(store_dir, seg_size)
    base = {"store": store_dir, "cfg": I.cfg_to_json(cfg), "segments": segments, "fs": fs_spec(store_dir)}
    steps = Steps()

    def run(tasks: list[dict]) -> DataFrame:
        spec = dict(base, tasks=tasks)
        return spark.read.format("rmqstore_verify").option("spec", json.dumps(spec)).load()

    findings: list = []
    light = SV.light_files(store_dir, segments, seg_size)
    with job_conf(spark, **{"spark.sql.shuffle.partitions": str(P)}):
        # 1. the commitlog, span by span; spans that do not line up are scanned again
        spans = S.plan_spans(segments, seg_size, split_size)
        groups, k = [], 0
        for g in S.group_spans(spans, split_size):
            groups.append({"mode": "log", "spans": [[k + i, sp.seg, sp.start, sp.end, None] for i, sp in enumerate(g)]})
            k += len(g)
        rounds: list[tuple[DataFrame, set[int]]] = []
        infos: dict[int, dict] = {}
        chain = SV.Chain(segments[0] if segments else 0, "end of data", [], 0, -1, 0, {})
        tasks = groups
        while tasks:
            df = run(tasks).persist(StorageLevel.MEMORY_AND_DISK)
            scanned = set()
            for r in df.where(f"row = {SV.SPAN}").select("info").collect():
                x = json.loads(r.info)
                infos[x["span"]] = x
                scanned.add(x["span"])
            rounds.append((df, scanned))
            chain = SV.follow(segments, seg_size, infos) if segments else chain
            tasks = [{"mode": "log", "spans": [[sid, infos[sid]["seg"], infos[sid]["start"], infos[sid]["end"], pos]]}
                     for sid, pos in chain.rescan.items()]
            if len(rounds) > 64:
                raise RuntimeError("verify: the commitlog chain does not settle; retry with another split size")
        steps.mark("commitlog")
        on_chain = set(chain.spans)

        def rows_of(kind: int) -> DataFrame | None:
            out = None
            for i, (df, scanned) in enumerate(rounds):
                # a span's rows come from the last round that scanned it
                later = set().union(*[s for _, s in rounds[i + 1:]]) if i + 1 < len(rounds) else set()
                mine = sorted((scanned - later) & on_chain)
                if not mine:
                    continue
                part = df.where(F.col("row") == kind).where(F.col("span").isin(mine))
                out = part if out is None else out.unionByName(part)
            return out

        log_findings = rows_of(SV.FINDING)
        if log_findings is not None:
            findings += [V.Finding(r.kind, r.path, r.offset, r.detail) for r in log_findings.collect()]
        # queue offsets across spans
        edges: dict[tuple[str, int], list] = {}
        order = {sid: infos[sid]["start"] for sid in on_chain}
        edge_rows = rows_of(SV.QUEUE_EDGE)
        for r in (edge_rows.collect() if edge_rows is not None else []):
            edges.setdefault((r.topic, r.queueId), []).append(r)
        stub = SV.log_checks(cfg, light)
        queue_last = {}
        for qk, rs in sorted(edges.items()):
            rs.sort(key=lambda r: order[r.span])
            for prev, nxt in zip(rs, rs[1:]):
                if nxt.q1 != prev.q2 + 1:
                    stub.record_gap(qk, prev.q2, nxt.q1, prev.phy2, nxt.phy1)
            queue_last[qk] = (rs[-1].q2, rs[-1].phy2)
        findings += stub.f.items
        steps.mark("queue_offsets")
        skipped = None
        if remote:  # the derived files need the store opened on a filesystem: the commitlog only
            skipped = "consume queues, index files, checkpoint and tail (a remote store: its commitlog only)"
            for df, _ in rounds:
                df.unpersist()
        else:
            # 2. consume queues, index files, checkpoint and tail
            cq_root = paths.consume_queue_dir(store_dir)
            with_cq = set()
            if os.path.isdir(cq_root):
                for t in sorted(os.listdir(cq_root)):
                    if os.path.isdir(os.path.join(cq_root, t)):
                        with_cq.update((t, int(q)) for q in os.listdir(os.path.join(cq_root, t)) if q.isdigit())
            queues = sorted(with_cq | set(queue_last))
            tasks = []
            for grp in I.group_evenly(queues, P):
                tasks.append({"mode": "queues", "end": chain.end, "queues": [list(q) for q in grp],
                              "queue_last": [[t, q, *queue_last[(t, q)]] for t, q in grp if (t, q) in queue_last]})
            idx_dir = paths.index_dir(store_dir)
            names = sorted(n for n in os.listdir(idx_dir) if os.path.isfile(os.path.join(idx_dir, n))) \
                if os.path.isdir(idx_dir) and cfg.message_index_enable else []
            for grp in I.group_evenly(names, P):
                tasks.append({"mode": "index", "end": chain.end, "files": grp})
            tasks.append({"mode": "misc", "end": chain.end, "last_valid": chain.last_valid, "records": chain.records,
                          "reason": chain.reason, "max_ts": chain.max_ts})
            checks = run(tasks).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                findings += [V.Finding(r.kind, r.path, r.offset, r.detail)
                             for r in checks.where(f"row = {SV.FINDING}").collect()]
                misc = json.loads(checks.where(f"row = {SV.SPAN}").select("info").collect()[0].info)
                steps.mark("queues_index")
                # 3. every key of every record must be found by a sound index item
                keys = rows_of(SV.KEY)
                if cfg.message_index_enable and misc["judge_lag"] and keys is not None:
                    good = checks.where(f"row = {SV.GOOD_ITEM}").select("phy", "hash")
                    missing = keys.select("phy", "hash").join(good, ["phy", "hash"], "left_anti")
                    n_missing = missing.count()
                    for r in missing.orderBy("phy").limit(V.MAX_PER_KIND + 1).collect():
                        path, pos = V.file_pos(light, r.phy)
                        findings.append(V.Finding("index_item", path, pos, f"the record at {r.phy} has a key (hash "
                                                                           f"{r.hash}) that no index item finds"))
                    findings += [V.Finding("index_item", None, None, "")] * max(0, n_missing - V.MAX_PER_KIND - 1)
                steps.mark("index_coverage")
            finally:
                checks.unpersist()
                for df, _ in rounds:
                    df.unpersist()
    listed, counts = _limit_findings(findings, V)
    summary = {k: counts.get(k, 0) for k in V.KINDS}
    summary.update(records=chain.records, problems=sum(counts.values()), end_offset=chain.end,
                   seconds=time.perf_counter() - t0, steps=steps.times)
    if skipped:
        summary["skipped"] = skipped
    df = spark.createDataFrame([(f.kind, f.path, f.offset, f.detail) for f in listed], FINDINGS_SCHEMA)
    return df, summary


_KIND_ORDER = ("record_crc", "record_invalid", "cq_gap", "cq_unit", "index_item", "checkpoint_ahead", "tail_garbage")


def _limit_findings(findings: list, V) -> tuple[list, dict[str, int]]:
    """Sorted findings, at most ``MAX_PER_KIND`` of a kind listed plus a line for the rest (as the
    store does), and the true count of each kind."""
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.kind] = counts.get(f.kind, 0) + 1
    key = {k: i for i, k in enumerate(_KIND_ORDER)}
    real = sorted((f for f in findings if f.path is not None or f.detail),
                  key=lambda f: (key.get(f.kind, 99), f.path or "", -1 if f.offset is None else f.offset, f.detail))
    out, seen = [], {}
    for f in real:
        n = seen.get(f.kind, 0) + 1
        seen[f.kind] = n
        if n <= V.MAX_PER_KIND:
            out.append(f)
    for kind in _KIND_ORDER:
        if counts.get(kind, 0) > V.MAX_PER_KIND:
            out.append(V.Finding(kind, None, None, f"{counts[kind] - V.MAX_PER_KIND} more {kind} findings not listed"))
    return out, counts
