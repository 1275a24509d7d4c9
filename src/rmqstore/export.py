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
from .errors import ConfigError, OutputExistsError, StoreNotFoundError
from .layout import infer_config, is_store_dir

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


def check_export_output(out: str, overwrite: bool = False) -> None:
    """Refuse (:class:`OutputExistsError`) an output file that exists (unless ``overwrite``), a
    directory, and any path inside a store directory (never overwritten, whatever ``overwrite``)."""
    if out == "-":
        return
    path = os.path.abspath(out)
    if os.path.isdir(path):
        raise OutputExistsError("the export output is a directory", path=out)
    parent = os.path.dirname(path)
    while True:
        if is_store_dir(parent):
            raise OutputExistsError(f"refusing to write an export inside the store directory {parent}", path=out)
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    if os.path.exists(path) and not overwrite:
        raise OutputExistsError("the export output exists", path=out)


def export(store_dir: str, out: str, fmt: str, *, topics: set[str] | None = None, begin_ms: int | None = None,
           end_ms: int | None = None, include_body: bool = True, cfg: MessageStoreConfig | None = None,
           progress=None, overwrite: bool = False) -> ExportResult:
    """Write the messages of ``store_dir`` (optionally only ``topics``, store time in
    ``[begin_ms, end_ms)``) to ``out`` (``-``: stdout, for jsonl and csv) as ``fmt``. An ``out``
    that exists is replaced only with ``overwrite``; one inside a store directory never is
    (:func:`check_export_output`)."""
    import pyarrow as pa

    from .spark import columns as C
    from .spark import scan as S

    if fmt not in FORMATS:
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "parquet" and out == "-":
        raise ConfigError("parquet needs a file: give OUT a path")
    if not os.path.isdir(os.path.join(store_dir, S.COMMITLOG)):
        raise StoreNotFoundError("not a store: no commitlog directory", path=store_dir)
    check_export_output(out, overwrite)
    cfg = infer_config(store_dir, cfg or MessageStoreConfig())
    seg_size = cfg.mapped_file_size_commit_log
    names = _columns(fmt, include_body)
    arrow_schema = pa.schema([C.ARROW_SCHEMA.field(n) for n in names])
    # jsonl: the stored bytes, so that a load writes the same record again
    body = C.Body.of(include_body, raw_body=fmt == "jsonl")
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
                    batch, codes = batch.select(keep), codes[keep]
                rb = C.record_batch_to_arrow(seg, batch, arrow_schema, topic_dec, codes, body)
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


# --- Lines built from Arrow columns (no Python object per row; the rare row that needs JSON escaping,
# a non-UTF-8 body or duplicate property names goes through the per-row path instead) ---------------

def _escapes(col) -> np.ndarray:
    """Per value of a string or binary column: whether it holds a byte a JSON string must escape (a
    control character, quote or backslash). One pass of numpy over the values buffer."""
    n = len(col)
    out = np.zeros(n, dtype=bool)
    bufs = col.buffers()
    if n == 0 or bufs[2] is None:
        return out
    offs = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=col.offset * 4)
    data = np.frombuffer(bufs[2], dtype=np.uint8)[offs[0]:offs[-1]]
    bad = np.less(data, 0x20)  # in place: one temporary for the three tests
    np.logical_or(bad, np.equal(data, 0x22), out=bad)
    np.logical_or(bad, np.equal(data, 0x5C), out=bad)
    if bad.any():
        out[np.searchsorted(offs, np.flatnonzero(bad) + offs[0], side="right") - 1] = True
    return out


def _properties_json(props) -> tuple:
    """``(JSON object text per row, rows to redo per row)`` of a properties map column: the names and
    values in stored order, as ``orjson.dumps(dict(...))`` writes them for rows without escapes or
    repeated names (those are flagged for the per-row path)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = np.asarray(props.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    first, last = int(offsets[0]), int(offsets[-1])  # .keys/.items are the whole children, even of a slice
    keys, items = props.keys.slice(first, last - first), props.items.slice(first, last - first)
    offsets = offsets - first
    bad = _escapes(keys) | _escapes(items)
    redo = np.zeros(len(props), dtype=bool)
    if bad.any():
        redo[np.searchsorted(offsets, np.flatnonzero(bad), side="right") - 1] = True
    if len(keys):  # a name twice in a row: dict() keeps one, the text would keep both
        row = np.repeat(np.arange(len(props)), np.diff(offsets))
        tagged = pc.binary_join_element_wise(pa.array(row).cast(pa.string()), keys, "\x00")
        if len(pc.unique(tagged)) < len(tagged):
            counts = pc.value_counts(tagged)
            dup = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
            redo[row[np.asarray(pc.is_in(tagged, value_set=dup).to_numpy(zero_copy_only=False), dtype=bool)]] = True
    entries = pc.binary_join_element_wise('"', keys, '":"', items, '"', "")
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries), ",")
    return pc.binary_join_element_wise("{", joined, "}", ""), redo


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


def _utf8_rows(col) -> np.ndarray:
    """Per row of a binary column: whether it is valid UTF-8 (one cast for the usual all-valid batch)."""
    import pyarrow as pa

    try:
        col.cast(pa.string())
        return np.ones(len(col), dtype=bool)
    except pa.ArrowInvalid:
        out = np.zeros(len(col), dtype=bool)
        for i, b in enumerate(col.to_pylist()):
            try:
                (b or b"").decode("utf-8")
                out[i] = True
            except UnicodeDecodeError:
                pass
        return out


class _CsvWriter:
    """RFC 4180 lines as pyarrow's CSV writer writes them (a quoted header; strings quoted with their
    quotes doubled; numbers and times unquoted; null as an empty field; ``\\n`` line ends), built
    from whole Arrow columns at once."""

    def __init__(self, out: str, schema):
        self.fh, self.owned = _open_text(out)
        self.names = schema.names
        self.fh.write((",".join(f'"{n}"' for n in self.names) + "\n").encode("utf-8"))

    def write(self, rb) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        pieces: list = []  # one join builds every line: literal separators and quotes between columns
        for k, name in enumerate(self.names):
            col = rb.column(name)
            if name == "keys":
                col = pc.binary_join(col.cast(pa.list_(pa.string())), " ")
            elif name == "properties":
                text, redo = _properties_json(col)
                if redo.any():
                    text = text.to_pylist()
                    for i in np.flatnonzero(redo).tolist():
                        text[i] = _dump_line(dict(col[i].as_py()))[:-1].decode("utf-8")
                col = pa.array(text, pa.string())
            elif name == "body":
                col = pa.array(_body_texts(col), pa.string()) if not _utf8_rows(col).all() else col.cast(pa.string())
            sep = "," if k else ""
            if pa.types.is_string(col.type):
                col = col.cast(pa.binary())
                if _has_byte(col, 0x22):
                    col = pc.replace_substring(col, b'"', b'""')
                if col.null_count:  # null: an empty field, unquoted
                    quote, empty = pa.scalar(b'"', pa.binary()), pa.scalar(b"", pa.binary())
                    pieces += [sep, pc.binary_join_element_wise(quote, col, quote, empty).fill_null(b"")]
                else:
                    pieces += [sep + '"', col, '"']
            else:
                col = _time_text(col) if pa.types.is_timestamp(col.type) else col.cast(pa.string()).cast(pa.binary())
                pieces += [sep, col.fill_null(b"") if col.null_count else col]
        pieces.append("\n")
        merged: list = []
        for p in pieces:  # adjacent literals as one
            if isinstance(p, str) and merged and isinstance(merged[-1], str):
                merged[-1] += p
            else:
                merged.append(p)
        _write_values(self.fh, pc.binary_join_element_wise(
            *[pa.scalar(p.encode(), pa.binary()) if isinstance(p, str) else p for p in merged if not isinstance(p, str) or p],
            pa.scalar(b"", pa.binary())))

    def close(self) -> None:
        if self.owned:
            self.fh.close()
        else:
            self.fh.flush()


#: microseconds of 0000-01-01 and of the end of 9999 (UTC): the years a naive timestamp prints as UTC does
_FOUR_DIGIT_YEARS_US = (-62167219200 * 10**6, 253402300800 * 10**6 - 1)


def _time_text(col):
    """A UTC timestamp column as pyarrow's CSV writer prints it (``2026-11-26 01:21:01.579000Z``),
    through the naive timestamp (some 20 times faster than the zoned cast; identical text for years
    0000-9999, the zoned cast otherwise)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    us = col.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if col.type.tz not in ("UTC", "+00:00") or col.type.unit != "us" or \
            (us.size and (us.min() < _FOUR_DIGIT_YEARS_US[0] or us.max() > _FOUR_DIGIT_YEARS_US[1])):
        return col.cast(pa.string()).cast(pa.binary())
    text = col.cast(pa.timestamp("us")).cast(pa.string()).cast(pa.binary())
    return pc.binary_join_element_wise(text, pa.scalar(b"Z", pa.binary()), pa.scalar(b"", pa.binary()))


def _has_byte(col, byte: int) -> bool:
    bufs = col.buffers()
    return bufs[2] is not None and bool((np.frombuffer(bufs[2], dtype=np.uint8) == byte).any())


def _write_values(fh, arr) -> None:
    """The values of a binary array, back to back (its data buffer between the first and last offset)."""
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    fh.write(memoryview(arr.buffers()[2])[int(offs[0]):int(offs[-1])])


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
        import pyarrow as pa
        import pyarrow.compute as pc

        pieces: list = []
        sep = "{"
        for src, name in self.NAMES:
            col = rb.column(src)
            if src in ("bornTimestamp", "storeTimestamp"):  # epoch ms, as load takes them
                col = pa.array(col.cast("int64").to_numpy() // 1000)
            if pa.types.is_string(col.type):
                pieces += [f'{sep}"{name}":"', col]
                sep = '",'
            else:
                pieces += [f'{sep}"{name}":', col.cast(pa.string())]
                sep = ","
        props, redo = _properties_json(rb.column("properties"))
        pieces += [f'{sep}"properties":', props]
        for src in ("topic", "bornHost", "storeHost"):  # names and hosts are plain as a rule; checked
            redo |= _escapes(rb.column(src))
        if self.include_body:
            body = rb.column("body").fill_null(b"")
            redo |= _escapes(body) | ~_utf8_rows(body)
            pieces += [',"body_encoding":"utf-8","body":"', body.cast(pa.binary()), '"}\n']
        else:
            pieces.append("}\n")
        lines = pc.binary_join_element_wise(*[pa.scalar(p.encode(), pa.binary()) if isinstance(p, str)
                                              else p.cast(pa.binary()) for p in pieces], pa.scalar(b"", pa.binary()))
        if not redo.any():  # the lines are one buffer: written as it is
            _write_values(self.fh, lines)
            return
        out = lines.to_pylist()
        for i in np.flatnonzero(redo).tolist():
            out[i] = self._line(rb, i)
        self.fh.write(b"".join(out))

    def _line(self, rb, i: int) -> bytes:
        """One message line through orjson (for a row that needs escapes or base64)."""
        row = {}
        for src, name in self.NAMES:
            v = rb.column(src)[i].as_py()
            if src in ("bornTimestamp", "storeTimestamp"):
                v = rb.column(src).cast("int64")[i].as_py() // 1000
            row[name] = v
        row["properties"] = dict(rb.column("properties")[i].as_py())
        head = _dump_line(row)
        if not self.include_body:
            return head
        body = rb.column("body")[i].as_py() or b""
        try:
            tail = _dump_line({"body_encoding": "utf-8", "body": body.decode("utf-8")})
        except UnicodeDecodeError:
            tail = b'{"body_encoding":"base64","body":"' + base64.b64encode(body) + b'"}\n'
        return head[:-2] + b"," + tail[1:]

    def close(self) -> None:
        if self.owned:
            self.fh.close()
        else:
            self.fh.flush()
