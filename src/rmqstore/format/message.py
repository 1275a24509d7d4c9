"""CommitLog record codec (FORMAT.md §2): decoding, and the names of the codec's modules.

The record's fixed fields, their offsets and the stamps of the append path are in
:mod:`.record_layout` (one annotated field list), encoding in :mod:`.encode` (one record) and
:mod:`.encode_batch` (numpy headers), framing and CRC checks in :mod:`.frame`; this module decodes,
in two forms: scalar (``struct`` on ``memoryview``/``mmap``) into a
:class:`~rmqstore.format.record.MessageRecord`, and batch (numpy gathers over a ``uint8`` view)
into :class:`RecordBatch` columns for dispatch, recovery, verify and Spark. It re-exports the names
of the other modules, so ``from rmqstore.format import message as M`` reaches the whole codec.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import CorruptRecordError
from . import encode_batch as _encode_batch
from . import properties as P
from .arrays import rows_at
from .encode import (RecordFields, V4Shape, encode_blank, encode_record, fill_prop_crc, patch_offsets,  # noqa: F401
                     topic_field)
from .encode_batch import TAILS_KEPT, BatchFields, BatchV4, encode_batch, encode_batch_v4  # noqa: F401
from .frame import RecordLayout, check_record, crc_problem, read_layout, torn_end, verify_prop_crc  # noqa: F401
from .hashes import crc32_raw
from .msgid import encode_offset_msg_id, format_host
from .record import MessageRecord, lazy_v1_record, tags_hash
from .record_layout import (  # noqa: F401
    BLANK, BLANK_MAGIC, BODY_BASE, BODY_LEN_BASE, BORN_HOST_POS, BORN_TIMESTAMP_POS, END_FILE_MIN_BLANK_LENGTH,
    FIELDS, FIXED_V4, FIXED_V4_DTYPE, HEAD, HEAD_DTYPE, HEAD_SIZE, I16, I32, I64, IPV4_ADDR, IPV6_ADDR, LAYOUTS,
    MAGIC_V1, MAGIC_V2, MAX_TOPIC_BYTES, MIN_RECORD_SIZE, PHY_OFFSET_POS, PORT_SIZE, PREPARED_BASE, QUEUE_OFFSET_POS,
    RECONSUME_BASE, STORE_HOST_BASE, STORE_TIMESTAMP_BASE, STORE_TIMESTAMP_END_V4, SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED, SYSFLAG_HOSTS_V6, SYSFLAG_MULTI_TAGS, SYSFLAG_POS, SYSFLAG_STOREHOST_V6, SYSFLAG_TX_MASK,
    TOPIC_LEN_V1, TOPIC_LEN_V2, TOTAL_MAGIC, TX_COMMIT, TX_NOT_TYPE, TX_PREPARED, TX_ROLLBACK, V4, FieldLayout,
    host_len, host_sys_flag, layout_for_hosts, layout_of, record_length, stamp_batch, stamp_record,
    store_timestamp_at, store_timestamp_pos)

_RECONSUME_PREPARED = struct.Struct(">" + V4.formats["reconsume_times"] + V4.formats["prepared_transaction_offset"])
_tails = _encode_batch.topic_tails  # (the name the tests clear the cache of)

# ------------------------------------------------------------------------------------------------
# Batch (numpy) form
# ------------------------------------------------------------------------------------------------

_AR = {w: np.arange(w, dtype=np.int64) for w in (1, 2, 4, 8)}


def _gather(u8: np.ndarray, offs: np.ndarray, width: int) -> np.ndarray:
    """Rows ``u8[o:o + width]`` for each ``o`` in ``offs`` (IndexError if one does not fit)."""
    return rows_at(u8, offs, width) if width >= 16 else u8[offs[:, None] + _AR[width]]


def gather_i64(u8, offs):
    return _gather(u8, offs, 8).view(">i8").ravel().astype(np.int64)


def gather_i32(u8, offs):
    return _gather(u8, offs, 4).view(">i4").ravel().astype(np.int32)


def walk_records(buf, pos: int, end: int, max_records: int | None = None) -> tuple[np.ndarray, str, int]:
    """Follow TOTALSIZE from ``pos`` while headers look like records, up to ``end``.

    Returns ``(starts, stop, stop_pos)``: record start positions (int64, relative to ``buf``),
    why the walk stopped — ``"limit"`` (``end`` or ``max_records`` reached, or the next record ends
    past ``end``), ``"blank"`` (BLANK record at ``stop_pos``), ``"end"`` (zero header) or
    ``"invalid"`` (bad magic or size) — and where. The framing is only sketched here; callers
    validate the records with :func:`decode_batch`.
    """
    starts = []
    append = starts.append
    unpack = TOTAL_MAGIC.unpack_from
    last_header = end - TOTAL_MAGIC.size  # a header starting after this does not fit
    stop = "limit"
    for _ in range(max_records if max_records is not None else 1 << 62):
        if pos > last_header:
            break
        total, magic = unpack(buf, pos)
        if (magic == MAGIC_V1 or magic == MAGIC_V2) and MIN_RECORD_SIZE <= total <= end - pos:
            append(pos)
            pos += total
            continue
        if magic == MAGIC_V1 or magic == MAGIC_V2:
            stop = "invalid" if total < MIN_RECORD_SIZE else "limit"  # (limit: the record ends past ``end``)
        elif magic == BLANK_MAGIC:
            stop = "blank"
        elif total == 0 and magic == 0:
            stop = "end"
        else:
            stop = "invalid"
        break
    return np.asarray(starts, dtype=np.int64), stop, pos


@dataclass
class RecordBatch:
    """Columns of many records decoded at once. ``*_pos`` are absolute positions in the buffer."""

    starts: np.ndarray
    total: np.ndarray
    magic: np.ndarray
    body_crc: np.ndarray
    queue_id: np.ndarray
    flag: np.ndarray
    queue_offset: np.ndarray
    phy_offset: np.ndarray
    sys_flag: np.ndarray
    born_timestamp: np.ndarray
    born_host_pos: np.ndarray
    born_host_len: np.ndarray
    store_timestamp: np.ndarray
    store_host_pos: np.ndarray
    store_host_len: np.ndarray
    reconsume_times: np.ndarray
    prepared_transaction_offset: np.ndarray
    body_pos: np.ndarray
    body_len: np.ndarray
    topic_pos: np.ndarray
    topic_len: np.ndarray
    props_pos: np.ndarray
    props_len: np.ndarray
    valid: np.ndarray

    def __len__(self) -> int:
        return int(self.starts.size)

    def take(self, n: int) -> "RecordBatch":
        """The first ``n`` records."""
        return RecordBatch(**{k: v[:n] for k, v in self.__dict__.items()})

    def select(self, idx: np.ndarray) -> "RecordBatch":
        """Records ``idx`` (any index array or boolean mask)."""
        return RecordBatch(**{k: v[idx] for k, v in self.__dict__.items()})

    def first_invalid(self) -> int:
        if self.valid.size <= 16:
            flags = self.valid.tolist()
            return flags.index(False) if False in flags else len(flags)
        bad = np.flatnonzero(~self.valid)
        return int(bad[0]) if bad.size else len(self)


def decode_batch(u8: np.ndarray, starts: np.ndarray) -> RecordBatch:
    """Decode the framing and fixed fields of the records at ``starts`` in ``u8`` (uint8 view).

    ``valid[i]`` is False when record i's magic or length formula does not hold; its other columns
    are then meaningless. Positions that would read past the buffer are clamped and marked invalid.
    A batch of IPv4-only records (the usual) is read with one ``FIXED_V4`` row per record.
    """
    n = starts.size
    limit = u8.size
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return RecordBatch(*([z] * 23), valid=np.zeros(0, dtype=bool))
    if n <= SMALL_DECODE:
        small = _decode_small(u8, starts.tolist())
        if small is not None:
            return small
    if limit >= FIXED_V4.size and int(starts.min()) >= 0 and int(starts.max()) <= limit - FIXED_V4.size:
        fixed = _gather(u8, starts, FIXED_V4.size).view(FIXED_V4_DTYPE).ravel()
        sys_flag = fixed["sys_flag"].astype(np.int32)
        if not (sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)).any():
            return _decode_v4(u8, starts, fixed, sys_flag)
    return _decode_any(u8, starts)


#: batches up to this many records are decoded record by record (numpy's fixed cost per call is most
#: of the time of a one-record batch: a broker dispatches many of those)
SMALL_DECODE = 16
_I64, _I32 = np.int64, np.int32
_V4_SIZE = V4.size
_V4_HOST, _V6_HOST = IPV4_ADDR + PORT_SIZE, IPV6_ADDR + PORT_SIZE
_V4_STORE_HOST = V4.offset["store_addr"]
#: positions in a ``FIXED_V4`` tuple, as scan_v4 and _decode_small index it
assert [list(V4.formats).index(n) for n in ("sys_flag", "store_timestamp", "reconsume_times", "body_len")] == \
    [7, 11, 14, 16]


def scan_v4(buf, st: int, limit: int):
    """The record at ``st`` read with one ``struct`` unpack, by :func:`decode_batch`'s rules:
    ``(fixed fields (FIXED_V4), topic_pos, topic_len, props_pos, props_len, valid)``; None when the
    fixed part does not fit before ``limit`` or a host is IPv6 (the batch path then decides). When
    ``valid`` is False the positions are meaningless (clamped as decode_batch clamps them)."""
    if st < 0 or st + FIXED_V4.size > limit:
        return None
    f = FIXED_V4.unpack_from(buf, st)
    if f[7] & SYSFLAG_HOSTS_V6:
        return None
    total, magic, body_len = f[0], f[1], f[16]
    top = min(st + total, limit)
    v2 = magic == MAGIC_V2
    tl_pos = st + _V4_SIZE + max(body_len, 0)
    ok5 = tl_pos + 2 <= top
    tl_off = tl_pos if ok5 else 0
    width = TOPIC_LEN_V2 if v2 else TOPIC_LEN_V1
    topic_len = int.from_bytes(bytes(buf[tl_off:tl_off + width]), "big", signed=True)
    topic_pos = tl_pos + width
    pl_pos = topic_pos + max(topic_len, 0)
    ok6 = pl_pos + 2 <= top
    pl_off = pl_pos if ok6 else 0
    props_len = int.from_bytes(bytes(buf[pl_off:pl_off + 2]), "big", signed=True)
    formula = _V4_SIZE + max(body_len, 0) + width + topic_len + 2 + max(props_len, 0)
    valid = ((magic == MAGIC_V1 or v2) and total >= MIN_RECORD_SIZE and st + total <= limit and ok5 and ok6
             and topic_len >= 0 and formula == total)
    return f, topic_pos, topic_len, pl_off + 2, props_len, valid


def _decode_small(u8: np.ndarray, starts: list[int]) -> RecordBatch | None:
    """:func:`decode_batch` of a few records with IPv4 hosts (:func:`scan_v4` each: same columns,
    same validity rules); None when one has IPv6 hosts or does not fit (the general path then decides)."""
    rows = []
    born_at, store_at, body_at, host = BORN_HOST_POS, _V4_STORE_HOST, _V4_SIZE, _V4_HOST  # (locals: per record)
    for st in starts:
        scanned = scan_v4(u8, st, u8.size)
        if scanned is None:
            return None
        f, topic_pos, topic_len, props_pos, props_len, valid = scanned
        rows.append((st, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], st + born_at, host, f[11],
                     st + store_at, host, f[14], f[15], st + body_at, f[16], topic_pos, topic_len,
                     props_pos, props_len, valid))
    table = np.array(rows, dtype=_I64).T.copy()  # one row per column, each contiguous
    i64 = list(table[:23])
    for j in (2, 3, 4, 5, 8, 15):  # magic, body_crc, queue_id, flag, sys_flag, reconsume_times: int32
        i64[j] = i64[j].astype(_I32)
    return RecordBatch(*i64, valid=table[23].astype(bool))


def _decode_any(u8: np.ndarray, starts: np.ndarray) -> RecordBatch:
    """:func:`decode_batch` for any mix of IPv4 and IPv6 hosts (each field gathered on its own)."""
    limit = u8.size
    head = _gather(u8, starts, HEAD_SIZE).view(HEAD_DTYPE).ravel()
    total = head["total"].astype(np.int64)
    magic = head["magic"].astype(np.int32)
    sys_flag = head["sys_flag"].astype(np.int32)
    b = np.where(sys_flag & SYSFLAG_BORNHOST_V6, _V6_HOST, _V4_HOST).astype(np.int64)
    s = np.where(sys_flag & SYSFLAG_STOREHOST_V6, _V6_HOST, _V4_HOST).astype(np.int64)
    ends = starts + total
    valid = ((magic == MAGIC_V1) | (magic == MAGIC_V2)) & (total >= MIN_RECORD_SIZE) & (ends <= limit)

    def clamp(offs, width):
        ok = offs + width <= np.minimum(ends, limit)
        return np.where(ok, offs, 0), ok

    st_off, ok1 = clamp(starts + STORE_TIMESTAMP_BASE + b, 8)
    rc_off, ok2 = clamp(starts + RECONSUME_BASE + b + s, 4)
    pt_off, ok3 = clamp(starts + PREPARED_BASE + b + s, 8)
    bl_off, ok4 = clamp(starts + BODY_LEN_BASE + b + s, 4)
    body_len = gather_i32(u8, bl_off).astype(np.int64)
    valid &= ok1 & ok2 & ok3 & ok4
    return _batch_from(u8, starts, _Fixed(head, total, magic, sys_flag, valid, b, s, gather_i64(u8, st_off),
                                          gather_i32(u8, rc_off), gather_i64(u8, pt_off), body_len))


def _decode_v4(u8: np.ndarray, starts: np.ndarray, fixed: np.ndarray, sys_flag: np.ndarray) -> RecordBatch:
    """:func:`decode_batch` for records without IPv6 hosts, whose fixed part (``FIXED_V4_DTYPE``)
    is read whole: every field up to BODYLENGTH sits inside the ``MIN_RECORD_SIZE`` bytes a valid record has."""
    total = fixed["total"].astype(np.int64)
    magic = fixed["magic"].astype(np.int32)
    valid = ((magic == MAGIC_V1) | (magic == MAGIC_V2)) & (total >= MIN_RECORD_SIZE) & (starts + total <= u8.size)
    eight = np.full(starts.size, _V4_HOST, dtype=np.int64)
    return _batch_from(u8, starts, _Fixed(
        fixed, total, magic, sys_flag, valid, eight, eight.copy(), fixed["store_timestamp"].astype(np.int64),
        fixed["reconsume_times"].astype(np.int32), fixed["prepared_transaction_offset"].astype(np.int64),
        fixed["body_len"].astype(np.int64)))


def _be16(u8: np.ndarray, offs: np.ndarray) -> np.ndarray:
    """Big-endian int16 at each of ``offs`` (two byte gathers; no index matrix)."""
    return ((u8[offs].astype(np.uint16) << 8) | u8[offs + 1]).view(np.int16).astype(np.int64)


class _Fixed(NamedTuple):
    """The fixed fields of a batch's records as the two batch decoders read them: ``head`` (a
    structured array with the fields before the born host), the host widths ``b``/``s`` and the
    columns after the hosts."""

    head: np.ndarray
    total: np.ndarray
    magic: np.ndarray
    sys_flag: np.ndarray
    valid: np.ndarray
    b: np.ndarray
    s: np.ndarray
    store_ts: np.ndarray
    reconsume: np.ndarray
    prepared: np.ndarray
    body_len: np.ndarray


def _batch_from(u8: np.ndarray, starts: np.ndarray, fx: _Fixed) -> RecordBatch:
    """The variable part (topic and properties lengths, found from BODYLENGTH) and the batch."""
    head, total, magic, sys_flag, valid, b, s, store_ts, reconsume, prepared, body_len = fx
    limit = u8.size
    top = np.minimum(starts + total, limit)
    body_pos = starts + BODY_BASE + b + s
    v2 = magic == MAGIC_V2
    any_v2 = bool(v2.any())
    tl_pos = body_pos + np.maximum(body_len, 0)
    ok5 = tl_pos + 2 <= top
    tl_off = np.where(ok5, tl_pos, 0)
    topic_len = u8[tl_off].view(np.int8).astype(np.int64)
    if any_v2:
        topic_len = np.where(v2, _be16(u8, tl_off), topic_len)
    topic_pos = tl_pos + (np.where(v2, 2, 1) if any_v2 else 1)
    pl_pos = topic_pos + np.maximum(topic_len, 0)
    ok6 = pl_pos + 2 <= top
    pl_off = np.where(ok6, pl_pos, 0)
    props_len = _be16(u8, pl_off)
    formula = (BODY_BASE + b + s + np.maximum(body_len, 0) + (np.where(v2, 2, 1) if any_v2 else 1) + topic_len + 2
               + np.maximum(props_len, 0))
    valid &= ok5 & ok6 & (topic_len >= 0) & (formula == total)
    return RecordBatch(
        starts=starts, total=total, magic=magic, body_crc=head["body_crc"].astype(np.int32),
        queue_id=head["queue_id"].astype(np.int32), flag=head["flag"].astype(np.int32),
        queue_offset=head["queue_offset"].astype(np.int64), phy_offset=head["phy_offset"].astype(np.int64),
        sys_flag=sys_flag, born_timestamp=head["born_timestamp"].astype(np.int64),
        born_host_pos=starts + BORN_HOST_POS, born_host_len=b, store_timestamp=store_ts,
        store_host_pos=starts + STORE_HOST_BASE + b, store_host_len=s, reconsume_times=reconsume,
        prepared_transaction_offset=prepared, body_pos=body_pos, body_len=body_len,
        topic_pos=topic_pos, topic_len=topic_len, props_pos=pl_off + 2, props_len=props_len, valid=valid,
    )


def body_crc_ok(buf, batch: RecordBatch) -> np.ndarray:
    """Per-record BODYCRC check (records with no body pass)."""
    mv = memoryview(buf)
    ends = (batch.body_pos + np.maximum(batch.body_len, 0)).tolist()
    got = np.fromiter([crc32_raw(mv[a:b]) for a, b in zip(batch.body_pos.tolist(), ends)], dtype=np.int64,
                      count=len(batch))
    return ((got & 0x7FFFFFFF) == batch.body_crc) | (batch.body_len <= 0)


# ------------------------------------------------------------------------------------------------
# Full decode into a MessageRecord
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DecodeChecks:
    """What :func:`decode_message` checks, and where the buffer is (for errors): ``check_crc``
    verifies the CRC (the properties CRC under ``force_verify_prop_crc``, else the body's),
    ``check_torn`` rejects a record whose end is zero-filled (:func:`torn_end`); ``base_offset``
    is the phy offset of ``buf[0]`` and ``path`` its file."""

    check_crc: bool = False
    force_verify_prop_crc: bool = False
    check_torn: bool = False
    base_offset: int = 0
    path: str | None = None


def decode_message(buf, pos: int, limit: int, checks: DecodeChecks | None = None, /, **by_name):
    """Decode the record at ``buf[pos]`` into a :class:`~rmqstore.types.MessageRecord`, checked as
    ``checks`` (or the same fields by name) says. The record's own PHYSICALOFFSET field is returned.
    Raises :class:`CorruptRecordError` with path and offset. ``tags_code`` is the TAGS hash: a delayed
    SCHEDULE_TOPIC_XXXX record's depends on the broker's delay levels, which its reader applies
    (``tags_code_of``).
    """
    c = checks if checks is not None else DecodeChecks(**by_name)
    base_offset, path = c.base_offset, c.path
    if limit - pos >= MIN_RECORD_SIZE and not (c.check_crc and c.force_verify_prop_crc):  # (needs the layout)
        rec = decode_v1_ipv4(buf, pos, limit, c.check_crc, c.check_torn, (base_offset, path))
        if rec is not None:
            return rec
    lay = _checked_layout(buf, pos, limit, c)
    mv = memoryview(buf)
    (total, magic, body_crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts) = HEAD.unpack_from(buf, pos)
    b = lay.born_len
    born_raw = bytes(mv[pos + BORN_HOST_POS:pos + BORN_HOST_POS + b])
    store_ts = I64.unpack_from(buf, pos + STORE_TIMESTAMP_BASE + b)[0]
    store_raw = bytes(mv[pos + STORE_HOST_BASE + b:pos + STORE_HOST_BASE + b + lay.store_len])
    reconsume, prepared = _RECONSUME_PREPARED.unpack_from(buf, pos + RECONSUME_BASE + b + lay.store_len)
    body = bytes(mv[pos + lay.body_pos:pos + lay.body_pos + max(lay.body_len, 0)])
    try:
        topic = bytes(mv[pos + lay.topic_pos:pos + lay.topic_pos + lay.topic_len]).decode("utf-8", "replace")
    except UnicodeDecodeError as e:  # pragma: no cover - 'replace' never raises
        raise CorruptRecordError("topic is not UTF-8", path=path, offset=base_offset + pos) from e
    props = P.parse_properties(mv[pos + lay.props_pos:pos + lay.props_pos + lay.props_len]) if lay.props_len > 0 else {}
    return MessageRecord(
        phy_offset=phy, store_size=total, topic=topic, queue_id=queue_id, queue_offset=queue_offset,
        flag=flag, sys_flag=sys_flag, body_crc=body_crc, born_timestamp=born_ts,
        born_host=format_host(born_raw), store_timestamp=store_ts, store_host=format_host(store_raw),
        reconsume_times=reconsume, prepared_transaction_offset=prepared, body=body, properties=props,
        msg_id=encode_offset_msg_id(store_raw, phy), magic=magic,
        tags_code=tags_hash(props),
    )


_TOPICS: dict = {}


def _checked_layout(buf, pos: int, limit: int, c: DecodeChecks) -> RecordLayout:
    """:func:`read_layout` and the checks ``c`` asks for, as :class:`CorruptRecordError`."""
    where = {"path": c.path, "offset": c.base_offset + pos}
    try:
        lay = read_layout(buf, pos, limit)
    except (ValueError, struct.error) as e:
        raise CorruptRecordError(f"invalid commitlog record: {e}", **where) from e
    if c.check_crc:
        reason = crc_problem(buf, pos, lay, c.force_verify_prop_crc)
        if reason:
            raise CorruptRecordError(f"invalid commitlog record: {reason}", **where)
    if c.check_torn and torn_end(buf, pos, lay):
        raise CorruptRecordError("incomplete commitlog record (its end is zero-filled: a torn write)", **where)
    return lay


def decode_v1_ipv4(buf, pos: int, limit: int, check_crc: bool, check_torn: bool,
                   at: tuple[int, str | None] = (0, None)):
    """Fast path of :func:`decode_message` for a V1 record with IPv4 hosts (one unpack of the
    fixed part); None when the record has another shape, so the general path decides. ``at`` =
    (phy offset of ``buf[0]``, path), for errors."""
    fixed = FIXED_V4.unpack_from(buf, pos)
    total, magic, body_crc, sys_flag, body_len = fixed[0], fixed[1], fixed[2], fixed[7], fixed[16]
    if magic != MAGIC_V1 or sys_flag & SYSFLAG_HOSTS_V6 or body_len < 0:
        return None
    end = pos + total
    tp = pos + _V4_SIZE + body_len
    if total < MIN_RECORD_SIZE or end > limit or tp + TOPIC_LEN_V1 + 2 > end:
        return None
    topic_len = buf[tp]
    if topic_len > 127:
        return None
    pp = tp + 1 + topic_len
    if pp + 2 > end:
        return None
    props_len = I16.unpack_from(buf, pp)[0]
    if props_len < 0 or pp + 2 + props_len != end:
        return None
    body = bytes(buf[pos + _V4_SIZE:tp])
    if check_crc and body_len and (crc32_raw(body) & 0x7FFFFFFF) != body_crc:
        raise CorruptRecordError(f"invalid commitlog record: body CRC {body_crc} != computed "
                                 f"{crc32_raw(body) & 0x7FFFFFFF}", path=at[1], offset=at[0] + pos)
    raw_props = bytes(buf[pp + 2:end])
    if check_torn and ((props_len and raw_props[-1] == 0) or (not props_len and topic_len and buf[pp - 1] == 0)):
        raise CorruptRecordError("incomplete commitlog record (its end is zero-filled: a torn write)",
                                 path=at[1], offset=at[0] + pos)
    tb = bytes(buf[tp + 1:pp])
    topic = _TOPICS.get(tb)
    if topic is None:
        topic = tb.decode("utf-8", "replace")
        if len(_TOPICS) < 65536:
            _TOPICS[tb] = topic
    # properties, hosts, msgId and tagsCode are decoded when first read (the record is checked whole here)
    return lazy_v1_record(fixed, topic, body, raw_props)
