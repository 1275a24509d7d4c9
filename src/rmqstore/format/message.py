"""CommitLog message record codec (FORMAT.md §2).

Record layout, big-endian; ``B``/``S`` = 8 (IPv4) or 20 (IPv6) per SYSFLAG bits 0x10/0x20,
``T`` = topic-length width, 1 (V1 magic) or 2 (V2 magic)::

    off        size  field
    0          4     TOTALSIZE                 whole record, this field included
    4          4     MAGICCODE                 V1 0xDAA320A7, V2 0xDAA320AB, BLANK 0xCBD43194
    8          4     BODYCRC                   crc32(body) & 0x7FFFFFFF
    12         4     QUEUEID
    16         4     FLAG
    20         8     QUEUEOFFSET
    28         8     PHYSICALOFFSET
    36         4     SYSFLAG
    40         8     BORNTIMESTAMP
    48         B     BORNHOST                  addr(4|16) + port i32
    48+B       8     STORETIMESTAMP
    56+B       S     STOREHOST
    56+B+S     4     RECONSUMETIMES
    60+B+S     8     PREPAREDTRANSACTIONOFFSET
    68+B+S     4     BODYLENGTH                <= 0: no body
    72+B+S     n     BODY
    ...        T     TOPICLENGTH               signed i8 (V1) / i16 (V2)
    ...        t     TOPIC                     UTF-8
    ...        2     PROPERTIESLENGTH          signed i16, <= 0: none
    ...        p     PROPERTIES

``TOTALSIZE == 72 + B + S + max(n,0) + T + t + 2 + max(p,0)`` for a valid record; 91 bytes of
overhead for V1 IPv4/IPv4. A segment ends with an 8-byte blank header ``[i32 remaining][i32 BLANK]``
when the next record does not fit (``L + 8 > remaining``); all-zero bytes mark the end of data.

Two forms: scalar (``struct`` on ``memoryview``/``mmap``) for single records and the write path,
and batch (numpy gathers over a ``uint8`` view) for dispatch, recovery, verify and Spark.
"""
from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

import numpy as np

from ..errors import CorruptRecordError
from .record import SCHEDULE_TOPIC, MessageRecord, lazy_v1_record, tags_code_of
from . import properties as P
from .arrays import rows_at
from .hashes import crc32, crc32_raw, java_hash_cached
from .msgid import encode_offset_msg_id, format_host

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TX_MASK = 0xC
TX_NOT_TYPE, TX_PREPARED, TX_COMMIT, TX_ROLLBACK = 0x0, 0x4, 0x8, 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

MAX_TOPIC_BYTES = 255
#: the smallest valid record: 91 bytes of fixed fields (TOTALSIZE's floor in the length formula)
MIN_RECORD_SIZE = 91

#: TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP
HEAD = struct.Struct(">iiiiiqqiq")
HEAD_SIZE = 48
assert HEAD.size == HEAD_SIZE
#: The whole fixed part of a V1/V2 record with IPv4 born and store hosts, up to BODYLENGTH.
FIXED_V4 = struct.Struct(">iiiiiqqiq4siq4siiqi")
assert FIXED_V4.size == 88
BLANK = struct.Struct(">ii")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
_TOTAL_MAGIC = struct.Struct(">ii")

QUEUE_OFFSET_POS = 20
PHY_OFFSET_POS = 28
SYSFLAG_POS = 36
BORN_HOST_POS = 48


def host_len(sys_flag: int, v6_bit: int) -> int:
    return 20 if sys_flag & v6_bit else 8


def store_timestamp_pos(sys_flag: int) -> int:
    return 48 + host_len(sys_flag, SYSFLAG_BORNHOST_V6)


def record_length(body_len: int, topic_len: int, props_len: int, sys_flag: int, v2: bool) -> int:
    """TOTALSIZE of a record with these lengths (FORMAT.md §2.1 length formula)."""
    return (72 + host_len(sys_flag, SYSFLAG_BORNHOST_V6) + host_len(sys_flag, SYSFLAG_STOREHOST_V6)
            + max(body_len, 0) + (2 if v2 else 1) + topic_len + 2 + max(props_len, 0))


def encode_record(*, topic: bytes, body: bytes, props: bytes, queue_id: int, flag: int, sys_flag: int,
                  born_timestamp: int, born_host: bytes, store_timestamp: int, store_host: bytes,
                  reconsume_times: int, prepared_transaction_offset: int, v2: bool,
                  queue_offset: int = 0, phy_offset: int = 0) -> bytearray:
    """Encode one record. ``born_host``/``store_host`` are raw (addr + i32 port); ``sys_flag`` must
    already carry the V6 bits matching them. Offsets may be patched later with :func:`patch_offsets`.
    """
    total = record_length(len(body), len(topic), len(props), sys_flag, v2)
    crc = crc32(body) if body else 0
    magic = MAGIC_V2 if v2 else MAGIC_V1
    tlen = I16.pack(len(topic)) if v2 else bytes((len(topic),))
    if len(born_host) == 8 and len(store_host) == 8:
        head = FIXED_V4.pack(total, magic, crc, queue_id, flag, queue_offset, phy_offset, sys_flag,
                             born_timestamp, born_host[:4], I32.unpack_from(born_host, 4)[0],
                             store_timestamp, store_host[:4], I32.unpack_from(store_host, 4)[0],
                             reconsume_times, prepared_transaction_offset, len(body))
        out = bytearray(head)
    else:
        out = bytearray(HEAD.pack(total, magic, crc, queue_id, flag, queue_offset, phy_offset, sys_flag,
                                  born_timestamp))
        out += born_host
        out += I64.pack(store_timestamp)
        out += store_host
        out += struct.pack(">iqi", reconsume_times, prepared_transaction_offset, len(body))
    out += body
    out += tlen
    out += topic
    out += I16.pack(len(props))
    out += props
    assert len(out) == total
    return out


def patch_offsets(buf, pos: int, queue_offset: int, phy_offset: int) -> None:
    I64.pack_into(buf, pos + QUEUE_OFFSET_POS, queue_offset)
    I64.pack_into(buf, pos + PHY_OFFSET_POS, phy_offset)


def fill_prop_crc(buf, pos: int, total: int) -> int:
    """Compute and write the reserved properties CRC of the record at ``pos`` (FORMAT.md §2.6)."""
    crc = crc32(memoryview(buf)[pos:pos + total - P.CRC32_RESERVED_LEN])
    start = pos + total - 11
    buf[start:start + 10] = P.crc_digits(crc)
    return crc


def encode_blank(remaining: int) -> bytes:
    return BLANK.pack(remaining, BLANK_MAGIC)


class RecordLayout(NamedTuple):
    """Positions (relative to the record start) of the variable parts of one record."""

    total: int
    magic: int
    sys_flag: int
    born_len: int
    store_len: int
    body_pos: int
    body_len: int
    topic_pos: int
    topic_len: int
    props_pos: int
    props_len: int

    @property
    def store_timestamp_pos(self) -> int:
        return 48 + self.born_len


def read_layout(buf, pos: int, limit: int) -> RecordLayout:
    """Parse the framing of the record at ``pos`` (``limit`` = end of readable bytes).

    Raises ``ValueError`` (caller wraps with path/offset) on a short buffer, bad magic, negative
    or inconsistent lengths.
    """
    if limit - pos < HEAD_SIZE:
        raise ValueError(f"only {limit - pos} bytes readable, a record header needs {HEAD_SIZE}")
    total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise ValueError(f"bad magic code 0x{magic & 0xFFFFFFFF:08X} (expected 0xDAA320A7 or 0xDAA320AB)")
    if total < 91 or pos + total > limit:
        raise ValueError(f"TOTALSIZE {total} does not fit ({limit - pos} bytes readable)")
    sys_flag = I32.unpack_from(buf, pos + SYSFLAG_POS)[0]
    b = host_len(sys_flag, SYSFLAG_BORNHOST_V6)
    s = host_len(sys_flag, SYSFLAG_STOREHOST_V6)
    body_len = I32.unpack_from(buf, pos + 68 + b + s)[0]
    body_pos = 72 + b + s
    p = body_pos + max(body_len, 0)
    if pos + p + 1 > pos + total:
        raise ValueError(f"BODYLENGTH {body_len} runs past TOTALSIZE {total}")
    if magic == MAGIC_V2:
        topic_len = I16.unpack_from(buf, pos + p)[0]
        p += 2
    else:
        topic_len = struct.unpack_from(">b", buf, pos + p)[0]
        p += 1
    if topic_len < 0:
        raise ValueError(f"negative TOPICLENGTH {topic_len}")
    topic_pos = p
    p += topic_len
    if p + 2 > total:
        raise ValueError(f"TOPICLENGTH {topic_len} runs past TOTALSIZE {total}")
    props_len = I16.unpack_from(buf, pos + p)[0]
    p += 2
    props_pos = p
    p += max(props_len, 0)
    if p != total:
        raise ValueError(f"TOTALSIZE {total} differs from the length of its fields ({p})")
    return RecordLayout(total, magic, sys_flag, b, s, body_pos, body_len, topic_pos, topic_len,
                        props_pos, props_len)


def check_record(buf, pos: int, limit: int, *, check_crc: bool, force_verify_prop_crc: bool = False
                 ) -> tuple[int, bool, str]:
    """Upstream ``checkMessageAndReturnSize`` outcome: ``(size, ok, reason)``.

    ``(0, True, "blank")`` for a blank end-of-segment record; ``(0, False, "end")`` for a zero
    header (end of data); ``(-1 or TOTALSIZE, False, reason)`` for an invalid record.
    """
    if limit - pos < 8:
        return -1, False, f"only {limit - pos} bytes left"
    total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return 0, True, "blank"
    if total == 0 and magic == 0:
        return 0, False, "end"
    try:
        lay = read_layout(buf, pos, limit)
    except (ValueError, struct.error) as e:
        return (total if magic in (MAGIC_V1, MAGIC_V2) and 0 < total <= limit - pos else -1), False, str(e)
    if check_crc:
        reason = crc_problem(buf, pos, lay, force_verify_prop_crc)
        if reason:
            return -1, False, reason
    return total, True, "ok"


def crc_problem(buf, pos: int, lay: RecordLayout, force_verify_prop_crc: bool = False) -> str:
    """'' when the record's CRC holds (the properties CRC under ``forceVerifyPropCRC``, else the
    body CRC), otherwise what is wrong."""
    if force_verify_prop_crc:
        return verify_prop_crc(buf, pos, lay)
    if lay.body_len > 0:
        stored = I32.unpack_from(buf, pos + 8)[0]
        actual = crc32(memoryview(buf)[pos + lay.body_pos:pos + lay.body_pos + lay.body_len])
        if stored != actual:
            return f"body CRC {stored} != computed {actual}"
    return ""


def torn_end(buf, pos: int, lay: RecordLayout) -> bool:
    """True when the record's last field ends in a zero byte where a complete record cannot (the
    tail of a torn write of a zero-filled segment): a non-empty topic or properties string never
    ends with 0x00 (properties end with 0x02)."""
    if lay.props_len > 0:
        return buf[pos + lay.props_pos + lay.props_len - 1] == 0
    return lay.topic_len > 0 and buf[pos + lay.topic_pos + lay.topic_len - 1] == 0


def verify_prop_crc(buf, pos: int, lay: RecordLayout) -> str:
    """'' when the record's ``__CRC32#`` entry matches ``crc32(record[:-20])``, else the reason."""
    raw = bytes(memoryview(buf)[pos + lay.props_pos:pos + lay.props_pos + max(lay.props_len, 0)])
    value = P.parse_properties(raw).get(P.CRC32_KEY)
    if value is None:
        return "properties CRC entry missing"
    want = P.parse_crc_digits(value)
    got = crc32(memoryview(buf)[pos:pos + lay.total - P.CRC32_RESERVED_LEN])
    if want != got:
        return f"properties CRC {want} != computed {got}"
    return ""


# ------------------------------------------------------------------------------------------------
# Batch (numpy) form
# ------------------------------------------------------------------------------------------------

HEAD_DTYPE = np.dtype([
    ("total", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("phy_offset", ">i8"), ("sys_flag", ">i4"), ("born_timestamp", ">i8"),
])
assert HEAD_DTYPE.itemsize == HEAD_SIZE
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
    unpack = _TOTAL_MAGIC.unpack_from
    last_header = end - 8  # a header starting after this does not fit
    stop = "limit"
    for _ in range(max_records if max_records is not None else 1 << 62):
        if pos > last_header:
            break
        total, magic = unpack(buf, pos)
        if (magic == MAGIC_V1 or magic == MAGIC_V2) and 91 <= total <= end - pos:
            append(pos)
            pos += total
            continue
        if magic == MAGIC_V1 or magic == MAGIC_V2:
            stop = "invalid" if total < 91 else "limit"  # (limit: the record ends past ``end``)
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
        return RecordBatch(**{k: v[:n] for k, v in self.__dict__.items()})

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
    A batch of IPv4-only records (the usual) is read with one 88-byte row per record.
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


def scan_v4(buf, st: int, limit: int):
    """The record at ``st`` read with one ``struct`` unpack, by :func:`decode_batch`'s rules:
    ``(fixed fields (FIXED_V4), topic_pos, topic_len, props_pos, props_len, valid)``; None when the
    fixed part does not fit before ``limit`` or a host is IPv6 (the batch path then decides). When
    ``valid`` is False the positions are meaningless (clamped as decode_batch clamps them)."""
    if st < 0 or st + FIXED_V4.size > limit:
        return None
    f = FIXED_V4.unpack_from(buf, st)
    if f[7] & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6):
        return None
    total, magic, body_len = f[0], f[1], f[16]
    top = min(st + total, limit)
    v2 = magic == MAGIC_V2
    tl_pos = st + 88 + max(body_len, 0)
    ok5 = tl_pos + 2 <= top
    tl_off = tl_pos if ok5 else 0
    width = 2 if v2 else 1
    topic_len = int.from_bytes(bytes(buf[tl_off:tl_off + width]), "big", signed=True)
    topic_pos = tl_pos + width
    pl_pos = topic_pos + max(topic_len, 0)
    ok6 = pl_pos + 2 <= top
    pl_off = pl_pos if ok6 else 0
    props_len = int.from_bytes(bytes(buf[pl_off:pl_off + 2]), "big", signed=True)
    formula = 88 + max(body_len, 0) + width + topic_len + 2 + max(props_len, 0)
    valid = ((magic == MAGIC_V1 or v2) and total >= 91 and st + total <= limit and ok5 and ok6
             and topic_len >= 0 and formula == total)
    return f, topic_pos, topic_len, pl_off + 2, props_len, valid


def _decode_small(u8: np.ndarray, starts: list[int]) -> RecordBatch | None:
    """:func:`decode_batch` of a few records with IPv4 hosts (:func:`scan_v4` each: same columns,
    same validity rules); None when one has IPv6 hosts or does not fit (the general path then decides)."""
    rows = []
    for st in starts:
        scanned = scan_v4(u8, st, u8.size)
        if scanned is None:
            return None
        f, topic_pos, topic_len, props_pos, props_len, valid = scanned
        rows.append((st, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], st + 48, 8, f[11], st + 64, 8,
                     f[14], f[15], st + 88, f[16], topic_pos, topic_len, props_pos, props_len, valid))
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
    b = np.where(sys_flag & SYSFLAG_BORNHOST_V6, 20, 8).astype(np.int64)
    s = np.where(sys_flag & SYSFLAG_STOREHOST_V6, 20, 8).astype(np.int64)
    ends = starts + total
    valid = ((magic == MAGIC_V1) | (magic == MAGIC_V2)) & (total >= 91) & (ends <= limit)

    def clamp(offs, width):
        ok = offs + width <= np.minimum(ends, limit)
        return np.where(ok, offs, 0), ok

    st_off, ok1 = clamp(starts + 48 + b, 8)
    rc_off, ok2 = clamp(starts + 56 + b + s, 4)
    pt_off, ok3 = clamp(starts + 60 + b + s, 8)
    bl_off, ok4 = clamp(starts + 68 + b + s, 4)
    body_len = gather_i32(u8, bl_off).astype(np.int64)
    valid &= ok1 & ok2 & ok3 & ok4
    return _batch_from(u8, starts, head, total, magic, sys_flag, valid, b, s, gather_i64(u8, st_off),
                       gather_i32(u8, rc_off), gather_i64(u8, pt_off), body_len)


def _decode_v4(u8: np.ndarray, starts: np.ndarray, fixed: np.ndarray, sys_flag: np.ndarray) -> RecordBatch:
    """:func:`decode_batch` for records without IPv6 hosts, whose fixed part (``FIXED_V4_DTYPE``)
    is read whole: every field up to BODYLENGTH sits inside the 91 bytes a valid record has."""
    total = fixed["total"].astype(np.int64)
    magic = fixed["magic"].astype(np.int32)
    valid = ((magic == MAGIC_V1) | (magic == MAGIC_V2)) & (total >= 91) & (starts + total <= u8.size)
    eight = np.full(starts.size, 8, dtype=np.int64)
    return _batch_from(u8, starts, fixed, total, magic, sys_flag, valid, eight, eight.copy(),
                       fixed["store_timestamp"].astype(np.int64), fixed["reconsume_times"].astype(np.int32),
                       fixed["prepared_transaction_offset"].astype(np.int64), fixed["body_len"].astype(np.int64))


def _be16(u8: np.ndarray, offs: np.ndarray) -> np.ndarray:
    """Big-endian int16 at each of ``offs`` (two byte gathers; no index matrix)."""
    return ((u8[offs].astype(np.uint16) << 8) | u8[offs + 1]).view(np.int16).astype(np.int64)


def _batch_from(u8, starts, head, total, magic, sys_flag, valid, b, s, store_ts, reconsume, prepared, body_len
                ) -> RecordBatch:
    """The variable part (topic and properties lengths, found from BODYLENGTH) and the batch."""
    limit = u8.size
    top = np.minimum(starts + total, limit)
    body_pos = starts + 72 + b + s
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
    formula = (72 + b + s + np.maximum(body_len, 0) + (np.where(v2, 2, 1) if any_v2 else 1) + topic_len + 2
               + np.maximum(props_len, 0))
    valid &= ok5 & ok6 & (topic_len >= 0) & (formula == total)
    return RecordBatch(
        starts=starts, total=total, magic=magic, body_crc=head["body_crc"].astype(np.int32),
        queue_id=head["queue_id"].astype(np.int32), flag=head["flag"].astype(np.int32),
        queue_offset=head["queue_offset"].astype(np.int64), phy_offset=head["phy_offset"].astype(np.int64),
        sys_flag=sys_flag, born_timestamp=head["born_timestamp"].astype(np.int64),
        born_host_pos=starts + 48, born_host_len=b, store_timestamp=store_ts,
        store_host_pos=starts + 56 + b, store_host_len=s, reconsume_times=reconsume,
        prepared_transaction_offset=prepared, body_pos=body_pos, body_len=body_len,
        topic_pos=topic_pos, topic_len=topic_len, props_pos=pl_off + 2, props_len=props_len, valid=valid,
    )


FIXED_V4_DTYPE = np.dtype([
    ("total", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("phy_offset", ">i8"), ("sys_flag", ">i4"), ("born_timestamp", ">i8"),
    ("born_addr", "S4"), ("born_port", ">i4"), ("store_timestamp", ">i8"), ("store_addr", "S4"),
    ("store_port", ">i4"), ("reconsume_times", ">i4"), ("prepared_transaction_offset", ">i8"), ("body_len", ">i4"),
])
assert FIXED_V4_DTYPE.itemsize == FIXED_V4.size


@dataclass
class BatchV4:
    """A batch of records sharing topic, queue and IPv4 hosts, encoded except for what the append
    lock decides (queue offsets, phy offsets, store time): headers live in a numpy structured
    array, bodies and properties stay as given until :meth:`render` joins everything."""

    hdr: np.ndarray
    bodies: list
    props: list
    tails: list  # per record: the topic-length field, the topic and the properties length
    starts: np.ndarray
    totals: np.ndarray
    props_max: int  # the longest properties (bytes)

    @property
    def size(self) -> int:
        return int(self.totals.sum())

    def render(self, queue_offset0: int, phy0: int, store_timestamp: int,
               born_unset: np.ndarray | bool | None = None) -> bytes:
        """The records back to back: consecutive QUEUEOFFSETs from ``queue_offset0``, PHYSICALOFFSETs
        from ``phy0``, one STORETIMESTAMP (also the BORNTIMESTAMP where ``born_unset``, a mask, or
        of every record when it is True)."""
        hdr = self.hdr
        n = hdr.size
        if len(self.tails) != n:
            raise ValueError(f"properties of {self.props_max} bytes cannot be encoded (at most {P.MAX_PROPERTIES_SIZE})")
        hdr["queue_offset"] = np.arange(queue_offset0, queue_offset0 + n, dtype=np.int64)
        hdr["phy_offset"] = self.starts + np.int64(phy0)
        hdr["store_timestamp"] = np.int64(store_timestamp)
        if born_unset is True:
            hdr["born_timestamp"] = np.int64(store_timestamp)
        elif born_unset is not None and born_unset.any():
            hdr["born_timestamp"][born_unset] = np.int64(store_timestamp)
        # interleave header, body, topic + properties length, properties with C-level iterators
        pieces = zip(_headers_of(n).unpack(hdr.tobytes()), self.bodies, self.tails, self.props)
        return b"".join(chain.from_iterable(pieces))


@functools.lru_cache(maxsize=64)
def _headers_of(n: int) -> struct.Struct:
    """``n`` 88-byte strings: one ``unpack`` splits a batch's headers (a third of the time of
    ``iter_unpack``, which makes a tuple per header)."""
    return struct.Struct("88s" * n)


class _Tails(dict):
    """``tails[n]``: a topic's V1/V2 length field and bytes followed by the 2-byte properties
    length ``n`` (the piece between a record's body and its properties), kept for the first
    ``TAILS_KEPT`` lengths asked for (then built each time)."""

    __slots__ = ("topic_tail",)

    def __init__(self, topic_tail: bytes):
        super().__init__()
        self.topic_tail = topic_tail

    def __missing__(self, n: int) -> bytes:
        piece = self.topic_tail + I16.pack(n)
        if len(self) < TAILS_KEPT:
            self[n] = piece
        return piece


TAILS_KEPT = 1024


@functools.lru_cache(maxsize=64)
def _tails(topic_tail: bytes) -> _Tails:
    return _Tails(topic_tail)


@functools.lru_cache(maxsize=256)
def _batch_row(topic_tail: bytes, queue_id: int, born_host: bytes, store_host: bytes) -> np.ndarray:
    """The header fields every record of a batch shares (copied ``n`` times, never written)."""
    tl = len(topic_tail)
    row = np.zeros(1, dtype=FIXED_V4_DTYPE)
    row["magic"] = MAGIC_V1 if tl and topic_tail[0] <= 127 and tl - 1 == topic_tail[0] else MAGIC_V2
    row["queue_id"] = queue_id
    row["born_addr"] = born_host[:4]
    row["born_port"] = I32.unpack_from(born_host, 4)[0]
    row["store_addr"] = store_host[:4]
    row["store_port"] = I32.unpack_from(store_host, 4)[0]
    row.flags.writeable = False
    return row


def encode_batch_v4(topic_tail: bytes, bodies: list[bytes], props: list[bytes], *, queue_id: int, flags, sys_flags,
                    born_timestamps, born_host: bytes, store_host: bytes, reconsume_times, prepared_offsets) -> BatchV4:
    """Batch form of :func:`encode_record` for records sharing topic, queue and IPv4 hosts.

    ``topic_tail`` is the V1/V2 topic-length field plus the topic bytes; a column given as an int
    is that value in every record, as None all zero. Every field but the three
    the append lock owns is filled here with column-wise numpy assignments; :meth:`BatchV4.render`
    completes them. Properties of more than ``MAX_PROPERTIES_SIZE`` bytes cannot be encoded
    (``props_max`` tells the caller, which must not render such a batch)."""
    n = len(bodies)
    row = _batch_row(topic_tail, queue_id, born_host, store_host)
    blen = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
    plens = list(map(len, props))
    plen = np.array(plens, dtype=np.int64)
    props_max = int(plen.max()) if n else 0
    totals = 88 + blen + len(topic_tail) + 2 + plen
    starts = np.cumsum(totals) - totals
    hdr = np.repeat(row, n)
    hdr["total"] = totals
    hdr["body_crc"] = np.fromiter(map(crc32_raw, bodies), dtype=np.int64, count=n) & 0x7FFFFFFF
    hdr["body_len"] = blen
    for name, values in (("flag", flags), ("sys_flag", sys_flags), ("born_timestamp", born_timestamps),
                         ("reconsume_times", reconsume_times), ("prepared_transaction_offset", prepared_offsets)):
        if values is None or (isinstance(values, int) and not values):
            continue  # all zero, as copied from the row
        if isinstance(values, int) or (values.any() if isinstance(values, np.ndarray) else any(values)):
            hdr[name] = values
    pieces = list(map(_tails(topic_tail).__getitem__, plens)) if props_max <= P.MAX_PROPERTIES_SIZE else []
    return BatchV4(hdr, bodies, props, pieces, starts, totals, props_max)


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

def decode_message(buf, pos: int, limit: int, *, base_offset: int = 0, path: str | None = None,
                   check_crc: bool = False, delay_levels_ms=(), force_verify_prop_crc: bool = False,
                   check_torn: bool = False):
    """Decode the record at ``buf[pos]`` into a :class:`~rmqstore.types.MessageRecord`.

    ``base_offset`` is the phy offset of ``buf[0]`` (used for errors only; the record's own
    PHYSICALOFFSET field is returned). ``check_crc`` verifies the CRC, ``check_torn`` rejects a
    record whose end is zero-filled (:func:`torn_end`). Raises :class:`CorruptRecordError` with
    path and offset.
    """
    if limit - pos >= 91 and not (check_crc and force_verify_prop_crc):  # the properties CRC needs the layout
        rec = decode_v1_ipv4(buf, pos, limit, check_crc, check_torn, delay_levels_ms, base_offset, path)
        if rec is not None:
            return rec

    try:
        lay = read_layout(buf, pos, limit)
    except (ValueError, struct.error) as e:
        raise CorruptRecordError(f"invalid commitlog record: {e}", path=path, offset=base_offset + pos) from e
    mv = memoryview(buf)
    if check_crc:
        reason = crc_problem(buf, pos, lay, force_verify_prop_crc)
        if reason:
            raise CorruptRecordError(f"invalid commitlog record: {reason}", path=path, offset=base_offset + pos)
    if check_torn and torn_end(buf, pos, lay):
        raise CorruptRecordError("incomplete commitlog record (its end is zero-filled: a torn write)",
                                 path=path, offset=base_offset + pos)
    (total, magic, body_crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts) = HEAD.unpack_from(buf, pos)
    b = lay.born_len
    born_raw = bytes(mv[pos + 48:pos + 48 + b])
    store_ts = I64.unpack_from(buf, pos + 48 + b)[0]
    store_raw = bytes(mv[pos + 56 + b:pos + 56 + b + lay.store_len])
    q = pos + 56 + b + lay.store_len
    reconsume, prepared = struct.unpack_from(">iq", buf, q)
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
        tags_code=tags_code_of(topic, props, store_ts, delay_levels_ms),
    )


_TOPICS: dict = {}


def decode_v1_ipv4(buf, pos, limit, check_crc, check_torn, delay_levels_ms, base_offset, path):  # noqa: PLR0913
    """Fast path of :func:`decode_message` for a V1 record with IPv4 hosts (one unpack of the
    fixed part); None when the record has another shape, so the general path decides."""
    (total, magic, body_crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts, born_a, born_p, store_ts,
     store_a, store_p, reconsume, prepared, body_len) = FIXED_V4.unpack_from(buf, pos)
    if magic != MAGIC_V1 or sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) or body_len < 0:
        return None
    end = pos + total
    tp = pos + 88 + body_len
    if total < 91 or end > limit or tp + 3 > end:
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
    body = bytes(buf[pos + 88:tp])
    if check_crc and body_len and (crc32_raw(body) & 0x7FFFFFFF) != body_crc:
        raise CorruptRecordError(f"invalid commitlog record: body CRC {body_crc} != computed "
                                 f"{crc32_raw(body) & 0x7FFFFFFF}", path=path, offset=base_offset + pos)
    raw_props = bytes(buf[pp + 2:end])
    if check_torn and ((props_len and raw_props[-1] == 0) or (not props_len and topic_len and buf[pp - 1] == 0)):
        raise CorruptRecordError("incomplete commitlog record (its end is zero-filled: a torn write)",
                                 path=path, offset=base_offset + pos)
    tb = bytes(buf[tp + 1:pp])
    topic = _TOPICS.get(tb)
    if topic is None:
        topic = tb.decode("utf-8", "replace")
        if len(_TOPICS) < 65536:
            _TOPICS[tb] = topic
    # properties, hosts and msgId are decoded when first read (the record is checked whole here)
    tags_code = tags_code_of(topic, P.parse_properties(raw_props), store_ts, delay_levels_ms) \
        if topic == SCHEDULE_TOPIC and props_len else None
    return lazy_v1_record(phy, total, topic, queue_id, queue_offset, flag, sys_flag, body_crc, born_ts, store_ts,
                          reconsume, prepared, body, magic, tags_code, (raw_props, born_a, born_p, store_a, store_p))
