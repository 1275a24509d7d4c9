"""Arrow columns of the ``rocketmq`` source, built from decoded record batches with numpy.

Each column is produced from :class:`~rmqstore.format.message.RecordBatch` positions over the
segment's ``uint8`` view: integers are the batch's numpy columns, strings and binaries are byte
ranges gathered into one Arrow buffer, and the properties string of every record is split with
numpy in one go, following upstream ``string2messageProperties`` (a ``0x02``-delimited entry is
kept when its first ``0x01`` has a non-empty name before it and a non-empty value after it; a
later duplicate overwrites an earlier one; malformed UTF-8 becomes U+FFFD as Java decodes it).
Nothing here imports pyspark.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format import message as M
from ..format.compression import COMPRESSED_FLAG, CompressionError, decompress
from ..format.hashes import java_hash_ranges
from ..format.msgid import format_host

# name, Arrow type, nullable — the order of the source schema
_STR_NN = pa.field("element", pa.string(), nullable=False)
KEYS_TYPE = pa.list_(_STR_NN)
PROPS_TYPE = pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string(), nullable=False))
TS_TYPE = pa.timestamp("us", tz="UTC")

FIELDS: list[tuple[str, pa.DataType, bool]] = [
    ("topic", pa.string(), False),
    ("queueId", pa.int32(), False),
    ("queueOffset", pa.int64(), False),
    ("commitLogOffset", pa.int64(), False),
    ("storeSize", pa.int32(), False),
    ("body", pa.binary(), True),
    ("tags", pa.string(), True),
    ("keys", KEYS_TYPE, False),
    ("uniqKey", pa.string(), True),
    ("msgId", pa.string(), False),
    ("properties", PROPS_TYPE, False),
    ("bornTimestamp", TS_TYPE, False),
    ("storeTimestamp", TS_TYPE, False),
    ("bornHost", pa.string(), False),
    ("storeHost", pa.string(), False),
    ("flag", pa.int32(), False),
    ("sysFlag", pa.int32(), False),
    ("reconsumeTimes", pa.int32(), False),
    ("preparedTransactionOffset", pa.int64(), False),
    ("bodyCRC", pa.int32(), False),
]
FIELD_NAMES = [f[0] for f in FIELDS]
ARROW_SCHEMA = pa.schema([pa.field(n, t, nullable=nl) for n, t, nl in FIELDS])
_PROPERTY_COLUMNS = {"tags", "keys", "uniqKey", "properties"}

_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint8).reshape(256, 2)


# ------------------------------------------------------------------------------------------------
# Byte ranges
# ------------------------------------------------------------------------------------------------

def ranges_index(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Flat positions ``starts[i] .. starts[i]+lens[i]-1`` for all i, in order."""
    lens = np.maximum(lens, 0).astype(np.int64)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offs = np.cumsum(lens) - lens
    return np.arange(total, dtype=np.int64) + np.repeat(starts.astype(np.int64) - offs, lens)


def offsets_of(lens: np.ndarray) -> np.ndarray:
    out = np.zeros(lens.size + 1, dtype=np.int64)
    np.cumsum(np.maximum(lens, 0), out=out[1:])
    return out


def binary_array(mm, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    """Binary array of byte ranges of ``mm`` (one memcpy per range, no per-byte index)."""
    lens = np.maximum(lens, 0)
    mv = memoryview(mm)
    data = b"".join([mv[s:s + n] for s, n in zip(starts.tolist(), lens.tolist())])
    offs = offsets_of(lens)
    if offs[-1] >= 2**31:
        raise ValueError("batch too large for a binary column")
    return pa.BinaryArray.from_buffers(pa.binary(), lens.size, [None, pa.py_buffer(offs.astype(np.int32)),
                                                                 pa.py_buffer(data)])


def _pieces(buf: np.ndarray, bounds: np.ndarray) -> pa.Array:
    """Binary array of the consecutive pieces ``buf[bounds[j]:bounds[j+1]]``."""
    return pa.BinaryArray.from_buffers(pa.binary(), max(bounds.size - 1, 0),
                                       [None, pa.py_buffer(bounds.astype(np.int32)), pa.py_buffer(buf)])


def _to_string(arr: pa.Array) -> pa.Array:
    """Binary to string; malformed UTF-8 is replaced by U+FFFD as Java's decoder does."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in arr.to_pylist()],
                        pa.string())


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------

@dataclass
class Properties:
    """The effective entries of every record's properties: ``rec[j]`` owns key ``keys[j]`` and
    value ``values[j]``; entries are grouped by record in record order."""

    n: int
    rec: np.ndarray
    keys: pa.Array
    values: pa.Array

    def map_array(self) -> pa.Array:
        offs = offsets_of(np.bincount(self.rec, minlength=self.n)).astype(np.int32)
        return pa.MapArray.from_arrays(pa.array(offs, pa.int32()), self.keys, self.values, type=PROPS_TYPE)

    def value_of(self, name: str) -> pa.Array:
        """The value of property ``name`` per record, null where absent."""
        hit = np.flatnonzero(pc.equal(self.keys, name).to_numpy(zero_copy_only=False)) if len(self.keys) else \
            np.zeros(0, dtype=np.int64)
        idx = np.full(self.n, -1, dtype=np.int64)
        idx[self.rec[hit]] = hit
        return self.values.take(pa.array(idx, mask=idx < 0))

    def keys_array(self) -> pa.Array:
        """``KEYS`` split on single spaces, empty tokens dropped (an empty list without KEYS)."""
        kv = self.value_of("KEYS")
        valid = np.flatnonzero(kv.is_valid().to_numpy(zero_copy_only=False))
        counts = np.zeros(self.n, dtype=np.int64)
        if valid.size == 0:
            return pa.ListArray.from_arrays(pa.array(offsets_of(counts).astype(np.int32)),
                                            pa.array([], pa.string()), type=KEYS_TYPE)
        parts = pc.split_pattern(kv.take(pa.array(valid)), " ")
        tokens = parts.flatten()
        parent = valid[pc.list_parent_indices(parts).to_numpy()]
        keep = np.flatnonzero(pc.not_equal(tokens, "").to_numpy(zero_copy_only=False))
        np.add.at(counts, parent[keep], 1)
        return pa.ListArray.from_arrays(pa.array(offsets_of(counts).astype(np.int32)),
                                        tokens.take(pa.array(keep)), type=KEYS_TYPE)


def parse_properties_batch(u8: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> Properties:
    """Parse the properties of ``n`` records (``u8[pos[i]:pos[i]+lens[i]]``) at once."""
    n = int(pos.size)
    lens = np.maximum(lens, 0).astype(np.int64)
    # one buffer: 0x02, props of record 0, 0x02, props of record 1, ..., 0x02
    slot = offsets_of(lens + 1)[:-1]
    buf = np.full(int((lens + 1).sum()) + 1, 2, dtype=np.uint8)
    src = ranges_index(pos, lens)
    if src.size:
        buf[ranges_index(slot + 1, lens)] = u8[src]
    seps = np.flatnonzero(buf == 2)
    seg_s, seg_e = seps[:-1] + 1, seps[1:]
    ones = np.flatnonzero(buf == 1)
    k = np.searchsorted(ones, seg_s)
    i = np.where(k < ones.size, ones[np.minimum(k, max(ones.size - 1, 0))] if ones.size else 0, -1)
    ok = (k < ones.size) & (i > seg_s) & (i < seg_e - 1)
    ks, kv, ve = seg_s[ok], i[ok], seg_e[ok]
    rec = np.searchsorted(slot, ks, side="right") - 1
    m = int(ks.size)
    if m:
        # later duplicates of a key in one record overwrite earlier ones
        h, _ = java_hash_ranges(buf, ks, kv)
        ident = rec.astype(np.uint64) << np.uint64(32) | h
        if np.unique(ident).size != m:
            keep = _last_occurrences(buf, rec, ks, kv, ident)
            rec, ks, kv, ve = rec[keep], ks[keep], kv[keep], ve[keep]
            m = int(ks.size)
    bounds = np.empty(4 * m, dtype=np.int64)
    bounds[0::4], bounds[1::4], bounds[2::4], bounds[3::4] = ks, kv, kv + 1, ve
    pieces = _pieces(buf, bounds)
    keys = _to_string(pieces.take(pa.array(np.arange(m, dtype=np.int64) * 4)))
    values = _to_string(pieces.take(pa.array(np.arange(m, dtype=np.int64) * 4 + 2)))
    return Properties(n, rec.astype(np.int64), keys, values)


def _last_occurrences(buf, rec, ks, kv, ident) -> np.ndarray:
    """Mask keeping, per record and key, only the last entry (exact byte comparison)."""
    keep = np.ones(rec.size, dtype=bool)
    _, inv, counts = np.unique(ident, return_inverse=True, return_counts=True)
    suspects = np.flatnonzero(counts[inv] > 1)
    last: dict[tuple[int, bytes], int] = {}
    for j in suspects.tolist():
        key = (int(rec[j]), buf[ks[j]:kv[j]].tobytes())
        prev = last.get(key)
        if prev is not None:
            keep[prev] = False
        last[key] = j
    return keep


# ------------------------------------------------------------------------------------------------
# Hosts and ids
# ------------------------------------------------------------------------------------------------

def host_array(u8: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> pa.Array:
    """``"ip:port"`` / ``"[v6]:port"`` of the raw host fields (8 or 20 bytes)."""
    n = pos.size
    codes = np.zeros(n, dtype=np.int32)
    names: list[str] = []
    for width in (8, 20):
        idx = np.flatnonzero(lens == width)
        if idx.size == 0:
            continue
        mat = np.ascontiguousarray(u8[pos[idx, None] + np.arange(width)])
        uniq, inv = np.unique(mat.view(np.dtype((np.void, width))).ravel(), return_inverse=True)
        base = len(names)
        names.extend(format_host(u.tobytes()) for u in uniq)
        codes[idx] = base + inv.ravel()
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(names, pa.string())).dictionary_decode()


def msg_id_array(u8: np.ndarray, batch: M.RecordBatch, phys: np.ndarray) -> pa.Array:
    """offsetMsgId: upper-case hex of the raw STOREHOST field followed by the phy offset (i64)."""
    n = len(batch)
    widths = 2 * (batch.store_host_len + 8)
    offs = offsets_of(widths)
    data = np.empty(int(offs[-1]), dtype=np.uint8)
    be = phys.astype(">i8").view(np.uint8).reshape(n, 8)
    for width in (8, 20):
        idx = np.flatnonzero(batch.store_host_len == width)
        if idx.size == 0:
            continue
        raw = np.concatenate([u8[batch.store_host_pos[idx, None] + np.arange(width)], be[idx]], axis=1)
        text = _HEX[raw].reshape(idx.size, 2 * (width + 8))
        data[ranges_index(offs[idx], np.full(idx.size, 2 * (width + 8)))] = text.ravel()
    return pa.StringArray.from_buffers(n, pa.py_buffer(offs.astype(np.int32)), pa.py_buffer(data))


# ------------------------------------------------------------------------------------------------
# Record batch -> Arrow
# ------------------------------------------------------------------------------------------------

class TopicDecoder:
    """Topic bytes -> str, cached across batches (topics repeat)."""

    def __init__(self):
        self.ids: dict[bytes, int] = {}
        self.names: list[str] = []

    def codes(self, mm, batch: M.RecordBatch) -> np.ndarray:
        """The code of each record's topic: the batch's distinct topic byte strings are found with
        numpy (one row of bytes per record, ``np.unique``), so Python sees each distinct topic once."""
        n = len(batch)
        if n == 0:
            return np.empty(0, dtype=np.int32)
        u8 = np.frombuffer(mm, dtype=np.uint8)
        lens = np.maximum(batch.topic_len.astype(np.int64), 0)
        width = int(lens.max())
        cols = np.arange(width, dtype=np.int64)
        mat = u8[np.minimum(batch.topic_pos.astype(np.int64)[:, None] + cols, u8.size - 1)]
        mat[cols[None, :] >= lens[:, None]] = 0
        rows = np.empty((n, width + 2), dtype=np.uint8)  # the length first: "a" and "a\0" differ
        rows[:, 0], rows[:, 1], rows[:, 2:] = lens & 0xFF, lens >> 8, mat
        uniq, first, inv = np.unique(rows.view(np.dtype((np.void, width + 2))).ravel(), return_index=True,
                                     return_inverse=True)
        ids, names = self.ids, self.names
        code_of = np.empty(len(uniq), dtype=np.int32)
        for j, i in enumerate(first.tolist()):
            tb = bytes(mat[i, :lens[i]])
            c = ids.get(tb)
            if c is None:
                c = ids[tb] = len(names)
                names.append(tb.decode("utf-8", "replace"))
            code_of[j] = c
        return code_of[inv.ravel()]

    def array(self, codes: np.ndarray) -> pa.Array:
        return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(self.names, pa.string())).dictionary_decode()


def _ts(ms: np.ndarray) -> pa.Array:
    us = np.clip(ms.astype(np.int64), -(2**63) // 1000, (2**63 - 1) // 1000) * 1000
    return pa.array(us, TS_TYPE)


def _decoded_bodies(col: pa.Array, sys_flag: np.ndarray) -> pa.Array:
    """``col`` with its compressed bodies (sysFlag bit 0) decompressed; only batches that hold one
    leave Arrow."""
    compressed = np.flatnonzero(sys_flag & COMPRESSED_FLAG)
    if not compressed.size:
        return col
    values = col.to_pylist()
    for i in compressed.tolist():
        try:
            values[i] = decompress(values[i], int(sys_flag[i]))
        except CompressionError:
            pass  # damaged compressed bytes stay as stored (sysFlag tells)
    return pa.array(values, pa.binary())


class Body(enum.Enum):
    """What the ``body`` column holds."""

    #: the body, a compressed one (sysFlag bit 0) decompressed (one that does not decompress keeps its
    #: stored bytes)
    DECODED = "decoded"
    #: the stored bytes, compressed or not
    RAW = "raw"
    #: null (the source's ``includeBody=false``)
    NONE = "none"

    @classmethod
    def of(cls, include_body: bool, raw_body: bool) -> Body:
        """The mode the source's ``includeBody``/``rawBody`` options name."""
        if not include_body:
            return cls.NONE
        return cls.RAW if raw_body else cls.DECODED


#: columns that are one numpy column of the batch as it is: name -> (RecordBatch attribute, Arrow type)
_PLAIN_COLUMNS = {
    "queueId": ("queue_id", pa.int32()),
    "queueOffset": ("queue_offset", pa.int64()),
    "flag": ("flag", pa.int32()),
    "sysFlag": ("sys_flag", pa.int32()),
    "reconsumeTimes": ("reconsume_times", pa.int32()),
    "preparedTransactionOffset": ("prepared_transaction_offset", pa.int64()),
    "bodyCRC": ("body_crc", pa.int32()),
}


def _body_column(seg_mm, batch: M.RecordBatch, body: Body) -> pa.Array:
    if body is Body.NONE:
        return pa.nulls(len(batch), pa.binary())
    col = binary_array(seg_mm, batch.body_pos, batch.body_len)
    return col if body is Body.RAW else _decoded_bodies(col, batch.sys_flag)


def _property_column(props, name: str) -> pa.Array:
    if name == "tags":
        return props.value_of("TAGS")
    if name == "keys":
        return props.keys_array()
    if name == "uniqKey":
        return props.value_of("UNIQ_KEY")
    return props.map_array()  # properties


def record_batch_to_arrow(seg, batch: M.RecordBatch, schema: pa.Schema, topics: TopicDecoder,
                          topic_codes: np.ndarray | None = None, body: Body = Body.DECODED) -> pa.RecordBatch:
    """The requested columns (``schema``, a subset of :data:`ARROW_SCHEMA` in any order) of a batch
    of records of the segment ``seg`` (its map ``mm``, its ``uint8`` view ``u8`` and its commitlog
    offset ``start``, as :class:`~rmqstore.spark.scan.Segment` has them)."""
    seg_mm, u8 = seg.mm, seg.u8
    names = schema.names
    props = parse_properties_batch(u8, batch.props_pos, batch.props_len) if set(names) & _PROPERTY_COLUMNS else None
    phys = batch.starts + seg.start
    cols: dict[str, pa.Array] = {}
    for name in names:
        plain = _PLAIN_COLUMNS.get(name)
        if plain is not None:
            col = pa.array(getattr(batch, plain[0]), plain[1])
        elif name in _PROPERTY_COLUMNS:
            col = _property_column(props, name)
        elif name == "topic":
            col = topics.array(topic_codes if topic_codes is not None else topics.codes(seg_mm, batch))
        elif name == "commitLogOffset":
            col = pa.array(phys, pa.int64())
        elif name == "storeSize":
            col = pa.array(batch.total.astype(np.int32), pa.int32())
        elif name == "body":
            col = _body_column(seg_mm, batch, body)
        elif name == "msgId":
            col = msg_id_array(u8, batch, phys)
        elif name == "bornTimestamp":
            col = _ts(batch.born_timestamp)
        elif name == "storeTimestamp":
            col = _ts(batch.store_timestamp)
        elif name == "bornHost":
            col = host_array(u8, batch.born_host_pos, batch.born_host_len)
        elif name == "storeHost":
            col = host_array(u8, batch.store_host_pos, batch.store_host_len)
        else:  # validated on the driver
            raise KeyError(name)
        cols[name] = col
    return pa.RecordBatch.from_arrays([cols[n] for n in names], schema=schema)
