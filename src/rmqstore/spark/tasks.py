"""The tasks of the rebuild job (not for users).

Rebuild runs two stages as plain RDD jobs (``parallelize(tasks).mapPartitions``, see
:func:`.jobs.runtime.run_tasks`): a task gets its part of a JSON-able spec the driver wrote, does its
work on files and returns a small summary. Launching an RDD job costs less than a Python data
source read (which plans its partitions in a Python worker of its own), and no row of data crosses
the JVM in either stage.

* :func:`dispatch_task`: per commitlog span, the records are dispatched with the in-process
  dispatcher's batch codec (:func:`~rmqstore.engine.dispatch.extract_dispatch_columns`); the
  consume-queue units and index items go to two files per span under the rebuild output's
  temporary directory and the task returns the span's summary (:class:`~.scan.SpanSummary`, counts,
  where each queue's units are). On more than one core the tasks run :func:`dispatch_claimed`:
  each claims spans (a claim file per span) from its own group, then from the others' back ends.
* :func:`write_task`: planned by the driver from those summaries, each writing some consume
  queues (``ConsumeQueue.put_units`` in commitlog order, as the dispatcher) and some shards of
  index files (``IndexFile.put_shard`` over the items ranked for the file; the driver prepares each
  file, its header started from the previous file's last item, and finishes it). On more than one
  core the tasks run :func:`write_claimed`, claiming the queues and shards as the dispatch tasks
  claim spans.

The stats job's internal data sources are in :mod:`.stats_sources`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import uuid

import numpy as np
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..config import MessageStoreConfig
from ..format import message as M
from ..format.arrays import stable_argsort
from . import fs as RFS
from . import scan as S
from ..io import paths

TMP_DIR = ".rmqstore-spark-tmp"


def cfg_to_json(cfg: MessageStoreConfig) -> dict:
    return dataclasses.asdict(cfg)


def cfg_from_json(d: dict) -> MessageStoreConfig:
    names = {f.name for f in dataclasses.fields(MessageStoreConfig)}
    return MessageStoreConfig(**{k: v for k, v in d.items() if k in names})


def spec_of(options) -> dict:
    raw = options.get("spec")
    if not raw:
        raise ValueError("internal rmqstore data source used without its spec option")
    return json.loads(raw)


class SpecReader(DataSourceReader):
    """The reader of an internal data source: the job's spec (decoded) and the schema."""

    def __init__(self, spec: dict, schema):
        self.spec, self.schema = spec, schema


class SpecSource(DataSource):
    """An internal data source of a job, whose one option is the job's JSON spec (:func:`spec_of`):
    a subclass names its ``NAME``, ``SCHEMA`` and ``READER`` (a :class:`SpecReader`)."""

    NAME: str = ""
    SCHEMA = None
    READER: type = SpecReader

    @classmethod
    def name(cls) -> str:
        return cls.NAME

    def schema(self):
        return self.SCHEMA

    def reader(self, schema):
        return self.READER(spec_of(self.options), schema)


def open_fs(spec: dict) -> None:
    """Make the remote locations of a job's spec openable in this process (a task): ``spec["fs"]``
    maps each remote location (store or output) to its S3 settings, as the driver resolved them."""
    for location, settings in (spec.get("fs") or {}).items():
        RFS.register(location, settings)


def upload_task(spec: dict, files: list) -> list[tuple[int, int]]:
    """Copy ``files`` (``[item id, relative path]``) from the local directory ``spec["src"]`` to the
    remote location ``spec["dst"]`` (rebuild into object storage); ``(item id, bytes)`` per file."""
    open_fs(spec)
    return [(item_id, RFS.upload(os.path.join(spec["src"], rel), spec["dst"], rel)) for item_id, rel in files]


_MALLOC_TUNED = False


def tune_worker_malloc() -> None:
    """Keep freed memory in this Python worker's heap instead of returning it to the system.

    A task allocates and frees numpy temporaries of several MiB per batch. glibc serves blocks
    that big with a fresh ``mmap`` and unmaps them on free, so every batch faults its pages in
    again (on the VM of BENCHMARKS.md about 10 us per 4 KiB page, host-side, and two workers
    faulting at once slow each other down). A fixed 32 MiB mmap threshold and a high trim
    threshold keep that memory mapped for the next batch; the worker's peak use is unchanged.
    glibc only (``mallopt``); elsewhere, and with ``RMQSTORE_MALLOC_TUNING=0``, nothing changes."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED = True
    if os.environ.get("RMQSTORE_MALLOC_TUNING", "1") == "0":
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    mallopt(m_mmap_threshold, 32 << 20)
    mallopt(m_trim_threshold, 1 << 30)
    mallopt(m_top_pad, 64 << 20)


def _task_tmp(out_dir: str) -> str:
    d = os.path.join(out_dir, TMP_DIR, uuid.uuid4().hex)
    os.makedirs(d, exist_ok=True)
    return d



# ================================================================================================
# Dispatch
# ================================================================================================

#: A span's consume-queue units, grouped by queue (commitlog order within a queue), and its index
#: items in commitlog order: written by the dispatch task under the output's temporary directory
#: (the output must be visible to every executor anyway) and read back by the writer tasks, so the
#: bulk of the data never goes through the JVM.
CQ_UNIT_DTYPE = np.dtype([("queue_offset", "<i8"), ("phy", "<i8"), ("size", "<i4"), ("tags", "<i8")])
ITEM_DTYPE = np.dtype([("hash", "<i4"), ("phy", "<i8"), ("ts", "<i8")])


def _save(path: str, arr: np.ndarray) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}"
    arr.tofile(tmp)
    os.replace(tmp, path)


def load_slice(path: str, dtype: np.dtype, first: int, n: int) -> np.ndarray:
    return np.fromfile(path, dtype=dtype, count=n, offset=first * dtype.itemsize)


class SpansPartition(InputPartition):
    def __init__(self, index: int, spans: list[list[int]]):
        super().__init__(index)
        self.index, self.spans = index, spans  # [span id, segment start, start, end]


def dispatch_task(spec: dict, spans) -> list[tuple[int, dict]]:
    """One dispatch task (stage 1 of rebuild, run as an RDD task): ``spans`` (``[span id, segment
    start, start, end]``; any iterable, consumed lazily) one after the other with
    :func:`dispatch_span`, so the task holds one span's units and items at a time. spec: ``store``,
    ``cfg``, ``tmp``, ``check_crc``, ``prop_crc``, ``fs``. Returns ``(span id, summary)`` per span."""
    tune_worker_malloc()
    open_fs(spec)
    cfg = cfg_from_json(spec["cfg"])
    os.makedirs(spec["tmp"], exist_ok=True)
    opts = S.ScanOptions(check_crc=spec["check_crc"], prop_crc=spec["prop_crc"])
    return [(span_id, dispatch_span(spec["store"], cfg, span_id, S.Span(seg0, a, b), spec["tmp"], opts))
            for span_id, seg0, a, b in spans]


CLAIMS_DIR = "claims"


def claim_span(claims_dir: str, span_id: int) -> bool:
    """Claim span ``span_id`` for this task: True for the one caller that creates its claim file
    (``O_CREAT | O_EXCL`` is atomic on local filesystems and NFSv3+), False for every other.
    A claim is never released: a claimed span whose result is lost (a failed or a losing
    speculative task attempt) is found missing by the driver and run again without claims
    (:func:`.jobs.runtime.run_claimed`). Also used for the writer tasks' items."""
    try:
        fd = os.open(os.path.join(claims_dir, str(span_id)), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def claimed(spec: dict, home: int, claims_subdir: str):
    """The items this task wins, lazily: ``spec["groups"]`` holds every task's group of items
    (each a list whose first element is the item's id); the task of group ``home`` tries them in
    :func:`~.scan.claim_order` (its own group first, then the back ends of the others) and gets each
    whose claim it creates under ``spec["tmp"]/claims_subdir``, just before working on it. A task on
    a slower core thus ends up with fewer items instead of holding everyone up."""
    groups = spec["groups"]
    claims = os.path.join(spec["tmp"], claims_subdir)
    os.makedirs(claims, exist_ok=True)
    mine = (groups[g][i] for g, i in S.claim_order([len(g) for g in groups], home))
    return (item for item in mine if claim_span(claims, item[0]))


def dispatch_claimed(spec: dict, home: int) -> list[tuple[int, dict]]:
    """One dispatch task with dynamic balancing (stage 1 of rebuild on more than one core): the
    spans (``[span id, segment start, start, end]``) of :func:`claimed`, with :func:`dispatch_task`.
    Returns ``(span id, summary)`` per span this task dispatched."""
    return dispatch_task(spec, claimed(spec, home, CLAIMS_DIR))


def dispatch_span(store_dir: str, cfg: MessageStoreConfig, span_id: int, span: S.Span, tmp: str,
                  opts: S.ScanOptions) -> dict:
    """Dispatch the run of valid records starting in ``span`` (up to its first break; ``opts`` says
    which CRC to check) with the in-process dispatcher's batch codec: consume-queue units
    (NOT_TYPE and COMMIT records) and index items (UNIQ_KEY then KEYS tokens per record; none for
    ROLLBACK) go to the span's two files. Returns the span summary with ``dispatch``: counts, the
    files, and per queue where its units are (``[topic, queueId, first, n]``)."""
    summary = S.SpanSummary(span)
    out = _SpanDispatch(cfg)
    opts = dataclasses.replace(opts, salvage=False)
    for seg, batch in S.iter_span_batches(store_dir, cfg.mapped_file_size_commit_log, span, summary, opts=opts):
        out.add(seg, batch)
    info = summary.to_dict()
    info["dispatch"] = out.save(tmp, span_id)
    return info


class _SpanDispatch:
    """The consume-queue units and index items of one span's records, collected batch by batch."""

    def __init__(self, cfg: MessageStoreConfig):
        self.delay = cfg.delay_levels_ms
        self.topic_cache: dict[bytes, str] = {}
        self.qnames: dict[tuple[str, int], int] = {}
        self.units: list[np.ndarray] = []
        self.unit_q: list[np.ndarray] = []
        self.items: list[np.ndarray] = []
        self.records = 0
        self.last = self.last_keyed = -1

    def add(self, seg, batch) -> None:
        from ..engine.dispatch import extract_dispatch_columns

        cols = extract_dispatch_columns(seg.u8, batch, self.delay, self.topic_cache)
        pos = batch.starts + seg.start
        topic_ids = np.asarray(cols.topic_ids, dtype=np.int64)
        tx = batch.sys_flag & M.SYSFLAG_TX_MASK
        sel = np.flatnonzero((tx != M.TX_PREPARED) & (tx != M.TX_ROLLBACK))
        if sel.size:
            keys = topic_ids[sel] * (1 << 32) + batch.queue_id[sel].astype(np.int64)
            uk, inv = np.unique(keys, return_inverse=True)
            ids = np.array([self.qnames.setdefault((cols.topics[k >> 32], k & 0xFFFFFFFF), len(self.qnames))
                            for k in uk.tolist()], dtype=np.int64)
            u = np.empty(sel.size, dtype=CQ_UNIT_DTYPE)
            u["queue_offset"], u["phy"], u["size"] = batch.queue_offset[sel], batch.phy_offset[sel], batch.total[sel]
            u["tags"] = np.asarray(cols.tags_codes, dtype=np.int64)[sel]
            self.units.append(u)
            self.unit_q.append(ids[inv.ravel()])
        rec = np.asarray(cols.item_rec, dtype=np.int64)
        keep = tx[rec] != M.TX_ROLLBACK  # ROLLBACK records are never indexed
        rec = rec[keep]
        if rec.size:
            it = np.empty(rec.size, dtype=ITEM_DTYPE)
            it["hash"] = np.asarray(cols.item_hash, dtype=np.int64)[keep]
            it["phy"], it["ts"] = batch.phy_offset[rec], batch.store_timestamp[rec]
            self.items.append(it)
            self.last_keyed = int(pos[rec[-1]])
        self.records += len(batch)
        self.last = int(pos[-1])

    def save(self, tmp: str, span_id: int) -> dict:
        """Write the span's units (grouped by queue, commitlog order inside a queue) and items."""
        queues: list[list] = []
        cq_path = idx_path = None
        if self.units:
            u = np.concatenate(self.units)
            q = np.concatenate(self.unit_q)
            order = stable_argsort(q)
            u, q = u[order], q[order]
            cq_path = os.path.join(tmp, f"span-{span_id}.cq")
            _save(cq_path, u)
            bounds = np.flatnonzero(np.diff(q)) + 1
            names = {v: k for k, v in self.qnames.items()}
            for a, b in zip(np.concatenate([[0], bounds]).tolist(), np.concatenate([bounds, [q.size]]).tolist()):
                topic, qid = names[int(q[a])]
                queues.append([topic, qid, a, b - a])
        n_items = 0
        if self.items:
            it = np.concatenate(self.items)
            n_items = int(it.size)
            idx_path = os.path.join(tmp, f"span-{span_id}.idx")
            _save(idx_path, it)
        return {"records": self.records, "items": n_items, "last": self.last, "last_keyed": self.last_keyed,
                "queues": queues, "cq_path": cq_path, "idx_path": idx_path}


# ================================================================================================
# Writing consume queues and index files (the second stage of rebuild)
# ================================================================================================

def write_task(spec: dict, items) -> list[tuple[int, list[dict]]]:
    """One writer task (stage 2 of rebuild, run as an RDD task): ``items`` (``[id, "queue", [topic,
    queueId, slices]]`` with :func:`write_queue`, ``[id, "index", [file number, path, slices, shard,
    shards]]`` with :func:`write_index_shard`; any iterable, consumed lazily); spec ``out``, ``cfg``.
    Returns ``(id, rows)`` per item: a row per queue (``kind`` "queue", ``topic``, ``queueId``,
    ``count`` units, ``files``) or shard (``kind`` "index", ``file`` number, ``name``, ``count``
    items, ``slots`` it newly used). Writing an item twice writes the same bytes."""
    tune_worker_malloc()
    cfg = cfg_from_json(spec["cfg"])
    tmp_root = _task_tmp(spec["out"])
    try:
        out = []
        for item_id, kind, payload in items:
            if kind == "queue":
                topic, queue_id, slices = payload
                row = write_queue(cfg, tmp_root, spec["out"], topic, queue_id, slices)
            else:
                no, path, slices, shard, shards = payload
                row = write_index_shard(cfg, path, no, slices, shard, shards)
            out.append((item_id, [row]))
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return out


WRITE_CLAIMS_DIR = "write-claims"


def write_claimed(spec: dict, home: int) -> list[tuple[int, list[dict]]]:
    """One writer task with dynamic balancing (stage 2 of rebuild on more than one core): the
    items of :func:`claimed` (the heaviest of each group first, so that what others take from its
    back end is light), with :func:`write_task`."""
    return write_task(spec, claimed(spec, home, WRITE_CLAIMS_DIR))


#: Units of one consume queue put with one ``put_units`` call at most (24 bytes each in memory).
WRITE_QUEUE_UNITS = 1 << 20


def _runs_of_units(slices, limit: int) -> list[list]:
    """``[path, first, n]`` slices in order, cut into runs of consecutive slices of at most
    ``limit`` units each (a bigger slice is a run of its own)."""
    runs: list[list] = []
    size = 0
    for sl in slices:
        if runs and size + sl[2] <= limit:
            runs[-1].append(sl)
            size += sl[2]
        else:
            runs.append([sl])
            size = sl[2]
    return runs


def write_queue(cfg: MessageStoreConfig, tmp_root: str, out_dir: str, topic: str, qid: int, slices) -> dict:
    """One consume queue from its units (in commitlog order) with ``ConsumeQueue.put_units``, as
    the in-process dispatcher writes it; built privately, then renamed into place.

    Consecutive slices (one per dispatched span) are put together, up to ``WRITE_QUEUE_UNITS``
    units a call: what ``put_units`` writes does not depend on how the units are batched (they are
    in commitlog order, so no unit is dropped as already present), and each call has a fixed cost
    that many small spans (dynamic balancing) would otherwise multiply."""
    from ..engine.consume_queue import ConsumeQueue

    cq = ConsumeQueue(tmp_root, topic, qid, cfg, read_only=False)
    units = 0
    try:
        for run in _runs_of_units(slices, WRITE_QUEUE_UNITS):
            parts = [load_slice(path, CQ_UNIT_DTYPE, first, n) for path, first, n in run]
            b = np.concatenate(parts) if len(parts) > 1 else parts[0]
            cq.put_units(b["queue_offset"].astype(np.int64), b["phy"].astype(np.int64), b["size"].astype(np.int64),
                         b["tags"].astype(np.int64))
            units += int(b.size)
            del parts, b
        cq.flush(0)
        files = len(cq.queue.files)
    finally:
        cq.close()
    src = paths.consume_queue_dir(tmp_root, topic, qid)
    dst = paths.consume_queue_dir(out_dir, topic, qid)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.exists(dst):  # left by an earlier attempt of this task
        shutil.rmtree(dst)
    os.replace(src, dst)
    return {"kind": "queue", "topic": topic, "queueId": qid, "count": units, "files": files}


def index_items(slices) -> np.ndarray:
    """The items of one index file, in rank order, from their ``[path, first, n]`` slices."""
    parts = [load_slice(path, ITEM_DTYPE, first, n) for path, first, n in slices]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=ITEM_DTYPE)


def write_index_shard(cfg: MessageStoreConfig, path: str, no: int, slices, shard: int, shards: int) -> dict:
    """Shard ``shard`` of ``shards`` of index file ``no`` (prepared at ``path`` by the driver),
    with ``IndexFile.put_shard``: shards write disjoint bytes, so they run in parallel; the driver
    writes the header."""
    from ..engine.index import IndexFile

    b = index_items(slices)
    f = IndexFile(path, cfg.max_hash_slot_num, cfg.max_index_num, read_only=False)
    try:
        count, new_slots = f.put_shard(b["hash"].astype(np.int64), b["phy"].astype(np.int64),
                                       b["ts"].astype(np.int64), shard, shards)
        f.flush_data()
    finally:
        f.close()
    return {"kind": "index", "file": no, "name": os.path.basename(path), "count": count, "files": 0,
            "slots": new_slots}


def prepare_index_file(cfg: MessageStoreConfig, path: str, prev) -> None:
    """Create index file ``path`` empty, its header starting from the item ``prev`` (``[path,
    index]`` of the previous file's last item, or None), as a new file starts from its
    predecessor's end."""
    from ..engine.index import IndexFile

    prev_phy = prev_ts = 0
    if prev is not None:
        p = load_slice(prev[0], ITEM_DTYPE, prev[1], 1)
        prev_phy, prev_ts = int(p["phy"][0]), int(p["ts"][0])
    IndexFile.create(path, cfg.max_hash_slot_num, cfg.max_index_num,
                     prev_end_phy=prev_phy, prev_end_ts=prev_ts).close()


def finish_index_file(cfg: MessageStoreConfig, path: str, slices, slot_count: int, index_dir: str) -> None:
    """Write the header of a file whose shards are written (first and last item from ``slices``),
    sync it and move it into ``index_dir``."""
    from ..engine.index import IndexFile

    f = IndexFile(path, cfg.max_hash_slot_num, cfg.max_index_num, read_only=False)
    try:
        if slices:
            a = load_slice(slices[0][0], ITEM_DTYPE, slices[0][1], 1)
            z = load_slice(slices[-1][0], ITEM_DTYPE, slices[-1][1] + slices[-1][2] - 1, 1)
            f.finish_shards(sum(x[2] for x in slices), (int(a["phy"][0]), int(a["ts"][0])),
                            (int(z["phy"][0]), int(z["ts"][0])), slot_count)
        f.flush()
    finally:
        f.close()
    os.makedirs(index_dir, exist_ok=True)
    os.replace(path, os.path.join(index_dir, os.path.basename(path)))


class FilesPartition(InputPartition):
    def __init__(self, index: int, files: list):
        super().__init__(index)
        self.index, self.files = index, files


def group_evenly(items: list, parts: int) -> list[list]:
    """``items`` in order, cut into at most ``parts`` consecutive groups of near-equal length."""
    parts = max(1, min(parts, len(items)))
    k, r = divmod(len(items), parts)
    out, i = [], 0
    for p in range(parts):
        n = k + (1 if p < r else 0)
        out.append(items[i:i + n])
        i += n
    return [g for g in out if g]


