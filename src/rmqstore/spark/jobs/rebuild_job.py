"""The Spark rebuild: consume queues and index files from the commitlog, byte-identical to the
in-process rebuild (:func:`rmqstore.rebuild.rebuild`)."""
from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import time
import uuid

from pyspark.sql import SparkSession

from ...config import MessageStoreConfig
from ...engine.index import index_file_name
from ...engine.rebuild import check_output
from ...errors import CorruptRecordError, OutputExistsError, StoreIOError
from ...rebuild import check_new_output
from ...io import paths
from .. import fs as RFS
from .. import tasks as I
from .. import scan as S
from ..options import StoreLoc
from . import runtime as R
from .runtime import Row, Steps, fs_spec, job_conf, lpt, parallelism, per_store, register, stores

log = logging.getLogger(__name__)


class _Dispatch:
    """Dispatch every commitlog span (stage 1 of rebuild): the span summaries, the end of valid
    data ``end`` and how many spans hold records before it (``used_spans``: ids ``< used_spans``)."""

    def __init__(self, spark: SparkSession, loc: StoreLoc, split_size: int, check_crc: bool, steps: Steps,
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
                "prop_crc": check_crc and cfg.force_verify_prop_crc, "tmp": tmp, "fs": fs_spec(store_dir)}
        self.info: list[dict] = []
        self.summaries: list[S.SpanSummary] = []
        self.end = S.ChainEnd(self.segments[0] if self.segments else 0, S.END)
        self.used_spans = 0
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
        used = [sid for sid, sm in enumerate(self.summaries) if sm.first is not None and sm.first < end.offset]
        self.used_spans = used[-1] + 1 if used else 0
        steps.mark("chain")

    def counts(self) -> list[dict]:
        """What was dispatched per span, for the spans before the end of valid data, in order."""
        return [x["dispatch"] for x in self.info[:self.used_spans]]


def _dispatch_spans(spark: SparkSession, spec: dict, groups: list[list[list[int]]]) -> list[dict]:
    """Dispatch every span of ``groups`` (one group per task); the span summaries in span order
    (:func:`run_claimed` with :func:`rmqstore.spark.tasks.dispatch_claimed`). A span dispatched twice writes
    the same files (renamed into place) and the first summary is kept."""
    info = R.run_claimed(spark, I.dispatch_claimed, I.dispatch_task, spec, groups)
    return [info[sid] for sid in sorted(info)]


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


#: Bytes of commitlog data one dispatch task covers at most (the spans of a task run one after the
#: other, so this bounds a task's time, not its memory: that is one span, at most the split size).
MAX_TASK_BYTES = 1 << 30


def dispatch_tasks(spark: SparkSession, lo: int, hi: int) -> int:
    """How many dispatch tasks cover the data ``[lo, hi)``: a multiple of the cores, one per core
    unless that makes a task cover more than ``MAX_TASK_BYTES``. Every task is a fixed cost (tens of
    milliseconds of the JVM and the Python worker, on the cores the tasks use); equal tasks, one per
    core, finish together."""
    cores = parallelism(spark)
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

    return per_store(locs, one, ("records", "consume_queues", "index_files"), out_dir=out_dir)


def _rebuild_to_remote(spark: SparkSession, loc: StoreLoc, out: str, staging_dir: str | None,
                       split_size: int | None, index_shards: int | None) -> dict:
    """Rebuild into a local staging directory, then upload its files to ``out`` (its settings
    registered) with executor tasks."""
    for sub in (paths.CONSUMEQUEUE, paths.INDEX):
        if RFS.exists(out, RFS.settings_for(out), sub):
            raise OutputExistsError(f"output location already holds {sub}/", path=out)
    stage = tempfile.mkdtemp(prefix="rmqstore-rebuild-", dir=staging_dir)
    try:
        result = _rebuild_store(spark, loc, stage, split_size, index_shards)
        t0 = time.perf_counter()
        files = sorted(os.path.relpath(os.path.join(d, n), stage) for d, _, names in os.walk(stage) for n in names)
        items = [[i, rel] for i, rel in enumerate(files)]
        spec = {"src": stage, "dst": out, "fs": fs_spec(out)}
        sent = [x for r in R.run_tasks(spark, I.upload_task, spec, I.group_evenly(items, 2 * parallelism(spark)))
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
    store_dir = loc.store_dir
    check_new_output(out_dir, store_dir)
    check_output(store_dir, out_dir)
    register(spark)
    split_size = split_size or R.job_split_size(spark, [loc])
    steps = Steps()
    with job_conf(spark):
        # like the dispatcher (upstream reput), records are not CRC-checked (a torn last record is)
        tmp = os.path.join(out_dir, I.TMP_DIR, uuid.uuid4().hex)
        d = _Dispatch(spark, loc, split_size, check_crc=False, steps=steps, tmp=tmp)
        try:
            result = _rebuild(spark, d, out_dir, steps, tmp, index_shards) if d.info else \
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
    """The heaviest bin of the longest-processing-time assignment (:func:`lpt`)."""
    load = [0] * n
    for b, w in zip(lpt(weights, n), weights):
        load[b] += w
    return max(load, default=0)


def plan_index_shards(items: list[int], cores: int, others: list[int] = ()) -> list[int]:
    """How many shards each index file (of ``items[k]`` items) is written in, at most ``cores``:
    from one each, the file with the heaviest shards gets one more as long as that lowers the
    heaviest task of the plan the writers run (:func:`lpt` over the shards and the ``others``,
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


def _queue_work(counts: list[dict]) -> tuple[int, list]:
    """The write work of the consume queues (each queue's units, span after span: commitlog
    order), as ``(kind, key, weight, payload)``, and how many queues there are."""
    queues: dict[tuple[str, int], list] = {}
    for c in counts:
        for t, q, first, n in c["queues"]:
            queues.setdefault((t, q), []).append([c["cq_path"], first, n])
    work = [("queue", (t, q), queue_write_weight(sum(x[2] for x in sl)), [t, q, sl])
            for (t, q), sl in sorted(queues.items())]
    return len(queues), work


def _prepare_index_files(cfg: MessageStoreConfig, counts: list[dict], tmp: str) -> list[tuple]:
    """The index files, prepared in ``tmp`` by the driver (empty, header from the predecessor's last
    item): ``(k, path, slices, items)`` each. Items are ranked in commitlog order; file k holds ranks
    ``[k*cap, (k+1)*cap)``, the ``slices`` ``[path, first, n]`` of the spans' item files."""
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

    build = paths.index_dir(tmp)
    os.makedirs(build, exist_ok=True)
    base_ms = int(time.time() * 1000)
    files = []
    for k in range(nfiles):
        items = ranks(k * cap, min((k + 1) * cap, total))
        path = os.path.join(build, index_file_name(base_ms + k))
        I.prepare_index_file(cfg, path, ranks(k * cap - 1, k * cap)[0] if k else None)
        files.append((k, path, items, sum(x[2] for x in items)))
    return files


def _index_work(files: list[tuple], nshards: list[int]) -> list:
    """The write work of the index files: their shards, which fill disjoint runs of ranks and slots
    of a file in parallel."""
    work = []
    for (k, path, items, n), m in zip(files, nshards):
        for j in range(m if n else 0):
            work.append(("index", k, index_shard_weight(n, m), [k, path, items, j, m]))
    return work


def _write_groups(work: list, cores: int) -> list[list]:
    """The work spread over the tasks, biggest first, each to the least loaded task; each task's
    items heaviest first, so that what other tasks claim from its back end is light."""
    ntasks = max(1, min(cores, len(work)))
    planned: list[list] = [[] for _ in range(ntasks)]
    for item_id, ((kind, _, weight, payload), b) in enumerate(zip(work, lpt([w[2] for w in work], ntasks))):
        planned[b].append((-weight, item_id, [item_id, kind, payload]))
    return [[item for *_, item in sorted(g)] for g in planned]


def _finish_index_files(cfg: MessageStoreConfig, files: list[tuple], rows: list, out_dir: str) -> None:
    """Check the shards' counts, write each index file's header and move it into ``out_dir``."""
    shard_rows: dict[int, list] = {}
    for r in rows:
        if r.kind == "index":
            shard_rows.setdefault(r.file, []).append(r)
    for k, path, items, n in files:
        mine = shard_rows.get(k, [])
        if sum(r["count"] for r in mine) != n:
            raise RuntimeError(f"index file {k}: the shards wrote {sum(r['count'] for r in mine)} items, expected {n}")
        I.finish_index_file(cfg, path, items, sum(r.slots for r in mine), paths.index_dir(out_dir))


def _rebuild(spark: SparkSession, d: _Dispatch, out_dir: str, steps: Steps, tmp: str,
             index_shards: int | None) -> dict:
    """Stage 2 of rebuild: write the consume queues and index files of what ``d`` dispatched,
    spread over one task per core."""
    cfg = d.cfg
    counts = d.counts()
    records = sum(c["records"] for c in counts)
    if records == 0:
        return {"records": 0, "consume_queues": 0, "index_files": 0}
    nqueues, work = _queue_work(counts)
    files = _prepare_index_files(cfg, counts, tmp) if cfg.message_index_enable else []
    if files:
        nshards = [index_shards] * len(files) if index_shards else \
            plan_index_shards([n for *_, n in files], parallelism(spark), [w[2] for w in work])
        work += _index_work(files, nshards)
    groups = _write_groups(work, parallelism(spark))
    steps.mark("plan_write")
    spec = {"out": out_dir, "cfg": I.cfg_to_json(cfg), "tmp": tmp}
    done = R.run_claimed(spark, I.write_claimed, I.write_task, spec, groups) if work else {}
    rows = [Row(r) for item_id in sorted(done) for r in done[item_id]]
    steps.mark("write")
    written_queues = sum(1 for r in rows if r.kind == "queue")
    _finish_index_files(cfg, files, rows, out_dir)
    steps.mark("finish")
    if written_queues != nqueues:
        raise RuntimeError(f"rebuild wrote {written_queues} queues, expected {nqueues}")
    return {"records": records, "consume_queues": written_queues, "index_files": len(files)}
