"""The Spark verify: the checks of ``MessageStore.verify`` in parallel (:mod:`rmqstore.spark.verify`)."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ...config import MessageStoreConfig
from ...engine import verify as V
from ...io import paths
from .. import fs as RFS
from .. import tasks as I
from .. import scan as S
from .. import verify as SV
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


@dataclass
class _Job:
    """One store's Spark verify: where it is, how its commitlog is cut, and how tasks are run."""

    spark: SparkSession
    loc: StoreLoc
    split_size: int
    parallel: int
    segments: list
    steps: Steps = field(default_factory=Steps)

    @property
    def light(self) -> list:
        return SV.light_files(self.loc.store_dir, self.segments, self.loc.cfg.mapped_file_size_commit_log)

    def run(self, tasks: list[dict]) -> DataFrame:
        """The verify source over ``tasks`` (each a dict with ``mode``)."""
        spec = {"store": self.loc.store_dir, "cfg": I.cfg_to_json(self.loc.cfg), "segments": self.segments,
                "fs": fs_spec(self.loc.store_dir), "tasks": tasks}
        return self.spark.read.format("rmqstore_verify").option("spec", json.dumps(spec)).load()


@dataclass
class _LogRounds:
    """The rounds of commitlog span scans (each a persisted DataFrame and the spans it scanned),
    the span summaries, and the chain followed through them."""

    rounds: list
    infos: dict
    chain: SV.Chain

    def rows_of(self, kind: int) -> DataFrame | None:
        """Rows of ``kind`` of the spans on the chain, each span's from the last round that scanned it."""
        on_chain = set(self.chain.spans)
        out = None
        for i, (df, scanned) in enumerate(self.rounds):
            later = set().union(*[s for _, s in self.rounds[i + 1:]]) if i + 1 < len(self.rounds) else set()
            mine = sorted((scanned - later) & on_chain)
            if not mine:
                continue
            part = df.where(F.col("row") == kind).where(F.col("span").isin(mine))
            out = part if out is None else out.unionByName(part)
        return out

    def unpersist(self) -> None:
        for df, _ in self.rounds:
            df.unpersist()


def _verify_store(spark: SparkSession, loc: StoreLoc, split_size: int | None) -> tuple[DataFrame, dict]:
    """:func:`verify` of one store."""
    t0 = time.perf_counter()
    register(spark)
    spark.dataSource.register(SV.VerifySource)
    job = _Job(spark, loc, split_size or job_split_size(spark, [loc]), 2 * parallelism(spark),
               S.list_segments(loc.store_dir, loc.cfg.mapped_file_size_commit_log))
    skipped = None
    with job_conf(spark, **{"spark.sql.shuffle.partitions": str(job.parallel)}):
        log = _scan_commitlog(job)  # 1. the commitlog, span by span
        try:
            findings = _log_findings(log)
            more, queue_last = _queue_offsets(job, log)
            findings += more
            job.steps.mark("queue_offsets")
            if RFS.is_remote(loc.store_dir):  # the derived files need the store opened on a filesystem
                skipped = "consume queues, index files, checkpoint and tail (a remote store: its commitlog only)"
            else:
                findings += _check_derived(job, log, queue_last)  # 2. and 3.
        finally:
            log.unpersist()
    listed, counts = _limit_findings(findings)
    summary = {k: counts.get(k, 0) for k in V.KINDS}
    summary.update(records=log.chain.records, problems=sum(counts.values()), end_offset=log.chain.end,
                   seconds=time.perf_counter() - t0, steps=job.steps.times)
    if skipped:
        summary["skipped"] = skipped
    df = spark.createDataFrame([(f.kind, f.path, f.offset, f.detail) for f in listed], FINDINGS_SCHEMA)
    return df, summary


def _scan_commitlog(job: _Job) -> _LogRounds:
    """Every span scanned, the chain followed; spans that do not line up scanned again."""
    seg_size = job.loc.cfg.mapped_file_size_commit_log
    spans = S.plan_spans(job.segments, seg_size, job.split_size)
    tasks, k = [], 0
    for g in S.group_spans(spans, job.split_size):
        tasks.append({"mode": "log", "spans": [[k + i, sp.seg, sp.start, sp.end, None] for i, sp in enumerate(g)]})
        k += len(g)
    log = _LogRounds([], {}, SV.Chain(job.segments[0] if job.segments else 0, "end of data", [], 0, -1, 0, {}))
    while tasks:
        df = job.run(tasks).persist(StorageLevel.MEMORY_AND_DISK)
        scanned = set()
        for r in df.where(f"row = {SV.SPAN}").select("info").collect():
            x = json.loads(r.info)
            log.infos[x["span"]] = x
            scanned.add(x["span"])
        log.rounds.append((df, scanned))
        log.chain = SV.follow(job.segments, seg_size, log.infos) if job.segments else log.chain
        tasks = [{"mode": "log", "spans": [[sid, log.infos[sid]["seg"], log.infos[sid]["start"],
                                            log.infos[sid]["end"], pos]]}
                 for sid, pos in log.chain.rescan.items()]
        if len(log.rounds) > 64:
            log.unpersist()
            raise RuntimeError("verify: the commitlog chain does not settle; retry with another split size")
    job.steps.mark("commitlog")
    return log


def _log_findings(log: _LogRounds) -> list:
    rows = log.rows_of(SV.FINDING)
    return [V.Finding(r.kind, r.path, r.offset, r.detail) for r in rows.collect()] if rows is not None else []


def _queue_offsets(job: _Job, log: _LogRounds) -> tuple[list, dict]:
    """Queue offsets that jump between spans (the verifier's :class:`LogChecks` judges each pair of
    neighbouring span edges), and each queue's last offset in the commitlog."""
    edges: dict[tuple[str, int], list] = {}
    order = {sid: log.infos[sid]["start"] for sid in log.chain.spans}
    edge_rows = log.rows_of(SV.QUEUE_EDGE)
    for r in (edge_rows.collect() if edge_rows is not None else []):
        edges.setdefault((r.topic, r.queueId), []).append(r)
    checks = SV.log_checks(job.loc.cfg, job.light)
    queue_last = {}
    for qk, rs in sorted(edges.items()):
        rs.sort(key=lambda r: order[r.span])
        for prev, nxt in zip(rs, rs[1:]):
            if nxt.q1 != prev.q2 + 1:
                checks.record_gap(qk, prev.q2, nxt.q1, prev.phy2, nxt.phy1)
        queue_last[qk] = (rs[-1].q2, rs[-1].phy2)
    return list(checks.found.items), queue_last


def _derived_tasks(job: _Job, chain: SV.Chain, queue_last: dict) -> list[dict]:
    """Tasks for the consume queues (groups of queues), the index files (groups of files), and the
    checkpoint and tail (one task)."""
    store_dir, cfg, P = job.loc.store_dir, job.loc.cfg, job.parallel
    cq_root = paths.consume_queue_dir(store_dir)
    with_cq = set()
    if os.path.isdir(cq_root):
        for t in sorted(os.listdir(cq_root)):
            if os.path.isdir(os.path.join(cq_root, t)):
                with_cq.update((t, int(q)) for q in os.listdir(os.path.join(cq_root, t)) if q.isdigit())
    tasks = []
    for grp in I.group_evenly(sorted(with_cq | set(queue_last)), P):
        tasks.append({"mode": "queues", "end": chain.end, "queues": [list(q) for q in grp],
                      "queue_last": [[t, q, *queue_last[(t, q)]] for t, q in grp if (t, q) in queue_last]})
    idx_dir = paths.index_dir(store_dir)
    names = sorted(n for n in os.listdir(idx_dir) if os.path.isfile(os.path.join(idx_dir, n))) \
        if os.path.isdir(idx_dir) and cfg.message_index_enable else []
    for grp in I.group_evenly(names, P):
        tasks.append({"mode": "index", "end": chain.end, "files": grp})
    tasks.append({"mode": "misc", "end": chain.end, "last_valid": chain.last_valid, "records": chain.records,
                  "reason": chain.reason, "max_ts": chain.max_ts})
    return tasks


def _check_derived(job: _Job, log: _LogRounds, queue_last: dict) -> list:
    """2. consume queues, index files, checkpoint and tail; 3. every key of every record found by a
    sound index item."""
    checks = job.run(_derived_tasks(job, log.chain, queue_last)).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        findings = [V.Finding(r.kind, r.path, r.offset, r.detail) for r in checks.where(f"row = {SV.FINDING}").collect()]
        misc = json.loads(checks.where(f"row = {SV.SPAN}").select("info").collect()[0].info)
        job.steps.mark("queues_index")
        keys = log.rows_of(SV.KEY)
        if job.loc.cfg.message_index_enable and misc["judge_lag"] and keys is not None:
            good = checks.where(f"row = {SV.GOOD_ITEM}").select("phy", "hash")
            findings += _index_coverage(job, keys, good)
        job.steps.mark("index_coverage")
    finally:
        checks.unpersist()
    return findings


def _index_coverage(job: _Job, keys: DataFrame, good: DataFrame) -> list:
    """The keys no sound item finds (a Spark anti-join): at most ``MAX_PER_KIND + 1`` listed, the
    rest counted."""
    missing = keys.select("phy", "hash").join(good, ["phy", "hash"], "left_anti")
    n_missing = missing.count()
    light = job.light
    found = [V.missing_key_finding(light, r.phy, r.hash)
             for r in missing.orderBy("phy").limit(V.MAX_PER_KIND + 1).collect()]
    return found + [V.Finding("index_item", None, None, "")] * max(0, n_missing - V.MAX_PER_KIND - 1)


_KIND_ORDER = ("record_crc", "record_invalid", "cq_gap", "cq_unit", "index_item", "checkpoint_ahead", "tail_garbage")


def _limit_findings(findings: list) -> tuple[list, dict[str, int]]:
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
            out.append(V.not_listed(kind, counts[kind] - V.MAX_PER_KIND))
    return out, counts
