"""Export a store's messages to Parquet, JSON Lines or CSV in this process, without Spark.

The commitlog is read segment by segment with the Spark source's pyspark-free scan
(:mod:`rmqstore.spark.scan`: numpy batches of at most 4,096 records or 32 MiB) and its Arrow columns
(:mod:`rmqstore.spark.columns`), and each batch is written before the next is read, so memory stays
at about one batch whatever the store's size. Records are those the Spark source returns (valid
framing; the last record before the end of data CRC-checked; damaged records skipped and counted).

* ``parquet`` and ``csv``: the ``rocketmq`` source's columns (camelCase), bodies decoded when
  compressed. CSV has no nested types: ``keys`` is space-joined, ``properties`` a JSON object, the
  body UTF-8 text when it is, else ``base64:`` and the base64 of its bytes.
* ``jsonl``: one message object per line in the names ``rmqstore load`` reads (those of ``browse
  --json``), with the *stored* body (``body_encoding`` ``utf-8`` or ``base64``), ``sys_flag`` and the
  properties in stored order, so that ``rmqstore load`` writes the same bodies and properties again.

Needs pyarrow (the ``spark`` extra).
"""
from __future__ import annotations

import base64
import json
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from .config import MessageStoreConfig
from .errors import ConfigError, StoreNotFoundError
from .layout import infer_config

FORMATS = ("parquet", "jsonl", "csv")
#: bytes a JSON string must escape (control characters, quote, backslash)
_ESCAPED = bytes(range(32)) + b'"\\'

try:  # orjson (the spark extra) writes JSON several times faster than the json module
    import orjson

    def _dump_line(d: dict) -> bytes:
        return orjson.dumps(d, option=orjson.OPT_APPEND_NEWLINE)
except ImportError:  # pragma: no cover - without the extra
    def _dump_line(d: dict) -> bytes:
        return (json.dumps(d, ensure_ascii=False) + "\n").encode("utf-8")


@dataclass
class ExportResult:
    format: str
    out: str
    messages: int
    skipped: int
    commitlog_bytes: int
    out_bytes: int
    seconds: float


def _columns(fmt: str, include_body: bool) -> list[str]:
    from .spark import columns as C

    names = [n for n in C.FIELD_NAMES if include_body or n != "body"]
    if fmt == "jsonl":  # tags, keys and uniqKey are in the properties it writes
        names = [n for n in names if n not in ("tags", "keys", "uniqKey", "storeSize")]
    return names


def export(store_dir: str, out: str, fmt: str, *, topics: set[str] | None = None, begin_ms: int | None = None,
           end_ms: int | None = None, include_body: bool = True, cfg: MessageStoreConfig | None = None,
           progress=None) -> ExportResult:
    """Write the messages of ``store_dir`` (optionally only ``topics``, store time in
    ``[begin_ms, end_ms)``) to ``out`` (``-``: stdout, for jsonl and csv) as ``fmt``."""
    import pyarrow as pa

    from .spark import columns as C
    from .spark import scan as S

    if fmt not in FORMATS:
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "parquet" and out == "-":
        raise ConfigError("parquet needs a file: give OUT a path")
    if not os.path.isdir(os.path.join(store_dir, S.COMMITLOG)):
        raise StoreNotFoundError("not a store: no commitlog directory", path=store_dir)
    cfg = infer_config(store_dir, cfg or MessageStoreConfig())
    seg_size = cfg.mapped_file_size_commit_log
    names = _columns(fmt, include_body)
    arrow_schema = pa.schema([C.ARROW_SCHEMA.field(n) for n in names])
    raw = fmt == "jsonl"  # the stored bytes, so that a load writes the same record again
    writer = _writer(fmt, out, arrow_schema, include_body)
    t0 = time.perf_counter()
    messages = skipped = scanned = 0
    topic_dec = C.TopicDecoder()
    try:
        for seg_start in S.list_segments(store_dir, seg_size):
            summary = S.SpanSummary(S.Span(seg_start, seg_start, seg_start + seg_size))
            for seg, batch in S.iter_span_batches(store_dir, seg_size, summary.span, summary):
                codes = topic_dec.codes(seg.mm, batch)
                keep = np.ones(len(batch), dtype=bool)
                if topics is not None:
                    wanted = np.array([topic_dec.names[c] in topics for c in range(len(topic_dec.names))], dtype=bool)
                    keep &= wanted[codes]
                if begin_ms is not None:
                    keep &= batch.store_timestamp >= begin_ms
                if end_ms is not None:
                    keep &= batch.store_timestamp < end_ms
                scanned += int(batch.total.sum())
                if not keep.any():
                    continue
                if not keep.all():
                    batch, codes = S.take(batch, keep), codes[keep]
                rb = C.record_batch_to_arrow(seg.mm, seg.u8, seg.start, batch, arrow_schema, topic_dec, codes,
                                             include_body=include_body, raw_body=raw)
                writer.write(rb)
                messages += rb.num_rows
                if progress is not None:
                    progress(messages)
            skipped += sum(1 for _, kind, _ in summary.breaks if kind in (S.INVALID, S.CRC))
    finally:
        writer.close()
    size = os.path.getsize(out) if out != "-" and os.path.exists(out) else 0
    return ExportResult(fmt, out, messages, skipped, scanned, size, time.perf_counter() - t0)


def _writer(fmt: str, out: str, schema, include_body: bool):
    if fmt == "parquet":
        return _ParquetWriter(out, schema)
    if fmt == "csv":
        return _CsvWriter(out, schema)
    return _JsonlWriter(out, include_body)


class _ParquetWriter:
    def __init__(self, out: str, schema):
        import pyarrow.parquet as pq

        self.w = pq.ParquetWriter(out, schema, compression="zstd")

    def write(self, rb) -> None:
        self.w.write_batch(rb)

    def close(self) -> None:
        self.w.close()


def _open_text(out: str):
    return (sys.stdout.buffer, False) if out == "-" else (open(out, "wb"), True)


def _body_texts(col) -> list[str | None]:
    """UTF-8 text when the body is, else ``base64:`` + base64."""
    out = []
    for b in col.to_pylist():
        if b is None:
            out.append(None)
            continue
        try:
            out.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            out.append("base64:" + base64.b64encode(b).decode("ascii"))
    return out


class _CsvWriter:
    def __init__(self, out: str, schema):
        import pyarrow as pa

        self.fh, self.owned = _open_text(out)
        self.pa = pa
        fields = []
        for f in schema:
            t = f.type
            if f.name in ("keys", "properties", "body"):
                t = pa.string()
            fields.append(pa.field(f.name, t, nullable=True))
        self.schema = pa.schema(fields)
        self.w = None

    def write(self, rb) -> None:
        import pyarrow.csv as pcsv

        pa = self.pa
        cols = []
        for f in self.schema:
            col = rb.column(f.name)
            if f.name == "keys":
                col = pa.array([" ".join(k) for k in col.to_pylist()], pa.string())
            elif f.name == "properties":
                col = pa.array([_dump_line(dict(p))[:-1].decode("utf-8") for p in col.to_pylist()], pa.string())
            elif f.name == "body":
                col = pa.array(_body_texts(col), pa.string())
            cols.append(col)
        batch = pa.RecordBatch.from_arrays(cols, schema=self.schema)
        if self.w is None:
            self.w = pcsv.CSVWriter(self.fh, self.schema)
        self.w.write_batch(batch)

    def close(self) -> None:
        if self.w is None:  # no message: the header alone
            import pyarrow.csv as pcsv

            self.w = pcsv.CSVWriter(self.fh, self.schema)
        self.w.close()
        if self.owned:
            self.fh.close()
        else:
            self.fh.flush()


class _JsonlWriter:
    """One ``rmqstore load`` message object per line."""

    #: source column -> message object name, in the order written
    NAMES = (("topic", "topic"), ("queueId", "queue_id"), ("queueOffset", "queue_offset"),
             ("commitLogOffset", "phy_offset"), ("msgId", "msg_id"), ("flag", "flag"), ("sysFlag", "sys_flag"),
             ("bornTimestamp", "born_timestamp"), ("bornHost", "born_host"), ("storeTimestamp", "store_timestamp"),
             ("storeHost", "store_host"), ("reconsumeTimes", "reconsume_times"),
             ("preparedTransactionOffset", "prepared_transaction_offset"), ("bodyCRC", "body_crc"))

    def __init__(self, out: str, include_body: bool):
        self.fh, self.owned = _open_text(out)
        self.include_body = include_body

    def write(self, rb) -> None:
        cols = []
        for src, _ in self.NAMES:
            col = rb.column(src)
            if src in ("bornTimestamp", "storeTimestamp"):  # epoch ms, as load takes them
                cols.append((col.cast("int64").to_numpy() // 1000).tolist())
            else:
                cols.append(col.to_pylist())
        cols.append([dict(p) for p in rb.column("properties").to_pylist()])
        names = [name for _, name in self.NAMES] + ["properties"]
        heads = [_dump_line(dict(zip(names, row))) for row in zip(*cols)]
        if not self.include_body:
            self.fh.write(b"".join(heads))
            return
        lines = []
        for head, body in zip(heads, rb.column("body").to_pylist()):
            body = body or b""
            # a UTF-8 body that JSON need not escape goes in as its bytes; others through the encoder
            if len(body.translate(None, _ESCAPED)) == len(body):
                try:
                    body.decode("utf-8")
                    lines.append(head[:-2] + b',"body_encoding":"utf-8","body":"' + body + b'"}\n')
                    continue
                except UnicodeDecodeError:
                    pass
            try:
                tail = _dump_line({"body_encoding": "utf-8", "body": body.decode("utf-8")})
            except UnicodeDecodeError:
                tail = b'{"body_encoding":"base64","body":"' + base64.b64encode(body) + b'"}\n'
            lines.append(head[:-2] + b"," + tail[1:])
        self.fh.write(b"".join(lines))

    def close(self) -> None:
        if self.owned:
            self.fh.close()
        else:
            self.fh.flush()
