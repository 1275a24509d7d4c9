"""Spark jobs over a store: ``rebuild``, ``verify``, ``export``, ``stats``.

Every job reads the store through executors only: the driver lists the commitlog (file names and
sizes; for ``rebuild`` also where the last segment's data seems to end, a few 4 KiB reads to weigh
the work), plans byte ranges and collects small summaries. Data moves between Python and the JVM as
Arrow batches through the Python Data Source API (:mod:`.internal`), and Spark SQL does the
shuffles, sorts and aggregations; ``rebuild``, which moves no rows, runs its two stages as RDD jobs
of planned tasks (cheaper to launch). Outputs (``rebuild``, ``export``) are written by executors, so
on a cluster the store and output paths must be visible to every executor (a shared filesystem).

Every job takes what the ``rocketmq`` source takes (:func:`stores`): a store directory, a ``file:``
URI, a glob, an ``s3://``/``s3a://``/``hdfs://`` location, or a list of them. Several stores are
run one after the other, each on all the cores, and answered per broker (``stores``) with totals.
A remote store is read by the executors with ranged reads (:mod:`.fs`); ``rebuild`` writes a
remote output through a local staging directory (``staging_dir``) that executor tasks upload.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
import uuid

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..config import MessageStoreConfig
from ..engine.index import index_file_name
from ..errors import ConfigError, CorruptRecordError, StoreIOError
from . import fs as RFS
from . import internal as I
from . import scan as S
from .options import StoreLoc, parse_options
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


class _Row(dict):
    """A task's result row (a dict) read as attributes or items, like a ``pyspark.sql.Row``."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _run_tasks(spark: SparkSession, fn, spec: dict, tasks: list) -> list:
    """``fn(spec, task)`` for every task, one Spark task each, as one RDD job (cheaper to launch
    than a Python data source read); the results in the order of ``tasks``."""
    if not tasks:
        return []

    def run(it):
        return [(i, fn(spec, t)) for i, t in it]

    out = spark.sparkContext.parallelize(list(enumerate(tasks)), len(tasks)).mapPartitions(run).collect()
    return [r for _, r in sorted(out, key=lambda x: x[0])]


def _parallelism(spark: SparkSession) -> int:
    return max(1, spark.sparkContext.defaultParallelism)


# ================================================================================================
# Shared: the dispatch rows of a whole store and its end of valid data
# ================================================================================================

class _Dispatch:
    """Dispatch every commitlog span (stage 1 of rebuild): the span summaries, the end of valid
    data ``end`` and the spans whose records lie before it (ids ``<= last_span``)."""

    def __init__(self, spark: SparkSession, loc: StoreLoc, split_size: int, check_crc: bool, steps: _Steps,
                 tmp: str):
        self.store_dir, self.cfg = store_dir, cfg = loc.store_dir, loc.cfg
        seg_size = cfg.mapped_file_size_commit_log
        self.segments = S.list_segments(store_dir, seg_size)
        groups, k = [], 0
        if self.segments:
            # equal bytes of data per task (the last segment is weighed by its written part)
            end = S.estimate_data_end(store_dir, self.segments[-1], seg_size)
            plan = S.plan_balanced(self.segments, seg_size, split_size, dispatch_tasks(spark, self.segments[0], end),
                                   end)
            if len(plan) > 1:  # tasks balance each other at run time (claims), on small spans at the ends
                plan = S.cut_tails(plan, steal_piece(end - self.segments[0], len(plan)), end)
            for g in plan:
                groups.append([[k + i, sp.seg, sp.start, sp.end] for i, sp in enumerate(g)])
                k += len(g)
        spec = {"store": store_dir, "cfg": I.cfg_to_json(cfg), "check_crc": check_crc,
                "prop_crc": check_crc and cfg.force_verify_prop_crc, "tmp": tmp, "fs": _fs(store_dir)}
        self.info: list[dict] = []
        self.summaries: list[S.SpanSummary] = []
        self.end = S.ChainEnd(self.segments[0] if self.segments else 0, S.END)
        self.last_span = -1
        if not groups:
            return
        steps.mark("plan")
        self.info = _dispatch_spans(spark, spec, groups)
        steps.mark("dispatch")
        self.summaries = [S.SpanSummary.from_dict(x) for x in self.info]
        self.end = end = S.stitch_chain(self.segments, seg_size, self.summaries)
        for sm in self.summaries:
            if sm.first is not None and sm.first < end.offset < (sm.chain_end or 0) or \
                    (sm.first is not None and sm.first < end.offset and sm.chain_end is None):
                raise CorruptRecordError(
                    f"records of the span [{sm.span.start}, {sm.span.end}) do not line up with the end of "
                    f"valid data at {end.offset} (a message body that looks like a record?); retry with "
                    "another split size", path=S.segment_path(store_dir, sm.span.seg), offset=end.offset)
        self.last_span = max((sid for sid, sm in enumerate(self.summaries)
                              if sm.first is not None and sm.first < end.offset), default=-1)
        steps.mark("chain")

    def counts(self) -> list[dict]:
        """What was dispatched per span, for the spans before the end of valid data, in order."""
        return [x["dispatch"] for x in self.info[:self.last_span + 1]]


def _dispatch_spans(spark: SparkSession, spec: dict, groups: list[list[list[int]]]) -> list[dict]:
    """Dispatch every span of ``groups`` (one group per task); the span summaries in span order
    (:func:`_run_claimed` with :func:`.internal.dispatch_claimed`). A span dispatched twice writes
    the same files (renamed into place) and the first summary is kept."""
    info = _run_claimed(spark, I.dispatch_claimed, I.dispatch_task, spec, groups)
    return [info[sid] for sid in sorted(info)]


def _run_claimed(spark: SparkSession, claimed_fn, plain_fn, spec: dict, groups: list[list[list]]) -> dict:
    """Run every item of ``groups`` (one group per task; an item is a list, its id first) and
    return ``{id: result}``. With more than one group the tasks run ``claimed_fn(spec, group)``,
    claiming items (:func:`.internal.claimed`), so a task slowed down by a busy core leaves its
    last items to the others. An item claimed by a task attempt whose result Spark drops (a failed
    attempt, the losing copy of a speculative task) comes back from no task: those items are run
    again by ``plain_fn(spec, items)`` in a second job, without claims; the first result is kept."""
    items = {it[0]: it for g in groups for it in g}
    if len(groups) > 1:
        out = [x for r in _run_tasks(spark, claimed_fn, dict(spec, groups=groups), list(range(len(groups))))
               for x in r]
    else:
        out = [x for r in _run_tasks(spark, plain_fn, spec, groups) for x in r]
    done: dict = {}
    for item_id, x in out:
        done.setdefault(item_id, x)
    missing = [items[i] for i in sorted(items) if i not in done]
    if missing:
        log.info("%s: %d claimed items came back from no task; running them again", plain_fn.__name__, len(missing))
        for r in _run_tasks(spark, plain_fn, spec, I.group_evenly(missing, _parallelism(spark))):
            for item_id, x in r:
                done.setdefault(item_id, x)
    if sorted(done) != sorted(items):
        raise RuntimeError(f"{plain_fn.__name__} returned items {sorted(set(done) ^ set(items))[:10]} unexpectedly")
    return done


#: Dynamic balancing of dispatch: the stealable half of a task's data is cut into about this many
#: spans (:func:`steal_piece`), each between ``MIN_STEAL_PIECE`` and ``MAX_STEAL_PIECE`` bytes.
STEAL_PIECES = 16
MIN_STEAL_PIECE = 1 << 20
MAX_STEAL_PIECE = 8 << 20


def steal_piece(data_bytes: int, tasks: int) -> int:
    """Size of the small spans at the back end of each dispatch task's group (:func:`.scan.cut_tails`).

    A span costs about 1.5 ms of its own (mapping, resynchronising, two files) on the benchmark VM,
    against about 10 ms per MiB of dispatching, so a few dozen extra spans cost well under 1%, while
    the tasks finish within one piece of each other: on 2 cores, one task ran 0.45 s longer than the
    other on the same bytes (a core slowed by a neighbour), with one task per core and no claims."""
    per_task = max(1, data_bytes // max(1, tasks))
    return max(MIN_STEAL_PIECE, min(MAX_STEAL_PIECE, per_task // (2 * STEAL_PIECES)))


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


def _fs(*locations: str) -> dict:
    """The ``fs`` entry of a task spec: the S3 settings of each remote location (see :func:`.internal.open_fs`)."""
    return {loc: RFS.settings_for(loc) for loc in locations if RFS.is_remote(loc)}


def _per_store(locs: list[StoreLoc], run_one, totals: tuple[str, ...], **extra) -> dict:
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
    return max(MIN_JOB_SPLIT, min(S.DEFAULT_SPLIT_SIZE, -(-total // (3 * _parallelism(spark)))))


#: Bytes of commitlog data one dispatch task covers at most (the spans of a task run one after the
#: other, so this bounds a task's time, not its memory: that is one span, at most the split size).
MAX_TASK_BYTES = 1 << 30


def dispatch_tasks(spark: SparkSession, lo: int, hi: int) -> int:
    """How many dispatch tasks cover the data ``[lo, hi)``: a multiple of the cores, one per core
    unless that makes a task cover more than ``MAX_TASK_BYTES``. Every task is a fixed cost (tens of
    milliseconds of the JVM and the Python worker, on the cores the tasks use); equal tasks, one per
    core, finish together."""
    cores = _parallelism(spark)
    return cores * max(1, -(-(hi - lo) // (cores * MAX_TASK_BYTES)))


# ================================================================================================
# rebuild
# ================================================================================================

def rebuild(spark: SparkSession, store_dir, out_dir: str, cfg: MessageStoreConfig | None = None, *,
            split_size: int | None = None, index_shards: int | None = None, options: dict | None = None,
            staging_dir: str | None = None) -> dict:
    """Write ``out_dir/consumequeue`` and ``out_dir/index`` from the commitlog of ``store_dir``, in
    parallel; byte-identical to the in-process rebuild (:func:`rmqstore.rebuild.rebuild`),
    index file names aside. The store is only read.

    Records are dispatched per commitlog byte range (spans of at most ``split_size`` bytes, grouped
    into tasks of equal bytes of data, one per core: :func:`dispatch_tasks`; with several tasks the
    back half of each group is cut into small spans and the tasks claim spans from each other's
    back ends as they go, :func:`_dispatch_spans`); consume queues are written per queue (each
    record carries its queue offset, so a queue only needs its own rows in commitlog order); index
    items are ranked in commitlog order (per-range counts, prefix sums on the driver), which fixes
    the file and slot of each, so every index file is built on its own, and a big one by several
    tasks at once, each writing a run of its items and a run of its slot table (``index_shards`` per file; default:
    enough that no task outweighs an even share of the write step, at most one per core); the
    writing is spread over one task per core, biggest piece first to the least loaded task.

    ``store_dir`` is anything :func:`stores` takes; with several stores each is rebuilt into
    ``out_dir/<brokerName>``. ``out_dir`` may be local or remote (``s3://``, ``s3a://``, ``hdfs://``,
    settings from ``options`` as for the source): a remote output is written to ``staging_dir``
    (default: a new temporary directory; on a cluster it must be shared by the executors, as a
    local output must) and uploaded by executor tasks, file by file, then the staging is removed.

    Returns ``records``, ``consume_queues``, ``index_files``, ``seconds``, ``end_offset``, ``out_dir``
    and ``steps`` (several stores: the totals and ``stores``, each store's result by broker name):
    seconds per step (``plan``, ``dispatch``, ``chain``, ``plan_write``, ``write``,
    ``finish``; ``dispatch`` and ``write`` are the two Spark jobs)."""
    locs = stores(store_dir, cfg, options)
    remote_out = RFS.is_remote(out_dir)
    out_settings = RFS.s3_settings({RFS.S3_OPTIONS[k.lower()]: str(v) for k, v in (options or {}).items()
                                    if k.lower() in RFS.S3_OPTIONS})
    if not remote_out:
        out_dir = os.path.abspath(out_dir)

    def one(loc: StoreLoc) -> dict:
        out = out_dir if len(locs) == 1 else \
            (RFS.join(out_dir, loc.broker_name) if remote_out else os.path.join(out_dir, loc.broker_name))
        if remote_out:
            RFS.register(out, out_settings)
            return _rebuild_to_remote(spark, loc, out, staging_dir, split_size, index_shards)
        return _rebuild_store(spark, loc, out, split_size, index_shards)

    return _per_store(locs, one, ("records", "consume_queues", "index_files"), out_dir=out_dir)


def _rebuild_to_remote(spark: SparkSession, loc: StoreLoc, out: str, staging_dir: str | None,
                       split_size: int | None, index_shards: int | None) -> dict:
    """Rebuild into a local staging directory, then upload its files to ``out`` (its settings
    registered) with executor tasks."""
    for sub in ("consumequeue", "index"):
        if RFS.exists(out, RFS.settings_for(out), sub):
            raise StoreIOError(f"output location already holds {sub}/", path=out)
    stage = tempfile.mkdtemp(prefix="rmqstore-rebuild-", dir=staging_dir)
    try:
        result = _rebuild_store(spark, loc, stage, split_size, index_shards)
        t0 = time.perf_counter()
        files = sorted(os.path.relpath(os.path.join(d, n), stage) for d, _, names in os.walk(stage) for n in names)
        items = [[i, rel] for i, rel in enumerate(files)]
        spec = {"src": stage, "dst": out, "fs": _fs(out)}
        sent = [x for r in _run_tasks(spark, I.upload_task, spec, I.group_evenly(items, 2 * _parallelism(spark)))
                for x in r]
        if sorted(i for i, _ in sent) != [i for i, _ in items]:
            raise StoreIOError(f"upload of the rebuilt files: {len(sent)} of {len(items)} reported", path=out)
        result["steps"]["upload"] = round(time.perf_counter() - t0, 4)
        result.update(out_dir=out, uploaded_bytes=sum(n for _, n in sent),
                      seconds=result["seconds"] + result["steps"]["upload"])
        return result
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _rebuild_store(spark: SparkSession, loc: StoreLoc, out_dir: str, split_size: int | None,
                   index_shards: int | None) -> dict:
    """:func:`rebuild` of one store into a local ``out_dir``."""
    t0 = time.perf_counter()
    store_dir, cfg = loc.store_dir, loc.cfg
    if out_dir == store_dir:
        raise StoreIOError("rebuild output must not be the source store", path=out_dir)
    for sub in ("consumequeue", "index"):
        if os.path.exists(os.path.join(out_dir, sub)):
            raise StoreIOError(f"output directory already holds {sub}/", path=out_dir)
    os.makedirs(out_dir, exist_ok=True)
    register(spark)
    split_size = split_size or job_split_size(spark, [loc])
    P = _parallelism(spark)  # writer tasks: one per core, balanced by weight
    steps = _Steps()
    with _job_conf(spark):
        # like the dispatcher (upstream reput), records are not CRC-checked (a torn last record is)
        tmp = os.path.join(out_dir, I.TMP_DIR, uuid.uuid4().hex)
        d = _Dispatch(spark, loc, split_size, check_crc=False, steps=steps, tmp=tmp)
        try:
            result = _rebuild(spark, d, cfg, out_dir, P, steps, tmp, index_shards) if d.info else \
                {"records": 0, "consume_queues": 0, "index_files": 0}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(os.path.join(out_dir, I.TMP_DIR), ignore_errors=True)
    result.update(end_offset=d.end.offset, out_dir=out_dir, seconds=time.perf_counter() - t0, steps=steps.times)
    return result


#: What writing one consume queue costs besides its units, in the weight of the write plan (where
#: a unit weighs 1 and an index item about 2.25): the queue's directory and first file are created
#: and reserved, synced and renamed into place. Calibrated on the 1M-message benchmark store (19
#: queues, 1M units, a 1.9M-item index file): the queues took 0.18-0.29 s together and the index
#: file 0.34-0.46 s, so about 5 ms a queue besides its units, some 50,000 weight.
QUEUE_FIXED_WEIGHT = 50_000


def queue_write_weight(units: int) -> int:
    """Weight of writing a consume queue of ``units`` units, for balancing the writer tasks."""
    return units + QUEUE_FIXED_WEIGHT


#: What a shard of an index file costs besides its items (mapping the file, reading its slices).
SHARD_FIXED_WEIGHT = 50_000


def index_shard_weight(items: int, shards: int) -> int:
    """Weight of one of ``shards`` shards of an index file of ``items`` items: its share of the
    items and slots, plus a quarter of all the file's items, which every shard reads (the chains
    before its own run), plus a fixed cost."""
    return (2 * items + 1) // shards + items // 4 + SHARD_FIXED_WEIGHT


def _makespan(weights: list[int], n: int) -> int:
    """The heaviest bin of the longest-processing-time assignment (:func:`_lpt`)."""
    load = [0] * n
    for b, w in zip(_lpt(weights, n), weights):
        load[b] += w
    return max(load, default=0)


def plan_index_shards(items: list[int], cores: int, others: list[int] = ()) -> list[int]:
    """How many shards each index file (of ``items[k]`` items) is written in, at most ``cores``:
    from one each, the file with the heaviest shards gets one more as long as that lowers the
    heaviest task of the plan the writers run (:func:`_lpt` over the shards and the ``others``,
    the consume queues' weights) by at least 5%. A shard costs more than its share (it reads all
    the file's items), so a file is split only where that shortens the write step."""
    shards = [1] * len(items)
    if cores <= 1:
        return shards

    def span(m: list[int]) -> int:
        return _makespan(list(others) + [index_shard_weight(n, k) for n, k in zip(items, m) for _ in range(k)], cores)

    best = span(shards)
    while True:
        open_ = [i for i, n in enumerate(items) if n and shards[i] < cores]
        if not open_:
            return shards
        i = max(open_, key=lambda i: index_shard_weight(items[i], shards[i]))
        shards[i] += 1
        cand = span(shards)
        if cand > best * 0.95:
            shards[i] -= 1
            return shards
        best = cand


def _rebuild(spark: SparkSession, d: _Dispatch, cfg: MessageStoreConfig, out_dir: str, P: int, steps: _Steps,
             tmp: str, index_shards: int | None) -> dict:
    counts = d.counts()
    records = sum(c["records"] for c in counts)
    if records == 0:
        return {"records": 0, "consume_queues": 0, "index_files": 0}
    # consume queues: each queue's units, span after span (commitlog order)
    queues: dict[tuple[str, int], list] = {}
    for c in counts:
        for t, q, first, n in c["queues"]:
            queues.setdefault((t, q), []).append([c["cq_path"], first, n])
    work = [("queue", (t, q), queue_write_weight(sum(x[2] for x in sl)), [t, q, sl])
            for (t, q), sl in sorted(queues.items())]
    # index files: items ranked in commitlog order; file k holds ranks [k*cap, (k+1)*cap). The
    # driver prepares each file (empty, header from its predecessor's last item); shards with
    # disjoint runs of ranks and slots fill it in parallel; the driver writes the header and moves it in place.
    files = []
    if cfg.message_index_enable:
        cap = cfg.max_index_num - 1
        total = sum(c["items"] for c in counts)
        last = max(c["last"] for c in counts)
        last_keyed = max(c["last_keyed"] for c in counts)
        # upstream opens a new file when a record arrives while the current one is full
        nfiles = 1 if total == 0 else math.ceil(total / cap) + (1 if total % cap == 0 and last_keyed < last else 0)
        spans = [(c["idx_path"], c["items"]) for c in counts if c["items"]]
        bases = [0]
        for _, n in spans:
            bases.append(bases[-1] + n)

        def ranks(lo: int, hi: int) -> list:
            """Slices ``[path, first, n]`` of the items ranked ``[lo, hi)``."""
            out = []
            for (path, n), b in zip(spans, bases):
                a, z = max(lo, b), min(hi, b + n)
                if a < z:
                    out.append([path, a - b, z - a])
            return out

        build = os.path.join(tmp, "index")
        os.makedirs(build, exist_ok=True)
        base_ms = int(time.time() * 1000)
        for k in range(nfiles):
            items = ranks(k * cap, min((k + 1) * cap, total))
            path = os.path.join(build, index_file_name(base_ms + k))
            I.prepare_index_file(cfg, path, ranks(k * cap - 1, k * cap)[0] if k else None)
            files.append((k, path, items, sum(x[2] for x in items)))
        nshards = [index_shards] * len(files) if index_shards else \
            plan_index_shards([n for *_, n in files], _parallelism(spark), [w[2] for w in work])
        for (k, path, items, n), m in zip(files, nshards):
            for j in range(m if n else 0):
                work.append(("index", k, index_shard_weight(n, m), [k, path, items, j, m]))
    # spread the work over the tasks, biggest first, each to the least loaded task; each task's
    # items heaviest first, so that what other tasks claim from its back end is light
    ntasks = max(1, min(P, len(work)))
    planned: list[list] = [[] for _ in range(ntasks)]
    for item_id, ((kind, _, weight, payload), b) in enumerate(zip(work, _lpt([w[2] for w in work], ntasks))):
        planned[b].append((-weight, item_id, [item_id, kind, payload]))
    groups = [[item for *_, item in sorted(g)] for g in planned]
    steps.mark("plan_write")
    spec = {"out": out_dir, "cfg": I.cfg_to_json(cfg), "tmp": tmp}
    done = _run_claimed(spark, I.write_claimed, I.write_task, spec, groups) if work else {}
    rows = [_Row(r) for item_id in sorted(done) for r in done[item_id]]
    steps.mark("write")
    written_queues = sum(1 for r in rows if r.kind == "queue")
    shard_rows: dict[int, list] = {}
    for r in rows:
        if r.kind == "index":
            shard_rows.setdefault(r.file, []).append(r)
    for k, path, items, n in files:
        mine = shard_rows.get(k, [])
        if sum(r["count"] for r in mine) != n:
            raise RuntimeError(f"index file {k}: the shards wrote {sum(r['count'] for r in mine)} items, expected {n}")
        I.finish_index_file(cfg, path, items, sum(r.slots for r in mine), os.path.join(out_dir, "index"))
    steps.mark("finish")
    written_files = len(files)
    if written_queues != len(queues):
        raise RuntimeError(f"rebuild wrote {written_queues} queues, expected {len(queues)}")
    return {"records": records, "consume_queues": written_queues, "index_files": written_files}


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


# ================================================================================================
# export
# ================================================================================================

def export(spark: SparkSession, store_dir, out_dir: str, cfg: MessageStoreConfig | None = None,
           include_body: bool = False, options: dict | None = None) -> dict:
    """Every record to Parquet under ``out_dir``, partitioned by ``topic`` and ``date`` (the UTC day
    of the store time, ``yyyy-MM-dd``), every column of the source (``body`` only with
    ``include_body``; ``brokerName`` tells the stores apart when several are read: ``store_dir`` is
    anything :func:`stores` takes). ``out_dir`` may be any path Spark writes to (``s3a://`` with
    Hadoop's S3 connector on the classpath); it must not exist.
    Returns ``rows``, ``files``, ``out_dir``, ``seconds``."""
    t0 = time.perf_counter()
    locs = stores(store_dir, cfg, options)
    if "://" not in out_dir:
        out_dir = os.path.abspath(out_dir)
        if os.path.exists(out_dir):
            raise StoreIOError("export output already exists", path=out_dir)
    df = read_store(spark, [loc.store_dir for loc in locs], cfg, includeBody=include_body,
                    splitSize=job_split_size(spark, locs), **(options or {}))
    if not include_body:
        df = df.drop("body")
    day = F.date_from_unix_date(F.floor(F.unix_millis("storeTimestamp") / 86_400_000).cast("int"))
    df = df.withColumn("date", F.date_format(day, "yyyy-MM-dd"))
    df.repartition("topic", "date").write.partitionBy("topic", "date").parquet(out_dir)
    written = spark.read.parquet(out_dir)
    return {"rows": written.count(), "files": len(written.inputFiles()), "out_dir": out_dir,
            "seconds": time.perf_counter() - t0}


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
    with _job_conf(spark, **{"spark.sql.shuffle.partitions": str(2 * _parallelism(spark))}):
        return _per_store(locs, lambda loc: _stats(spark, loc, top, job_split_size(spark, [loc]), options),
                          ("records", "bytes"))


def _stats(spark: SparkSession, loc: StoreLoc, top: int, split: int, options: dict | None) -> dict:
    t0 = time.perf_counter()
    steps = _Steps()
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


def _key_stats(spark: SparkSession, store_dir: str, cfg: MessageStoreConfig, top: int, steps: _Steps,
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
    spec = {"store": store_dir, "cfg": I.cfg_to_json(cfg), "groups": groups, "fs": _fs(store_dir)}
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
        names = [n for n, _ in RFS.list_files(store_dir, RFS.settings_for(store_dir), "index")]
        paths = names
    else:
        d = os.path.join(store_dir, "index")
        names = sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n))) if os.path.isdir(d) else []
        paths = [os.path.join(d, n) for n in names]
    if not names:
        return []
    groups = I.group_evenly(paths, 2 * _parallelism(spark))
    spec = {"groups": groups, "slots": cfg.max_hash_slot_num, "items": cfg.max_index_num, "store": store_dir,
            "fs": _fs(store_dir)}
    rows = {r.file: r for r in spark.read.format("rmqstore_index_profile").option("spec", json.dumps(spec))
            .load().collect()}
    out = []
    for n in names:
        r = rows[n]
        out.append({"file": n, "items": r["items"], "slots_used": r.slotsUsed, "longest_chain": r.longestChain,
                    "mean_chain": round(r["items"] / r.slotsUsed, 3) if r.slotsUsed else 0.0,
                    "hash_slot_count": r.hashSlotCount, "begin_timestamp": r.beginTs, "end_timestamp": r.endTs})
    return out


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
    from ..engine import verify as V
    from . import verify as SV

    t0 = time.perf_counter()
    store_dir, cfg = loc.store_dir, loc.cfg
    remote = RFS.is_remote(store_dir)
    register(spark)
    spark.dataSource.register(SV.VerifySource)
    split_size = split_size or job_split_size(spark, [loc])
    P = 2 * _parallelism(spark)
    seg_size = cfg.mapped_file_size_commit_log
    segments = S.list_segments(store_dir, seg_size)
    base = {"store": store_dir, "cfg": I.cfg_to_json(cfg), "segments": segments, "fs": _fs(store_dir)}
    steps = _Steps()

    def run(tasks: list[dict]) -> DataFrame:
        spec = dict(base, tasks=tasks)
        return spark.read.format("rmqstore_verify").option("spec", json.dumps(spec)).load()

    findings: list = []
    light = SV.light_files(store_dir, segments, seg_size)
    with _job_conf(spark, **{"spark.sql.shuffle.partitions": str(P)}):
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
        stub = SV.stub_verifier(store_dir, cfg, light)
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
            cq_root = os.path.join(store_dir, "consumequeue")
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
            idx_dir = os.path.join(store_dir, "index")
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
