"""Internal data sources of the Spark jobs (registered by :func:`.jobs.get_spark`; not for users).

The jobs move data between Python and the JVM only as Arrow batches, through the Python Data
Source API: a reader that turns commitlog spans into dispatch rows, and writers that turn sorted
rows into consume-queue and index files. Spark SQL does the shuffles and sorts in between. Each
source takes one option, ``spec``: a JSON document written by the job on the driver.

* ``rmqstore_dispatch`` (read): per record, what the dispatcher needs — topic, queue, queue offset,
  PHYSICALOFFSET, size, tagsCode, store time, sysflag, and the index key hashes (UNIQ_KEY first,
  then each KEYS token; none for ROLLBACK records) — computed with the same batch codec as the
  in-process dispatcher (:func:`~rmqstore.engine.dispatch.extract_dispatch_columns`); plus one
  summary row per span (:class:`~.scan.SpanSummary` as JSON).
* ``rmqstore_cq_writer`` (write): rows sorted by topic, queue and commitlog position; each queue is
  written by :class:`~rmqstore.engine.consume_queue.ConsumeQueue` ``put_units`` exactly as the
  in-process rebuild does, into a private directory renamed into place when complete.
* ``rmqstore_index_writer`` (write): index items sorted by file and rank, each file preceded by the
  last item of the file before it (whose end offset/time a new file's header starts from); each
  file is written with :meth:`~rmqstore.engine.index.IndexFile.put_batch`.
* ``rmqstore_cq_units`` / ``rmqstore_index_items`` (read): the units of a store's consume-queue
  files and the items of its index files, for ``verify`` and ``stats``.

Writers report back through ``commit`` (which runs on the driver's machine) by writing a JSON file
at the path given in the spec.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition,
                                    WriterCommitMessage)
from pyspark.sql.types import BinaryType, BooleanType, ByteType, IntegerType, LongType, StringType, StructField, StructType

from ..config import MessageStoreConfig
from ..format import consume_queue as FCQ
from ..format import index_file as FI
from ..format import message as M
from . import scan as S

TMP_DIR = ".rmqstore-spark-tmp"


def cfg_to_json(cfg: MessageStoreConfig) -> dict:
    return dataclasses.asdict(cfg)


def cfg_from_json(d: dict) -> MessageStoreConfig:
    names = {f.name for f in dataclasses.fields(MessageStoreConfig)}
    return MessageStoreConfig(**{k: v for k, v in d.items() if k in names})


def _spec(options) -> dict:
    raw = options.get("spec")
    if not raw:
        raise ValueError("internal rmqstore data source used without its spec option")
    return json.loads(raw)


def index_file_name(now_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as the store names index files."""
    t = time.localtime(now_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{now_ms % 1000:03d}"


def _task_tmp(out_dir: str) -> str:
    d = os.path.join(out_dir, TMP_DIR, uuid.uuid4().hex)
    os.makedirs(d, exist_ok=True)
    return d


def _write_result(path: str, payload) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)


# ================================================================================================
# Dispatch blocks
# ================================================================================================

CQ_BLOCK, INDEX_BLOCK, SUMMARY = 0, 1, 2

DISPATCH_SCHEMA = StructType([
    StructField("kind", ByteType(), False),      # CQ_BLOCK, INDEX_BLOCK or SUMMARY
    StructField("span", IntegerType(), False),
    StructField("topic", StringType(), True),    # CQ block: its queue
    StructField("queueId", IntegerType(), True),
    StructField("pos", LongType(), True),        # position of the block's first record
    StructField("n", IntegerType(), True),       # units / items in the block
    StructField("first", LongType(), True),      # index block: rank of its first item in the span
    StructField("data", BinaryType(), True),     # the block's columns (see encode_cq_block/encode_items)
    StructField("info", StringType(), True),     # summary: SpanSummary + dispatch counts, JSON
])

# Blocks are arrays of native-endian columns laid end to end; they never leave the job.
_CQ_COLS = (("queue_offset", np.int64), ("phy", np.int64), ("size", np.int32), ("tags", np.int64), ("pos", np.int64))
_ITEM_COLS = (("hash", np.int32), ("phy", np.int64), ("ts", np.int64))


def _encode(cols, arrays) -> bytes:
    return b"".join(np.ascontiguousarray(a, dtype=t).tobytes() for (_, t), a in zip(cols, arrays))


def _decode(cols, data: bytes, n: int) -> dict[str, np.ndarray]:
    out, off = {}, 0
    for name, t in cols:
        w = np.dtype(t).itemsize * n
        out[name] = np.frombuffer(data, dtype=t, count=n, offset=off)
        off += w
    return out


def encode_cq_block(queue_offset, phy, size, tags, pos) -> bytes:
    return _encode(_CQ_COLS, (queue_offset, phy, size, tags, pos))


def decode_cq_block(data: bytes, n: int) -> dict[str, np.ndarray]:
    return _decode(_CQ_COLS, data, n)


def encode_items(hashes, phy, ts) -> bytes:
    return _encode(_ITEM_COLS, (hashes, phy, ts))


def decode_items(data: bytes, n: int) -> dict[str, np.ndarray]:
    return _decode(_ITEM_COLS, data, n)


class SpansPartition(InputPartition):
    def __init__(self, index: int, spans: list[list[int]]):
        super().__init__(index)
        self.index, self.spans = index, spans  # [span id, segment start, start, end]


class DispatchSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rmqstore_dispatch"

    def schema(self):
        return DISPATCH_SCHEMA

    def reader(self, schema):
        return DispatchReader(_spec(self.options), schema)


class DispatchReader(DataSourceReader):
    def __init__(self, spec: dict, schema: StructType):
        self.spec = spec
        self.schema = schema

    def partitions(self):
        return [SpansPartition(i, g) for i, g in enumerate(self.spec["groups"])]

    def read(self, partition):
        from pyspark.sql.pandas.types import to_arrow_schema

        spec = self.spec
        cfg = cfg_from_json(spec["cfg"])
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        for span_id, seg0, a, b in partition.spans:
            yield from dispatch_span(spec["store"], cfg, span_id, S.Span(seg0, a, b), arrow_schema,
                                     check_crc=spec["check_crc"], prop_crc=spec["prop_crc"])


def dispatch_span(store_dir: str, cfg: MessageStoreConfig, span_id: int, span: S.Span, arrow_schema: pa.Schema,
                  check_crc: bool, prop_crc: bool):
    """Blocks of the run of valid records starting in ``span`` (up to its first break), then the
    span's summary. Per batch of records: one CQ block per queue (NOT_TYPE and COMMIT records) and
    one index block (UNIQ_KEY then KEYS tokens per record; ROLLBACK records have none), computed
    with the in-process dispatcher's batch codec."""
    from ..engine.dispatch import extract_dispatch_columns

    summary = S.SpanSummary(span)
    topic_cache: dict[bytes, str] = {}
    delay = cfg.delay_levels_ms
    items = records = 0
    last = last_keyed = -1
    queues: dict[tuple[str, int], int] = {}
    for seg, batch in S.iter_span_batches(store_dir, cfg.mapped_file_size_commit_log, span, summary,
                                          check_crc=check_crc, prop_crc=prop_crc, salvage=False):
        n = len(batch)
        cols = extract_dispatch_columns(seg.u8, batch, delay, topic_cache)
        pos = batch.starts + seg.start
        topic_ids = np.asarray(cols.topic_ids, dtype=np.int64)
        tags = np.asarray(cols.tags_codes, dtype=np.int64)
        rows = []
        tx = batch.sys_flag & M.SYSFLAG_TX_MASK
        sel = np.flatnonzero((tx != M.TX_PREPARED) & (tx != M.TX_ROLLBACK))
        if sel.size:
            key = topic_ids[sel] * (1 << 32) + batch.queue_id[sel].astype(np.int64)
            order = np.argsort(key, kind="stable")
            sel, key = sel[order], key[order]
            for grp in np.split(sel, np.flatnonzero(np.diff(key)) + 1):
                topic, qid = cols.topics[int(topic_ids[grp[0]])], int(batch.queue_id[grp[0]])
                queues[(topic, qid)] = queues.get((topic, qid), 0) + int(grp.size)
                rows.append({"kind": CQ_BLOCK, "span": span_id, "topic": topic, "queueId": qid,
                             "pos": int(pos[grp[0]]), "n": int(grp.size),
                             "data": encode_cq_block(batch.queue_offset[grp], batch.phy_offset[grp], batch.total[grp],
                                                     tags[grp], pos[grp])})
        rec = np.asarray(cols.item_rec, dtype=np.int64)
        hashes = np.asarray(cols.item_hash, dtype=np.int64)
        keep = tx[rec] != M.TX_ROLLBACK  # ROLLBACK records are never indexed
        rec, hashes = rec[keep], hashes[keep]
        if rec.size:
            rows.append({"kind": INDEX_BLOCK, "span": span_id, "pos": int(pos[rec[0]]), "n": int(rec.size),
                         "first": items, "data": encode_items(hashes, batch.phy_offset[rec], batch.store_timestamp[rec])})
            items += int(rec.size)
            last_keyed = int(pos[rec[-1]])
        records += n
        last = int(pos[-1])
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)
    info = summary.to_dict()
    info["dispatch"] = {"records": records, "items": items, "last": last, "last_keyed": last_keyed,
                        "queues": [[t, q, c] for (t, q), c in queues.items()]}
    yield pa.RecordBatch.from_pylist([{"kind": SUMMARY, "span": span_id, "info": json.dumps(info)}],
                                     schema=arrow_schema)


# ================================================================================================
# Consume-queue writer
# ================================================================================================

@dataclass
class QueuesWritten(WriterCommitMessage):
    queues: list  # [topic, queueId, units, files]


class CQWriterSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rmqstore_cq_writer"

    def writer(self, schema, overwrite):
        return CQWriter(_spec(self.options))


def _finish_queue(cq, tmp_root: str, out_dir: str, topic: str, qid: int) -> int:
    cq.flush(0)
    files = len(cq.queue.files)
    cq.close()
    src = os.path.join(tmp_root, "consumequeue", topic, str(qid))
    dst = os.path.join(out_dir, "consumequeue", topic, str(qid))
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.exists(dst):  # left by an earlier attempt of this task
        shutil.rmtree(dst)
    os.replace(src, dst)
    return files


class CQWriter(DataSourceArrowWriter):
    """Writes the consume queues of the CQ blocks it gets, sorted by topic, queueId and position:
    each queue's units go through ``ConsumeQueue.put_units`` in commitlog order."""

    def __init__(self, spec: dict):
        self.spec = spec

    def write(self, iterator):
        from ..engine.consume_queue import ConsumeQueue

        spec = self.spec
        cfg = cfg_from_json(spec["cfg"])
        out_dir = spec["out"]
        tmp_root = _task_tmp(out_dir)
        done = []
        cur, cq, units = None, None, 0
        try:
            for rb in iterator:
                for topic, qid, n, data in zip(rb.column("topic").to_pylist(), rb.column("queueId").to_pylist(),
                                               rb.column("n").to_pylist(), rb.column("data").to_pylist()):
                    if (topic, qid) != cur:
                        if cq is not None:
                            done.append([cur[0], cur[1], units, _finish_queue(cq, tmp_root, out_dir, *cur)])
                        cur, units = (topic, qid), 0
                        cq = ConsumeQueue(tmp_root, topic, qid, cfg, read_only=False)
                    b = decode_cq_block(data, n)
                    cq.put_units(b["queue_offset"].astype(np.int64), b["phy"].astype(np.int64),
                                 b["size"].astype(np.int64), b["tags"].astype(np.int64))
                    units += n
            if cq is not None:
                done.append([cur[0], cur[1], units, _finish_queue(cq, tmp_root, out_dir, *cur)])
                cq = None
        finally:
            if cq is not None:
                cq.close()
            shutil.rmtree(tmp_root, ignore_errors=True)
        return QueuesWritten(done)

    def commit(self, messages):
        queues = [q for m in messages if m is not None for q in m.queues]
        _write_result(self.spec["result"], {"queues": queues})

    def abort(self, messages):
        pass


# ================================================================================================
# Index writer
# ================================================================================================

@dataclass
class IndexFilesWritten(WriterCommitMessage):
    files: list  # [file number, name, items]


class IndexWriterSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rmqstore_index_writer"

    def writer(self, schema, overwrite):
        return IndexWriter(_spec(self.options))


class IndexWriter(DataSourceArrowWriter):
    """Writes index files from index blocks: rows ``file``, ``r0`` (global rank of the block's first
    item), ``n``, ``data``, sorted by file then r0. File ``k`` holds the items ranked
    ``[k*cap, (k+1)*cap)``; its header starts from the item ranked ``k*cap - 1`` (the previous
    file's last), which is in the first block it gets. An empty block makes an empty file."""

    def __init__(self, spec: dict):
        self.spec = spec

    def write(self, iterator):
        from ..engine.index import IndexFile

        spec = self.spec
        out_dir, cap = spec["out"], spec["cap"]
        slots, items = spec["slots"], spec["items"]
        tmp_root = _task_tmp(out_dir)
        index_dir = os.path.join(out_dir, "index")
        os.makedirs(index_dir, exist_ok=True)
        done = []
        cur, f, count = None, None, 0

        def finish():
            nonlocal f
            f.flush()
            tmp_path = f.path
            f.close()
            f = None
            name = os.path.basename(tmp_path)
            os.replace(tmp_path, os.path.join(index_dir, name))
            done.append([cur, name, count])

        try:
            for rb in iterator:
                for no, r0, n, data in zip(rb.column("file").to_pylist(), rb.column("r0").to_pylist(),
                                           rb.column("n").to_pylist(), rb.column("data").to_pylist()):
                    if no != cur:
                        if f is not None:
                            finish()
                        cur, count = no, 0
                    b = decode_items(data, n)
                    if f is None:
                        prev_phy = prev_ts = 0
                        if no > 0:
                            j = no * cap - 1 - r0
                            if not 0 <= j < n:
                                raise RuntimeError(f"index file {no}: the block before it is missing; "
                                                   "the item ranking is inconsistent")
                            prev_phy, prev_ts = int(b["phy"][j]), int(b["ts"][j])
                        name = index_file_name(spec["base_ms"] + no)
                        f = IndexFile(os.path.join(tmp_root, name), slots, items, read_only=False, create=True,
                                      prev_end_phy=prev_phy, prev_end_ts=prev_ts)
                    lo, hi = max(r0, no * cap), min(r0 + n, (no + 1) * cap)
                    if hi > lo:
                        a, z = lo - r0, hi - r0
                        put = f.put_batch(b["hash"][a:z].astype(np.int64), b["phy"][a:z].astype(np.int64),
                                          b["ts"][a:z].astype(np.int64))
                        if put != z - a:
                            raise RuntimeError(f"index file {no} is full after {count + put} items; "
                                               "the item ranking is inconsistent")
                        count += put
            if f is not None:
                finish()
        finally:
            if f is not None:
                f.close()
            shutil.rmtree(tmp_root, ignore_errors=True)
        return IndexFilesWritten(done)

    def commit(self, messages):
        files = [x for m in messages if m is not None for x in m.files]
        _write_result(self.spec["result"], {"files": files})

    def abort(self, messages):
        pass


# ================================================================================================
# Reading a store's consume queues and index files (verify, stats)
# ================================================================================================

CQ_UNITS_SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("queueId", IntegerType(), False),
    StructField("queueOffset", LongType(), False),
    StructField("phy", LongType(), False),
    StructField("size", IntegerType(), False),
    StructField("tagsCode", LongType(), False),
    StructField("file", StringType(), False),
])


class FilesPartition(InputPartition):
    def __init__(self, index: int, files: list):
        super().__init__(index)
        self.index, self.files = index, files


class CQUnitsSource(DataSource):
    """Units of consume-queue files: spec ``{"files": [[topic, queueId, path, file start], ...],
    "groups": [[file indexes], ...], "cq_size": n}``. Only the valid prefix of each queue's files
    is returned (units with ``phy >= 0 and size > 0``, as recovery reads them); blank pre-fill
    units ``(0, 0x7FFFFFFF, 0)`` are skipped."""

    @classmethod
    def name(cls) -> str:
        return "rmqstore_cq_units"

    def schema(self):
        return CQ_UNITS_SCHEMA

    def reader(self, schema):
        return CQUnitsReader(_spec(self.options), schema)


class CQUnitsReader(DataSourceReader):
    def __init__(self, spec, schema):
        self.spec, self.schema = spec, schema

    def partitions(self):
        return [FilesPartition(i, [self.spec["files"][j] for j in g]) for i, g in enumerate(self.spec["groups"])]

    def read(self, partition):
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        for topic, qid, path, start in partition.files:
            with open(path, "rb") as fh:
                data = fh.read()
            units = FCQ.decode_units(data)
            phy = units["phy_offset"].astype(np.int64)
            size = units["size"].astype(np.int64)
            ok = (phy >= 0) & (size > 0)
            bad = np.flatnonzero(~ok)
            n = int(bad[0]) if bad.size else units.size
            blank = (phy[:n] == 0) & (size[:n] == 0x7FFFFFFF) & (units["tags_code"][:n] == 0)
            idx = np.flatnonzero(~blank)
            if idx.size == 0:
                continue
            m = idx.size
            yield pa.RecordBatch.from_arrays([
                pa.array([topic] * m, pa.string()),
                pa.array(np.full(m, qid, dtype=np.int32), pa.int32()),
                pa.array(start // FCQ.UNIT_SIZE + idx, pa.int64()),
                pa.array(phy[idx], pa.int64()),
                pa.array(size[idx].astype(np.int32), pa.int32()),
                pa.array(units["tags_code"][idx].astype(np.int64), pa.int64()),
                pa.array([os.path.basename(path)] * m, pa.string()),
            ], schema=arrow_schema)


INDEX_ITEMS_SCHEMA = StructType([
    StructField("file", StringType(), False),
    StructField("item", IntegerType(), False),
    StructField("hash", IntegerType(), False),
    StructField("phy", LongType(), False),
    StructField("timeDiff", IntegerType(), False),
    StructField("prevIndex", IntegerType(), False),
    StructField("beginTs", LongType(), False),
    StructField("slot", IntegerType(), False),
])


class IndexItemsSource(DataSource):
    """Items 1..indexCount-1 of index files: spec ``{"files": [path, ...], "slots": n, "items": n}``,
    one partition per file."""

    @classmethod
    def name(cls) -> str:
        return "rmqstore_index_items"

    def schema(self):
        return INDEX_ITEMS_SCHEMA

    def reader(self, schema):
        return IndexItemsReader(_spec(self.options), schema)


class IndexItemsReader(DataSourceReader):
    def __init__(self, spec, schema):
        self.spec, self.schema = spec, schema

    def partitions(self):
        return [FilesPartition(i, [p]) for i, p in enumerate(self.spec["files"])]

    def read(self, partition):
        from pyspark.sql.pandas.types import to_arrow_schema

        from ..io.mapped_file import MappedFile

        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        slots, items = self.spec["slots"], self.spec["items"]
        for path in partition.files:
            mf = MappedFile(path, FI.file_size(slots, items), read_only=True)
            try:
                begin_ts, _, _, _, _, count = FI.HEADER.unpack_from(mf.mm, 0)
                count = min(max(count, 1), items)
                arr = np.frombuffer(mf.mm, dtype=FI.ITEM_DTYPE, count=count, offset=FI.item_pos(slots, 0))[1:]
                m = arr.size
                if m == 0:
                    continue
                h = arr["key_hash"].astype(np.int32)
                yield pa.RecordBatch.from_arrays([
                    pa.array([os.path.basename(path)] * m, pa.string()),
                    pa.array(np.arange(1, m + 1, dtype=np.int32), pa.int32()),
                    pa.array(h, pa.int32()),
                    pa.array(arr["phy_offset"].astype(np.int64), pa.int64()),
                    pa.array(arr["time_diff"].astype(np.int32), pa.int32()),
                    pa.array(arr["prev_index"].astype(np.int32), pa.int32()),
                    pa.array(np.full(m, begin_ts, dtype=np.int64), pa.int64()),
                    pa.array((h.astype(np.int64) % slots).astype(np.int32), pa.int32()),
                ], schema=arrow_schema)
                del arr
            finally:
                mf.close()


# ================================================================================================
# Index keys of every record (stats)
# ================================================================================================

KEYS_SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("key", StringType(), False),
    StructField("uniq", BooleanType(), False),     # the UNIQ_KEY (else a KEYS token)
    StructField("hash", IntegerType(), False),     # index key hash of "topic#key"
    StructField("pos", LongType(), False),
])


class KeysSource(DataSource):
    """The index keys of every record (UNIQ_KEY, then each KEYS token; none for ROLLBACK), with the
    hash the index files them under: spec as ``rmqstore_dispatch`` (store, cfg, groups)."""

    @classmethod
    def name(cls) -> str:
        return "rmqstore_keys"

    def schema(self):
        return KEYS_SCHEMA

    def reader(self, schema):
        return KeysReader(_spec(self.options), schema)


class KeysReader(DataSourceReader):
    def __init__(self, spec, schema):
        self.spec, self.schema = spec, schema

    def partitions(self):
        return [SpansPartition(i, g) for i, g in enumerate(self.spec["groups"])]

    def read(self, partition):
        from pyspark.sql.pandas.types import to_arrow_schema

        from ..format.hashes import abs_key_hash_many, java_hash_many
        from .columns import TopicDecoder, parse_properties_batch

        cfg = cfg_from_json(self.spec["cfg"])
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        topics = TopicDecoder()
        for _, seg0, a, b in partition.spans:
            for seg, batch in S.iter_span_batches(self.spec["store"], cfg.mapped_file_size_commit_log,
                                                  S.Span(seg0, a, b)):
                props = parse_properties_batch(seg.u8, batch.props_pos, batch.props_len)
                names = topics.names
                codes = topics.codes(seg.mm, batch).tolist()
                uniq = props.value_of("UNIQ_KEY").to_pylist()
                keys = props.keys_array().to_pylist()
                rollback = ((batch.sys_flag & M.SYSFLAG_TX_MASK) == M.TX_ROLLBACK).tolist()
                pos = (batch.starts + seg.start).tolist()
                t_out, k_out, u_out, p_out = [], [], [], []
                for i in range(len(batch)):
                    if rollback[i]:
                        continue
                    t = names[codes[i]]
                    if uniq[i] is not None:
                        t_out.append(t), k_out.append(uniq[i]), u_out.append(True), p_out.append(pos[i])
                    for k in keys[i]:
                        t_out.append(t), k_out.append(k), u_out.append(False), p_out.append(pos[i])
                if not k_out:
                    continue
                hashes = abs_key_hash_many(java_hash_many([f"{t}#{k}" for t, k in zip(t_out, k_out)]))
                yield pa.RecordBatch.from_arrays([
                    pa.array(t_out, pa.string()), pa.array(k_out, pa.string()), pa.array(u_out, pa.bool_()),
                    pa.array(hashes.astype(np.int32), pa.int32()), pa.array(p_out, pa.int64())], schema=arrow_schema)


# ================================================================================================
# Index file profile (stats)
# ================================================================================================

INDEX_PROFILE_SCHEMA = StructType([
    StructField("file", StringType(), False),
    StructField("items", IntegerType(), False),
    StructField("slotsUsed", IntegerType(), False),
    StructField("longestChain", IntegerType(), False),
    StructField("hashSlotCount", IntegerType(), False),
    StructField("beginTs", LongType(), False),
    StructField("endTs", LongType(), False),
])


class IndexProfileSource(DataSource):
    """One row per index file: items, slots holding items, longest slot chain, header values.
    Spec ``{"groups": [[path, ...], ...], "slots": n, "items": n}``."""

    @classmethod
    def name(cls) -> str:
        return "rmqstore_index_profile"

    def schema(self):
        return INDEX_PROFILE_SCHEMA

    def reader(self, schema):
        return IndexProfileReader(_spec(self.options), schema)


class IndexProfileReader(DataSourceReader):
    def __init__(self, spec, schema):
        self.spec, self.schema = spec, schema

    def partitions(self):
        return [FilesPartition(i, g) for i, g in enumerate(self.spec["groups"])]

    def read(self, partition):
        from pyspark.sql.pandas.types import to_arrow_schema

        from ..io.mapped_file import MappedFile

        slots, items = self.spec["slots"], self.spec["items"]
        rows = []
        for path in partition.files:
            mf = MappedFile(path, FI.file_size(slots, items), read_only=True)
            try:
                begin_ts, end_ts, _, _, slot_count, count = FI.HEADER.unpack_from(mf.mm, 0)
                count = min(max(count, 1), items)
                arr = np.frombuffer(mf.mm, dtype=FI.ITEM_DTYPE, count=count, offset=FI.item_pos(slots, 0))[1:]
                chain = np.bincount(arr["key_hash"].astype(np.int64) % slots, minlength=1) if arr.size else \
                    np.zeros(1, dtype=np.int64)
                rows.append({"file": os.path.basename(path), "items": int(arr.size),
                             "slotsUsed": int(np.count_nonzero(chain)), "longestChain": int(chain.max()),
                             "hashSlotCount": int(slot_count), "beginTs": int(begin_ts), "endTs": int(end_ts)})
                del arr
            finally:
                mf.close()
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=to_arrow_schema(self.schema, timezone="UTC"))


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


INTERNAL_SOURCES = (DispatchSource, CQWriterSource, IndexWriterSource, CQUnitsSource, IndexItemsSource, KeysSource,
                    IndexProfileSource)

