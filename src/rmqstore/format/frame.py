"""Framing of one CommitLog record (FORMAT.md §2): where its variable parts are, whether it is a
record, a blank or the end of data, and its CRCs. Positions come from :mod:`.record_layout`."""
from __future__ import annotations

import struct
from typing import NamedTuple

from . import properties as P
from .hashes import crc32
from .record_layout import (BLANK_MAGIC, BODY_BASE, BODY_CRC_POS, BODY_LEN_BASE, HEAD_SIZE, I16, I32, MAGIC_V1,
                            MAGIC_V2, MIN_RECORD_SIZE, STORE_TIMESTAMP_BASE, SYSFLAG_BORNHOST_V6, SYSFLAG_POS,
                            SYSFLAG_STOREHOST_V6, TOPIC_LEN_V1, TOPIC_LEN_V2, TOTAL_MAGIC, host_len)

_I8 = struct.Struct(">b")


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
        return STORE_TIMESTAMP_BASE + self.born_len


def read_layout(buf, pos: int, limit: int) -> RecordLayout:
    """Parse the framing of the record at ``pos`` (``limit`` = end of readable bytes).

    Raises ``ValueError`` (caller wraps with path/offset) on a short buffer, bad magic, negative
    or inconsistent lengths.
    """
    if limit - pos < HEAD_SIZE:
        raise ValueError(f"only {limit - pos} bytes readable, a record header needs {HEAD_SIZE}")
    total, magic = TOTAL_MAGIC.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise ValueError(f"bad magic code 0x{magic & 0xFFFFFFFF:08X} (expected 0xDAA320A7 or 0xDAA320AB)")
    if total < MIN_RECORD_SIZE or pos + total > limit:
        raise ValueError(f"TOTALSIZE {total} does not fit ({limit - pos} bytes readable)")
    sys_flag = I32.unpack_from(buf, pos + SYSFLAG_POS)[0]
    b = host_len(sys_flag, SYSFLAG_BORNHOST_V6)
    s = host_len(sys_flag, SYSFLAG_STOREHOST_V6)
    body_len = I32.unpack_from(buf, pos + BODY_LEN_BASE + b + s)[0]
    body_pos = BODY_BASE + b + s
    p = body_pos + max(body_len, 0)
    if pos + p + 1 > pos + total:
        raise ValueError(f"BODYLENGTH {body_len} runs past TOTALSIZE {total}")
    if magic == MAGIC_V2:
        topic_len = I16.unpack_from(buf, pos + p)[0]
        p += TOPIC_LEN_V2
    else:
        topic_len = _I8.unpack_from(buf, pos + p)[0]
        p += TOPIC_LEN_V1
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
    total, magic = TOTAL_MAGIC.unpack_from(buf, pos)
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
        stored = I32.unpack_from(buf, pos + BODY_CRC_POS)[0]
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
