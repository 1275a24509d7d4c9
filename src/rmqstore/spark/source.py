"""The ``rocketmq`` data source (PySpark Python Data Source API).

``spark.read.format("rocketmq").load(store_dir)`` reads every record of a store's commitlog;
``spark.readStream.format("rocketmq").load(store_dir)`` follows a store another process is
writing. Partitions are byte ranges of the commitlog (:mod:`.scan`); a task maps its segment,
decodes its records in batches with the numpy codecs and yields ``pyarrow.RecordBatch`` es
(:mod:`.columns`). The driver only lists the commitlog directory; executors need nothing but the
store path.
"""
from __future__ import annotations

import inspect
import logging
import os
import time
from typing import Iterator, NamedTuple

import numpy as np
import pyarrow as pa

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, MapType, StringType, StructField,
                               StructType, TimestampType)

from ..errors import ConfigError, CorruptRecordError
from ..io import paths
from . import columns as C
from . import scan as S
from . import tail as T
from .filters import RowFilter
from .options import EARLIEST, LATEST, ReadOptions, parse_options

log = logging.getLogger(__name__)
#: the column naming each row's broker (its store's broker.conf ``brokerName``, else its directory)
BROKER_NAME = "brokerName"


def source_schema() -> StructType:
    """The full schema (same names, types and nullability as :data:`.columns.ARROW_SCHEMA`)."""
    string, nn = StringType(), False
    types = {
        "topic": (string, nn), "queueId": (IntegerType(), nn), "queueOffset": (LongType(), nn),
        "commitLogOffset": (LongType(), nn), "storeSize": (IntegerType(), nn), "body": (BinaryType(), True),
        "tags": (string, True), "keys": (ArrayType(string, containsNull=False), nn), "uniqKey": (string, True),
        "msgId": (string, nn), "properties": (MapType(string, string, valueContainsNull=False), nn),
        "bornTimestamp": (TimestampType(), nn), "storeTimestamp": (TimestampType(), nn),
        "bornHost": (string, nn), "storeHost": (string, nn), "flag": (IntegerType(), nn),
        "sysFlag": (IntegerType(), nn), "reconsumeTimes": (IntegerType(), nn),
        "preparedTransactionOffset": (LongType(), nn), "bodyCRC": (IntegerType(), nn),
        BROKER_NAME: (string, nn),
    }
    return StructType([StructField(name, *types[name]) for name in [*C.FIELD_NAMES, BROKER_NAME]])


def _arrow_schema(schema: StructType):
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def check_schema(schema: StructType) -> StructType:
    """A user-given schema must be a subset of the source's columns with the same types (it then
    works as a projection: only those columns are decoded)."""
    full = {f.name: f for f in source_schema().fields}
    for f in schema.fields:
        want = full.get(f.name)
        if want is None:
            raise ConfigError(f"schema: unknown column {f.name!r} for format rocketmq; columns are "
                              f"{', '.join(full)}")
        if f.dataType.simpleString() != want.dataType.simpleString():
            raise ConfigError(f"schema: column {f.name} is {want.dataType.simpleString()}, "
                              f"not {f.dataType.simpleString()}")
        if not f.nullable and want.nullable:
            raise ConfigError(f"schema: column {f.name} can be null; declare it nullable")
    return schema


class SpanPartition(InputPartition):
    """A byte range of a store's commitlog: ``spans`` are ``(segment start, start, end)`` triples, one
    per segment it touches (several when segments are smaller than ``splitSize``); ``store`` is the
    store's index in the options' ``stores``."""

    def __init__(self, index: int, spans: list[tuple[int, int, int]], store: int = 0,
                 queue_ranges: dict | None = None):
        super().__init__(index)
        self.index, self.spans, self.store, self.queue_ranges = index, spans, store, queue_ranges


class QueueRanges(NamedTuple):
    """Kafka-style queue offsets resolved on one store."""

    #: ``{(topic, queue id): (lo, hi)}``: queue offsets, ``hi`` exclusive or None
    ranges: dict
    #: the commitlog range ``[phy_lo, phy_hi)`` that holds those messages (``phy_lo`` None when there
    #: is nothing to read, ``phy_hi`` None when it runs to the end)
    phy_lo: int | None
    phy_hi: int | None


def queue_ranges(opts: ReadOptions, loc) -> QueueRanges | None:
    """The options' Kafka-style queue offsets resolved on the store ``loc``; None without them."""
    start, end = opts.starting_queue_offsets, opts.ending_queue_offsets
    if start is None and end is None:
        return None
    from ..message_store import MessageStore

    ranges: dict[tuple[str, int], tuple[int, int | None]] = {}
    phy_lo = phy_hi = None
    with MessageStore.open(loc.store_dir, loc.cfg, read_only=True) as st:
        stored = st.topics()
        for topic in sorted(set(start or {}) | set(end or {})):
            qids = set(stored.get(topic, [])) | set((start or {}).get(topic, {})) | set((end or {}).get(topic, {}))
            for q in sorted(qids):
                mn, mx = st.get_min_offset_in_queue(topic, q), st.get_max_offset_in_queue(topic, q)
                s_off = (start or {}).get(topic, {}).get(q, -2)
                lo = mn if s_off == -2 else mx if s_off == -1 else max(s_off, mn)
                hi = None
                if end is not None:
                    e_off = end.get(topic, {}).get(q, -1)
                    hi = mx if e_off == -1 else min(e_off, mx)
                ranges[(topic, q)] = (lo, hi)
                last = mx if hi is None else hi
                if lo >= last:
                    continue
                first_phy = st.get_commit_log_offset_in_queue(topic, q, lo)
                if first_phy >= 0:
                    phy_lo = first_phy if phy_lo is None else min(phy_lo, first_phy)
                if end is not None:
                    last_phy = st.get_commit_log_offset_in_queue(topic, q, last - 1)
                    if last_phy >= 0:
                        phy_hi = last_phy + 1 if phy_hi is None else max(phy_hi, last_phy + 1)
    return QueueRanges(ranges, phy_lo, phy_hi)


def queue_mask(ranges: dict, names: list[str], codes: np.ndarray, batch) -> np.ndarray:
    """Rows whose queue offset is inside their (topic, queue)'s range in ``ranges``."""
    key = codes.astype(np.int64) * (1 << 32) + batch.queue_id.astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    lo = np.empty(len(uniq), dtype=np.int64)
    hi = np.empty(len(uniq), dtype=np.int64)
    for i, k in enumerate(uniq.tolist()):
        r = ranges.get((names[k >> 32], k & 0xFFFFFFFF))
        # a queue not named (a stream's queue created later): all of it (its topic was filtered before)
        lo[i], hi[i] = (0, 1 << 62) if r is None else (r[0], (1 << 62) if r[1] is None else r[1])
    off = batch.queue_offset
    return (off >= lo[inv]) & (off < hi[inv])


#: (stores, topic) already warned about in this process: a stream plans every micro-batch
_WARNED_TOPICS: set[tuple[tuple[str, ...], str]] = set()


def warn_unknown_topics(opts: ReadOptions, topics) -> list[str]:
    """Warn once (per process and stores) about each topic asked for (``topics`` option or a
    pushed-down filter) that none of the local stores read has a consume queue of; the topics
    warned about. Stores without consume queues (or remote ones) are not judged."""
    if not topics:
        return []
    held: set[str] = set()
    for loc in opts.stores:
        cq_dir = paths.consume_queue_dir(loc.store_dir)
        if loc.fs_settings is not None or not os.path.isdir(cq_dir):
            return []
        held.update(os.listdir(cq_dir))
    key = tuple(loc.store_dir for loc in opts.stores)
    missing = [t for t in sorted(topics) if t not in held and (key, t) not in _WARNED_TOPICS]
    if missing:
        _WARNED_TOPICS.update((key, t) for t in missing)
        shown = ", ".join(sorted(held)[:10]) + (", ..." if len(held) > 10 else "")
        log.warning("topic %s: not in %s (its topics: %s); the read has no rows of it", ", ".join(missing),
                    ", ".join(key), shown or "none")
    return missing


def plan_partitions(opts: ReadOptions, flt: RowFilter, lo: int | None, hi: int | None,
                    ranges: dict | None = None) -> list[SpanPartition]:
    """The partitions of the read; ``ranges`` (a stream's queue starts, kept in its offsets) instead
    of resolving Kafka-style queue offsets again."""
    warn_unknown_topics(opts, flt.topics)
    if flt.is_empty:
        return []
    f_lo, f_hi = flt.phy_range()
    if f_lo is not None:
        lo = f_lo if lo is None else max(lo, f_lo)
    if f_hi is not None:
        hi = f_hi if hi is None else min(hi, f_hi)
    if lo is not None and hi is not None and lo >= hi:
        return []
    parts: list[SpanPartition] = []
    for k, loc in enumerate(opts.stores):
        segments = S.list_segments(loc.store_dir, loc.seg_size)
        gaps = S.segment_gaps(loc.store_dir, loc.seg_size)
        if gaps and opts.fail_on_data_loss:
            raise CorruptRecordError(f"failOnDataLoss: {gaps[0]}" + (f" (and {len(gaps) - 1} more)" if len(gaps) > 1
                                                                     else ""), path=loc.store_dir)
        for g in gaps:
            log.warning("%s: %s: their records are not read", loc.store_dir, g)
        resolved = queue_ranges(opts, loc) if ranges is None else QueueRanges(ranges, lo, hi)
        store_ranges = None if resolved is None else resolved.ranges
        s_lo, s_hi = lo, hi
        if resolved is not None:
            q_lo, q_hi = resolved.phy_lo, resolved.phy_hi
            if q_lo is None:
                continue  # no message of the queues asked for in this store
            s_lo = q_lo if s_lo is None else max(s_lo, q_lo)
            if q_hi is not None:
                s_hi = q_hi if s_hi is None else min(s_hi, q_hi)
            if s_hi is not None and s_lo >= s_hi:
                continue
        spans = S.plan_spans(segments, loc.seg_size, opts.split_size, s_lo, s_hi)
        parts += [SpanPartition(len(parts) + i, [(sp.seg, sp.start, sp.end) for sp in grp], k, store_ranges)
                  for i, grp in enumerate(S.group_spans(spans, opts.split_size))]
    return parts


def read_partition(opts: ReadOptions, flt: RowFilter, schema: StructType, part) -> Iterator:
    """Executor side: the Arrow batches of one partition."""
    if not isinstance(part, SpanPartition):
        return
    loc = opts.stores[part.store]
    if loc.fs_settings is not None:
        from . import fs as RFS

        RFS.register(loc.store_dir, loc.fs_settings)
    arrow_schema = _arrow_schema(schema)
    broker_col = arrow_schema.get_field_index(BROKER_NAME)
    decoded = arrow_schema.remove(broker_col) if broker_col >= 0 else arrow_schema
    topics = C.TopicDecoder()
    body = C.Body.of(opts.include_body, opts.raw_body)
    allowed: dict[int, bool] = {}
    crc = opts.verify_crc
    prop_crc = crc and loc.cfg.force_verify_prop_crc
    for seg, batch in _iter_spans(opts, loc, part.spans, check_crc=crc, prop_crc=prop_crc):
        codes = topics.codes(seg.mm, batch)
        topic_ok = None
        if flt.topics is not None:
            for c in set(codes.tolist()) - allowed.keys():
                allowed[c] = topics.names[c] in flt.topics
            topic_ok = np.array([allowed[c] for c in range(len(topics.names))], dtype=bool)[codes]
        m = flt.mask(batch, seg.start, topic_ok)
        if part.queue_ranges is not None:
            qm = queue_mask(part.queue_ranges, topics.names, codes, batch)
            m = qm if m is None else (m & qm)
        if m is not None:
            if not m.any():
                continue
            if not m.all():
                batch, codes = batch.select(m), codes[m]
        out = C.record_batch_to_arrow(seg, batch, decoded, topics, codes, body)
        if broker_col >= 0:
            names = pa.array([loc.broker_name], pa.string()).take(np.zeros(out.num_rows, dtype=np.int32))
            out = out.add_column(broker_col, arrow_schema.field(broker_col), names)
        yield out


def _iter_spans(opts: ReadOptions, loc, spans, **kw):
    """The batches of every span; damaged records (invalid framing, a failing CRC) are skipped and
    logged, or, with ``failOnDataLoss``, end the read with a :class:`CorruptRecordError`."""
    for seg0, a, b in spans:
        summary = S.SpanSummary(S.Span(seg0, a, b))
        yield from S.iter_span_batches(loc.store_dir, loc.seg_size, summary.span, summary, **kw)
        lost = [(off, kind, detail) for off, kind, detail in summary.breaks if kind in (S.INVALID, S.CRC)]
        if lost and opts.fail_on_data_loss:
            off, kind, detail = lost[0]
            raise CorruptRecordError(f"failOnDataLoss: {len(lost)} damaged record(s) in [{a}, {b}) of segment {seg0}, "
                                     f"the first at {off}: {detail}", path=loc.store_dir, offset=off)
        for off, kind, detail in lost:
            log.warning("%s: skipped a damaged record at %d (%s)", loc.store_dir, off, detail)


#: PySpark's worker module that asks a Python data source reader to push filters
PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"


def _pushdown_planner_active() -> bool:
    """Whether Spark is planning this read with filter pushdown enabled.

    Spark refuses a reader that implements ``pushFilters`` unless
    ``spark.sql.python.filterPushdown.enabled`` is true, and the reader cannot see that setting
    (PySpark 4.x offers no API for it); the planning worker that pushes filters is a module of its
    own (:data:`PUSHDOWN_WORKER`), so look for it on the stack. The only use of the call stack in
    rmqstore; ``tests/spark/test_source.py`` fails when PySpark renames or drops that worker."""
    f = inspect.currentframe()
    while f is not None:
        if f.f_code.co_filename.endswith(PUSHDOWN_WORKER.rsplit(".", 1)[1] + ".py"):
            return True
        f = f.f_back
    return False


class RocketMQReader(DataSourceReader):
    """Batch reader: one partition per commitlog byte range."""

    def __init__(self, opts: ReadOptions, schema: StructType):
        self.opts = opts
        self.schema = schema
        self.filter = RowFilter.from_options(opts)

    def partitions(self):
        opts = self.opts
        if opts.starting_offsets == LATEST:
            return []
        return plan_partitions(opts, self.filter, None, None)

    def read(self, partition):
        return read_partition(self.opts, self.filter, self.schema, partition)


class RocketMQFilteringReader(RocketMQReader):
    """:class:`RocketMQReader` that also takes the filters Spark pushes down."""

    def pushFilters(self, filters):
        for flt in filters:
            pushed = self.filter.push(flt)
            if pushed is None:
                yield flt
            else:
                self.filter = pushed


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. An offset is ``{"offset": <commitlog offset>}``; a batch holds the records
    that start in ``[start, end)``, where ``end`` is a position below which every record is
    completely written (:func:`.tail.safe_end`), so nothing is read twice or half-written."""

    def __init__(self, opts: ReadOptions, schema: StructType):
        self.opts = opts
        self.schema = schema
        self.filter = RowFilter.from_options(opts, streaming=True)
        self._tail = T.TailState(prop_crc=self.opts.cfg.force_verify_prop_crc)
        self._target: int | None = None
        self._last: int | None = None

    def _first_segment(self) -> int:
        segs = S.list_segments(self.opts.store_dir, self.opts.seg_size)
        return segs[0] if segs else 0

    def initialOffset(self) -> dict:
        if self.opts.starting_queue_offsets is not None:
            # Kafka-style queue offsets: resolved once, kept in the offset (so in the checkpoint):
            # the stream starts where the first of them is and skips what lies before each queue's
            ranges, phy_lo, _ = queue_ranges(self.opts, self.opts.stores[0])  # not None: starting offsets given
            start = {f"{t}\x00{q}": lo for (t, q), (lo, _) in ranges.items()}
            off = phy_lo if phy_lo is not None else T.safe_end(self.opts.store_dir, self.opts.seg_size,
                                                               self._first_segment(), None, self._tail)
            return {"offset": off, "queues": start}
        s = self.opts.starting_offsets
        if s == EARLIEST:
            off = self._first_segment()
        elif s == LATEST:
            off = T.safe_end(self.opts.store_dir, self.opts.seg_size, self._first_segment(), None, self._tail)
        else:
            off = int(s)
        return {"offset": off}

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

        if self.opts.max_offsets_per_trigger is not None:  # maxBytesPerTrigger, if given too, applies as well
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        m = self.opts.max_bytes_per_trigger
        return ReadAllAvailable() if m is None else ReadMaxBytes(m)

    def reportLatestOffset(self) -> dict:
        """The store's end now (the query progress's ``latestOffset``: the lag is its ``offset``
        minus the batch's ``endOffset``, in commitlog bytes)."""
        end = T.safe_end(self.opts.store_dir, self.opts.seg_size, self._first_segment(), None, self._tail)
        return {"offset": max(end, self._last or 0)}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        queues = (start or {}).get("queues")
        begin = (start or {}).get("offset", self._last)
        if begin is None:
            first = self.initialOffset()
            begin, queues = first["offset"], first.get("queues")
        max_bytes = getattr(limit, "max_bytes", None) if limit is not None else self.opts.max_bytes_per_trigger
        max_rows = getattr(limit, "max_rows", None) if limit is not None else self.opts.max_offsets_per_trigger
        if max_rows is not None and max_bytes is None and type(limit).__name__ == "ReadMaxRows":
            max_bytes = self.opts.max_bytes_per_trigger
        end = T.safe_end(self.opts.store_dir, self.opts.seg_size, int(begin), max_bytes, self._tail)
        if max_rows is not None:
            end = T.end_after_records(self.opts.store_dir, self.opts.seg_size, int(begin), end, max_rows)
        if self._target is not None:
            end = min(end, max(self._target, int(begin)))
        self._last = end
        return {"offset": end, "queues": queues} if queues is not None else {"offset": end}

    def prepareForTriggerAvailableNow(self) -> None:
        """The target is the data complete now; the last record is looked at twice, one settle
        period apart, so that a store nobody writes to is read to its end."""
        start = self._last if self._last is not None else self.initialOffset()["offset"]
        for i in range(2):
            if i:
                time.sleep(T.TAIL_SETTLE_SECONDS)
            self._target = T.safe_end(self.opts.store_dir, self.opts.seg_size, start, None, self._tail)

    def partitions(self, start: dict, end: dict):
        a, b = int(start["offset"]), int(end["offset"])
        if a >= b:
            return []
        queues = start.get("queues")
        ranges = None if queues is None else {(k.split("\x00")[0], int(k.split("\x00")[1])): (v, None)
                                              for k, v in queues.items()}
        return plan_partitions(self.opts, self.filter, a, b, ranges=ranges)

    def read(self, partition):
        return read_partition(self.opts, self.filter, self.schema, partition)

    def commit(self, end: dict) -> None:
        pass


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: a RocketMQ store directory as a DataFrame (docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self):
        parse_options(self.options, streaming=None)  # fail early, at load(), on a bad option
        return source_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_options(self.options, streaming=False)
        check_schema(schema)
        cls = RocketMQFilteringReader if _pushdown_planner_active() else RocketMQReader
        return cls(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_options(self.options, streaming=True)
        check_schema(schema)
        return RocketMQStreamReader(opts, schema)
