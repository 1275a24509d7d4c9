"""What every Spark job shares: the session, the jobs' settings, running planned tasks as RDD
jobs (with claims for balance), the stores a job runs on, reading a store as a DataFrame."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
import time

from pyspark.sql import DataFrame, SparkSession

from ..options import StoreLoc, parse_options
from ..source import RocketMQDataSource
from ...config import MessageStoreConfig
from ...errors import ConfigError
from .. import fs as RFS
from .. import tasks as I
from ..stats_sources import INTERNAL_SOURCES
from .. import scan as S

log = logging.getLogger(__name__)


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
    for cls in INTERNAL_SOURCES:
        spark.dataSource.register(cls)


@contextlib.contextmanager
def job_conf(spark: SparkSession, **conf):
    """Session settings for the duration of a job: shuffle partitions exactly as planned (no
    adaptive coalescing), Python filter pushdown on; previous values restored afterwards."""
    conf = {"spark.sql.adaptive.enabled": "false", "spark.sql.python.filterPushdown.enabled": "true",
            "spark.sql.inMemoryColumnarStorage.compressed": "false", **conf}
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


def lpt(weights: list[int], n: int) -> list[int]:
    """Longest-processing-time assignment of items to ``n`` bins; returns the bin of each item."""
    load = [0] * n
    out = [0] * len(weights)
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        b = min(range(n), key=load.__getitem__)
        out[i] = b
        load[b] += weights[i]
    return out


class Steps:
    """Wall time of each step of a job (reported in the job's result as ``steps``)."""

    def __init__(self):
        self.times: dict[str, float] = {}
        self._t = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.times[name] = round(self.times.get(name, 0.0) + now - self._t, 4)
        self._t = now
        log.debug("step %s: %.3fs", name, self.times[name])


class Row(dict):
    """A task's result row (a dict) read as attributes or items, like a ``pyspark.sql.Row``."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def run_tasks(spark: SparkSession, fn, spec: dict, tasks: list) -> list:
    """``fn(spec, task)`` for every task, one Spark task each, as one RDD job (cheaper to launch
    than a Python data source read); the results in the order of ``tasks``."""
    if not tasks:
        return []

    def run(it):
        return [(i, fn(spec, t)) for i, t in it]

    out = spark.sparkContext.parallelize(list(enumerate(tasks)), len(tasks)).mapPartitions(run).collect()
    return [r for _, r in sorted(out, key=lambda x: x[0])]


def parallelism(spark: SparkSession) -> int:
    return max(1, spark.sparkContext.defaultParallelism)


def run_claimed(spark: SparkSession, claimed_fn, plain_fn, spec: dict, groups: list[list[list]]) -> dict:
    """Run every item of ``groups`` (one group per task; an item is a list, its id first) and
    return ``{id: result}``. With more than one group the tasks run ``claimed_fn(spec, group)``,
    claiming items (:func:`rmqstore.spark.tasks.claimed`), so a task slowed down by a busy core leaves its
    last items to the others. An item claimed by a task attempt whose result Spark drops (a failed
    attempt, the losing copy of a speculative task) comes back from no task: those items are run
    again by ``plain_fn(spec, items)`` in a second job, without claims; the first result is kept."""
    items = {it[0]: it for g in groups for it in g}
    if len(groups) > 1:
        out = [x for r in run_tasks(spark, claimed_fn, dict(spec, groups=groups), list(range(len(groups))))
               for x in r]
    else:
        out = [x for r in run_tasks(spark, plain_fn, spec, groups) for x in r]
    done: dict = {}
    for item_id, x in out:
        done.setdefault(item_id, x)
    missing = [items[i] for i in sorted(items) if i not in done]
    if missing:
        log.info("%s: %d claimed items came back from no task; running them again", plain_fn.__name__, len(missing))
        for r in run_tasks(spark, plain_fn, spec, I.group_evenly(missing, parallelism(spark))):
            for item_id, x in r:
                done.setdefault(item_id, x)
    if sorted(done) != sorted(items):
        raise RuntimeError(f"{plain_fn.__name__} returned items {sorted(set(done) ^ set(items))[:10]} unexpectedly")
    return done


def stores(locations, cfg: MessageStoreConfig | None = None, options: dict | None = None) -> list[StoreLoc]:
    """The stores a job runs on, resolved as the ``rocketmq`` source resolves its paths: a directory,
    a ``file:`` URI, a glob or a remote location (``s3://``, ``s3a://``, ``hdfs://``), or a list of
    them; ``options`` are source options (``s3.endpoint``, ``s3.accessKey``, ..., ``brokerName``
    for one store). Each store's config is ``cfg`` (or the defaults) with its segment sizes from its
    files. Raises :class:`~rmqstore.errors.StoreNotFoundError` / ``ConfigError`` naming the location."""
    given = [locations] if isinstance(locations, (str, os.PathLike)) else list(locations)
    paths = [str(p) if RFS.is_remote(str(p)) or str(p).startswith("file:") else os.path.abspath(p) for p in given]
    locs = list(parse_options({**(options or {}), "paths": json.dumps(paths)}, streaming=False, base_cfg=cfg).stores)
    names = [loc.broker_name for loc in locs]
    if len(set(names)) < len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ConfigError(f"several stores are named {', '.join(dup)} (broker.conf or directory name): their results "
                          "would be mixed up; give each store its own directory name or brokerName")
    return locs


def fs_spec(*locations: str) -> dict:
    """The ``fs`` entry of a task spec: the S3 settings of each remote location (see :func:`rmqstore.spark.tasks.open_fs`)."""
    return {loc: RFS.settings_for(loc) for loc in locations if RFS.is_remote(loc)}


def per_store(locs: list[StoreLoc], run_one, totals: tuple[str, ...], **extra) -> dict:
    """``run_one(loc)`` for each store: its result alone for one store, else ``stores`` (per broker
    name) with the ``totals`` summed over the stores."""
    if len(locs) == 1:
        return run_one(locs[0])
    t0 = time.perf_counter()
    per = {loc.broker_name: run_one(loc) for loc in locs}
    out = {k: sum(r.get(k) or 0 for r in per.values()) for k in totals}
    out.update(extra, stores=per, seconds=time.perf_counter() - t0)
    return out


MIN_JOB_SPLIT = 4 << 20


def job_split_size(spark: SparkSession, store_dir: str | list[StoreLoc], cfg: MessageStoreConfig | None = None) -> int:
    """Split size for a job over one store (or a list of stores read at once): about three byte
    ranges per core, between 4 MiB and 64 MiB (a Spark task costs tens of milliseconds; a range is
    what one task holds)."""
    locs = store_dir if isinstance(store_dir, list) else [StoreLoc(store_dir, cfg, "")]
    total = sum(len(S.list_segments(loc.store_dir, loc.seg_size)) * loc.seg_size for loc in locs)
    return max(MIN_JOB_SPLIT, min(S.DEFAULT_SPLIT_SIZE, -(-total // (3 * parallelism(spark)))))


# ================================================================================================
# Reading the store as a DataFrame with a given config
# ================================================================================================

def source_options(cfg: MessageStoreConfig) -> dict[str, str]:
    """``cfg`` as options of the ``rocketmq`` source (the fields that differ from the defaults)."""
    default = MessageStoreConfig()
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if v != getattr(default, f.name):
            out[f.name] = ",".join(map(str, v)) if isinstance(v, tuple) else str(v).lower() if isinstance(v, bool) \
                else str(v)
    return out


def read_store(spark: SparkSession, store_dir, cfg: MessageStoreConfig | None = None,
               schema: str | None = None, **options) -> DataFrame:
    """``spark.read.format("rocketmq")`` on ``store_dir`` (a location, or a list of them) with ``cfg``
    and extra options."""
    register(spark)
    r = spark.read.format("rocketmq")
    if schema is not None:
        r = r.schema(schema)
    for k, v in {**(source_options(cfg) if cfg is not None else {}), **options}.items():
        r = r.option(k, str(v).lower() if isinstance(v, bool) else str(v))
    return r.load(store_dir)
