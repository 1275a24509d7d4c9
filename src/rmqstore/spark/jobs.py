"""Spark jobs over a store: ``rebuild``, ``verify``, ``export``, ``stats``.

Every job reads the store through executors only: the driver lists the commitlog (file names and
sizes), plans byte ranges and collects small summaries. Data moves between Python and the JVM as
Arrow batches through the Python Data Source API (:mod:`.internal`), and Spark SQL does the
shuffles, sorts and aggregations. Outputs (``rebuild``, ``export``) are written by executors, so
on a cluster the store and output paths must be visible to every executor (a shared filesystem).
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from ..config import MessageStoreConfig
from ..errors import CorruptRecordError, StoreIOError
from . import internal as I
from . import scan as S
from .options import resolve_config
from .source import RocketMQDataSource

log = logging.getLogger(__name__)

_TX = "(sysFlag & 12)"


# ================================================================================================
# Session
# ================================================================================================

def get_spark(master: str | None = None, app_name: str = "rmqstore") -> SparkSession:
    """A SparkSession (``local[*]`` when ``master`` is None) with the ``rocketmq`` source (and the
    jobs' internal sources) registered, filter pushdown for Python sources on, quiet logs.

    Python workers run ``$PYSPARK_PYTHON`` (this interpreter unless set); on a cluster it must be
    an interpreter that imports rmqstore."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master or "local[*]").appName(app_name)
             .config("spark.sql.python.filterPushdown.enabled", "true")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Register the ``rocketmq`` source and the jobs' internal sources on ``spark``."""
    spark.dataSource.register(RocketMQDataSource)
    for cls in I.INTERNAL_SOURCES:
        spark.dataSource.register(cls)


@contextlib.contextmanager
def _job_conf(spark: SparkSession, **conf):
    """Session settings for the duration of a job: shuffle partitions exactly as planned (no
    adaptive coalescing), Python filter pushdown on; previous values restored afterwards."""
    conf = {"spark.sql.adaptive.enabled": "false", "spark.sql.python.filterPushdown.enabled": "true", **conf}
    old = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


_HASH_KEYS: dict[int, list[int]] = {}


def _partition_keys(spark: SparkSession, n: int) -> list[int]:
    """``keys[j]`` is a long whose Spark hash lands in partition ``j`` of ``repartition(n, col)``, so a
    job can send rows to the partition it chose (balanced) rather than where hashing puts them."""
    keys = _HASH_KEYS.get(n)
    if keys is None:
        found: dict[int, int] = {}
        lo = 0
        while len(found) < n:
            rows = spark.range(lo, lo + 64 * n).select("id", F.expr(f"pmod(hash(id), {n})").alias("p")).collect()
            for r in rows:
                found.setdefault(r.p, r.id)
            lo += 64 * n
        keys = _HASH_KEYS[n] = [found[j] for j in range(n)]
    return keys


def _lpt(weights: list[int], n: int) -> list[int]:
    """Longest-processing-time assignment of items to ``n`` bins; returns the bin of each item."""
    load = [0] * n
    out = [0] * len(weights)
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        b = min(range(n), key=load.__getitem__)
        out[i] = b
        load[b] += weights[i]
    return out


def _result_path() -> str:
    fd, path = tempfile.mkstemp(prefix="rmqstore-spark-", suffix=".json")
    os.close(fd)
    os.unlink(path)
    return path


def _read_result(path: str) -> dict:
    try:
        with open(path) as fh:
            return json.load(fh)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class _Steps:
    """Wall time of each step of a job (reported in the job's result as ``steps``)."""

    def __init__(self):
        self.times: dict[str, float] = {}
        self._t = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.times[name] = round(self.times.get(name, 0.0) + now - self._t, 4)
        self._t = now
        log.debug("step %s: %.3fs", name, self.times[name])


def _parallelism(spark: SparkSession) -> int:
    return max(1, spark.sparkContext.defaultParallelism)


# ================================================================================================
# Shared: the dispatch rows of a whole store and its end of valid data
# ================================================================================================

class _Dispatch:
    """The dispatch blocks of every commitlog span (persisted), the span summaries, the end of
    valid data ``end`` and the spans whose records lie before it (ids ``<= last_span``)."""

    def __init__(self, spark: SparkSession, store_dir: str, cfg: MessageStoreConfig, split_size: int,
                 check_crc: bool, steps: _Steps):
        self.store_dir, self.cfg = store_dir, cfg
        seg_size = cfg.mapped_file_size_commit_log
        self.segments = S.list_segments(store_dir, seg_size)
        spans = S.plan_spans(self.segments, seg_size, split_size)
        self.spans = spans
        groups, k = [], 0
        for g in S.group_spans(spans, split_size):
            groups.append([[k + i, sp.seg, sp.start, sp.end] for i, sp in enumerate(g)])
            k += len(g)
        spec = {"store": store_dir, "cfg": I.cfg_to_json(cfg), "groups": groups, "check_crc": check_crc,
                "prop_crc": check_crc and cfg.force_verify_prop_crc}
        self.df = None
        self.summaries: list[S.SpanSummary] = []
        self.info: list[dict] = []
        self.end = S.ChainEnd(self.segments[0] if self.segments else 0, S.END)
        self.last_span = -1
        if not spans:
            return
        self.df = (spark.read.format("rmqstore_dispatch").option("spec", json.dumps(spec)).load()
                   .persist(StorageLevel.MEMORY_AND_DISK))
        rows = sorted(self.df.where(f"kind = {I.SUMMARY}").select("span", "info").collect(), key=lambda r: r.span)
        steps.mark("dispatch")
        self.info = [json.loads(r.info) for r in rows]
        self.summaries = [S.SpanSummary.from_dict(x) for x in self.info]
        self.end = end = S.stitch_chain(self.segments, seg_size, self.summaries)
        for sid, sm in enumerate(self.summaries):
            if sm.first is not None and sm.first < end.offset:
                if sm.chain_end is not None and sm.chain_end < end.offset:
                    continue  # the chain goes on past this span
                if sm.chain_end is None or sm.chain_end > end.offset:
                    raise CorruptRecordError(
                        f"records of the span [{sm.span.start}, {sm.span.end}) do not line up with the end of "
                        f"valid data at {end.offset} (a message body that looks like a record?); retry with "
                        "another split size", path=S.segment_path(store_dir, sm.span.seg), offset=end.offset)
        self.last_span = max((sid for sid, sm in enumerate(self.summaries)
                              if sm.first is not None and sm.first < end.offset), default=-1)
        steps.mark("chain")

    def blocks(self, kind: int) -> DataFrame:
        """Blocks of the records before the end of valid data."""
        return self.df.where(f"kind = {kind} AND span <= {self.last_span}")

    def counts(self) -> list[dict]:
        """Per-span dispatch counts of the spans before the end of valid data, in span order."""
        return [x["dispatch"] for x in self.info[:self.last_span + 1]]

    def close(self) -> None:
        if self.df is not None:
            self.df.unpersist()
            self.df = None


def _resolve(store_dir: str, cfg: MessageStoreConfig | None) -> tuple[str, MessageStoreConfig]:
    store_dir = os.path.abspath(store_dir)
    return store_dir, resolve_config(store_dir, None, {}, cfg)


# ================================================================================================
# rebuild
# ================================================================================================

def rebuild(spark: SparkSession, store_dir: str, out_dir: str, cfg: MessageStoreConfig | None = None, *,
            split_size: int = S.DEFAULT_SPLIT_SIZE) -> dict:
    """Write ``out_dir/consumequeue`` and ``out_dir/index`` from the commitlog of ``store_dir``, in
    parallel; byte-identical to the in-process rebuild (:func:`rmqstore.engine.rebuild.rebuild`),
    index file names aside. The store is only read.

    Records are dispatched per commitlog byte range; consume queues are written per queue (each
    record carries its queue offset, so a queue only needs its own rows in commitlog order); index
    items are ranked in commitlog order (per-range counts, prefix sums on the driver), which fixes
    the file and slot of each, so every index file is built on its own.

    Returns ``records``, ``consume_queues``, ``index_files``, ``seconds``, ``end_offset``, ``out_dir``."""
    t0 = time.perf_counter()
    store_dir, cfg = _resolve(store_dir, cfg)
    out_dir = os.path.abspath(out_dir)
    if out_dir == store_dir:
        raise StoreIOError("rebuild output must not be the source store", path=out_dir)
    for sub in ("consumequeue", "index"):
        if os.path.exists(os.path.join(out_dir, sub)):
            raise StoreIOError(f"output directory already holds {sub}/", path=out_dir)
    os.makedirs(out_dir, exist_ok=True)
    register(spark)
    P = 2 * _parallelism(spark)
    steps = _Steps()
    with _job_conf(spark, **{"spark.sql.shuffle.partitions": str(P)}):
        # like the dispatcher (upstream reput), records are not CRC-checked; a torn last record is
        d = _Dispatch(spark, store_dir, cfg, split_size, check_crc=False, steps=steps)
        try:
            result = _rebuild(spark, d, cfg, out_dir, P, steps) if d.df is not None else \
                {"records": 0, "consume_queues": 0, "index_files": 0}
        finally:
            d.close()
    shutil.rmtree(os.path.join(out_dir, I.TMP_DIR), ignore_errors=True)
    result.update(end_offset=d.end.offset, out_dir=out_dir, seconds=time.perf_counter() - t0, steps=steps.times)
    return result


def _rebuild(spark: SparkSession, d: _Dispatch, cfg: MessageStoreConfig, out_dir: str, P: int, steps: _Steps) -> dict:
    counts = d.counts()
    records = sum(c["records"] for c in counts)
    if records == 0:
        return {"records": 0, "consume_queues": 0, "index_files": 0}
    # --- consume queues: one writer per queue, queues spread over the tasks by size ----------
    per_queue: dict[tuple[str, int], int] = {}
    for c in counts:
        for t, q, n in c["queues"]:
            per_queue[(t, q)] = per_queue.get((t, q), 0) + n
    written_queues = 0
    if per_queue:
        queues = sorted(per_queue)
        nq = min(P, len(queues))
        keys = _partition_keys(spark, nq)
        bins = _lpt([per_queue[q] for q in queues], nq)
        qmap = spark.createDataFrame([(t, q, keys[b]) for (t, q), b in zip(queues, bins)],
                                     "topic string, queueId int, pkey long")
        result = _result_path()
        spec = {"out": out_dir, "cfg": I.cfg_to_json(cfg), "result": result}
        (d.blocks(I.CQ_BLOCK).join(F.broadcast(qmap), ["topic", "queueId"])
         .select("pkey", "topic", "queueId", "pos", "n", "data")
         .repartition(nq, "pkey").sortWithinPartitions("topic", "queueId", "pos")
         .select("topic", "queueId", "n", "data")
         .write.format("rmqstore_cq_writer").option("spec", json.dumps(spec)).mode("append").save())
        written_queues = len(_read_result(result)["queues"])
        steps.mark("consume_queues")
    # --- index -------------------------------------------------------------------------------
    index_files = 0
    if cfg.message_index_enable:
        index_files = _write_index(spark, d, counts, cfg, out_dir, P)
        steps.mark("index")
    return {"records": records, "consume_queues": written_queues, "index_files": index_files}


def _write_index(spark: SparkSession, d: _Dispatch, counts: list[dict], cfg: MessageStoreConfig, out_dir: str,
                 P: int) -> int:
    """Index files from the index blocks. Items are ranked in commitlog order (a span's items come
    after all items of the spans before it), so item ``r`` goes to file ``r // cap`` and every file
    can be written on its own."""
    cap = cfg.max_index_num - 1
    total = sum(c["items"] for c in counts)
    last = max(c["last"] for c in counts)
    last_keyed = max(c["last_keyed"] for c in counts)
    # upstream opens a new file when a record arrives and the current file is full
    nfiles = 1 if total == 0 else math.ceil(total / cap) + (1 if total % cap == 0 and last_keyed < last else 0)
    nparts = min(P, nfiles)
    keys = _partition_keys(spark, nparts)
    if total:
        bases, acc = [], 0
        for sid, c in enumerate(counts):
            bases.append((sid, acc))
            acc += c["items"]
        base_df = spark.createDataFrame(bases, "span int, base long")
        r0 = F.col("base") + F.col("first")
        # a block goes to every file its items fall in, and to the next file when it holds the
        # item that file's header starts from (its last item closes a file)
        lo = F.floor(r0 / cap)
        hi = F.floor((r0 + F.col("n") - 1) / cap)
        extra = F.when(((r0 + F.col("n")) % cap == 0) & (hi + 1 < nfiles), 1).otherwise(0)
        rows = (d.blocks(I.INDEX_BLOCK).join(F.broadcast(base_df), "span")
                .select(r0.alias("r0"), "n", "data", F.explode(F.sequence(lo, hi + extra)).alias("file")))
    else:  # records without keys still get one (empty) index file
        rows = spark.createDataFrame([(0, 0, 0, b"")], "file long, r0 long, n int, data binary")
    key_expr = F.element_at(F.array(*[F.lit(k) for k in keys]), (F.col("file") % nparts + 1).cast("int"))
    result = _result_path()
    spec = {"out": out_dir, "slots": cfg.max_hash_slot_num, "items": cfg.max_index_num, "cap": cap,
            "base_ms": int(time.time() * 1000), "result": result}
    (rows.withColumn("pkey", key_expr).repartition(nparts, "pkey").sortWithinPartitions("file", "r0")
     .select("file", "r0", "n", "data")
     .write.format("rmqstore_index_writer").option("spec", json.dumps(spec)).mode("append").save())
    files = _read_result(result)["files"]
    if len(files) != nfiles:
        raise RuntimeError(f"index: wrote {len(files)} files, expected {nfiles}")
    return nfiles
