"""The CommitLog record's fixed part as one annotated field list (FORMAT.md §2.1), and the stamps
the append path writes into encoded records.

``FIELDS`` names every fixed field with its ``struct`` format, in order; everything else here is
derived from it: the offset of a field is ``struct.calcsize`` of the fields before it, the
``struct.Struct`` and numpy dtype of the fixed part follow the same list. A host is an address and
an i32 port: 4-byte addresses (IPv4) unless SYSFLAG bit ``BORNHOST_V6``/``STOREHOST_V6`` widens
that host to 16 bytes (IPv6), so there are four layouts, one per pair of host widths.

``B``/``S`` = 8 or 20 (born/store host), ``T`` = topic-length width 1 (V1 magic) or 2 (V2)::

    off        size  field
    0          4     TOTALSIZE                 whole record, this field included
    4          4     MAGICCODE                 V1 0xDAA320A7, V2 0xDAA320AB, BLANK 0xCBD43194
    8          4     BODYCRC                   crc32(body) & 0x7FFFFFFF
    12         4     QUEUEID
    16         4     FLAG
    20         8     QUEUEOFFSET               stamped under the append lock
    28         8     PHYSICALOFFSET            stamped under the append lock
    36         4     SYSFLAG
    40         8     BORNTIMESTAMP             stamped (the store time) when the producer gave none
    48         B     BORNHOST                  addr(4|16) + port i32
    48+B       8     STORETIMESTAMP            stamped under the append lock
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
"""
from __future__ import annotations

import struct

import numpy as np

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
SYSFLAG_HOSTS_V6 = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6

MAX_TOPIC_BYTES = 255
IPV4_ADDR, IPV6_ADDR = 4, 16
PORT_SIZE = 4

#: The fixed part of a record, in order: field name -> struct format (big-endian). ``{born}`` and
#: ``{store}`` are the address widths of the two hosts (4 or 16 bytes).
FIELDS: tuple[tuple[str, str], ...] = (
    ("total", "i"), ("magic", "i"), ("body_crc", "i"), ("queue_id", "i"), ("flag", "i"),
    ("queue_offset", "q"), ("phy_offset", "q"), ("sys_flag", "i"), ("born_timestamp", "q"),
    ("born_addr", "{born}s"), ("born_port", "i"), ("store_timestamp", "q"),
    ("store_addr", "{store}s"), ("store_port", "i"),
    ("reconsume_times", "i"), ("prepared_transaction_offset", "q"), ("body_len", "i"),
)
#: the fields the append lock decides (:func:`stamp_record`); the born time only when unset
STAMPED = ("queue_offset", "phy_offset", "store_timestamp", "born_timestamp")
_NUMPY = {"i": ">i4", "q": ">i8"}


class FieldLayout:
    """The fixed part of a record for one pair of host address widths: ``offset[name]``,
    ``size`` (where BODY starts), ``struct`` (packs/unpacks every fixed field) and ``dtype`` (the
    same as a numpy structured type)."""

    __slots__ = ("born_addr", "store_addr", "formats", "offset", "size", "struct", "dtype")

    def __init__(self, born_addr: int, store_addr: int):
        self.born_addr, self.store_addr = born_addr, store_addr
        self.formats = {name: f.format(born=born_addr, store=store_addr) for name, f in FIELDS}
        self.offset: dict[str, int] = {}
        fmt = ">"
        for name, f in self.formats.items():
            self.offset[name] = struct.calcsize(fmt)
            fmt += f
        self.size = struct.calcsize(fmt)
        self.struct = struct.Struct(fmt)
        self.dtype = np.dtype([(n, _NUMPY.get(f, "S" + f[:-1])) for n, f in self.formats.items()])
        assert self.dtype.itemsize == self.size

    def head_struct(self, last: str) -> struct.Struct:
        """A ``struct.Struct`` of the fields from TOTALSIZE to ``last`` included."""
        names = list(self.formats)
        return struct.Struct(">" + "".join(self.formats[n] for n in names[:names.index(last) + 1]))


#: indexed by ``(sys_flag & SYSFLAG_HOSTS_V6) >> 4``: born IPv6 is bit 0, store IPv6 bit 1
LAYOUTS = tuple(FieldLayout(IPV6_ADDR if i & 1 else IPV4_ADDR, IPV6_ADDR if i & 2 else IPV4_ADDR)
                for i in range(4))
V4 = LAYOUTS[0]


def layout_of(sys_flag: int) -> FieldLayout:
    """The layout of a record with this SYSFLAG (its host bits)."""
    return LAYOUTS[(sys_flag & SYSFLAG_HOSTS_V6) >> 4]


def layout_for_hosts(born_host_len: int, store_host_len: int) -> FieldLayout:
    """The layout whose raw hosts (address + port) are these lengths (8 or 20; ValueError else)."""
    try:
        return LAYOUTS[_V6_BIT[born_host_len] | _V6_BIT[store_host_len] << 1]
    except KeyError:
        raise ValueError(f"raw hosts of {born_host_len} and {store_host_len} bytes (8 or 20 each)") from None


_V6_BIT = {IPV4_ADDR + PORT_SIZE: 0, IPV6_ADDR + PORT_SIZE: 1}


def host_sys_flag(sys_flag: int, born_host_len: int, store_host_len: int) -> int:
    """``sys_flag`` with its two host bits set as the raw hosts' lengths say."""
    bits = (SYSFLAG_BORNHOST_V6 if born_host_len == IPV6_ADDR + PORT_SIZE else 0) \
        | (SYSFLAG_STOREHOST_V6 if store_host_len == IPV6_ADDR + PORT_SIZE else 0)
    return sys_flag & ~SYSFLAG_HOSTS_V6 | bits


FIXED_V4 = V4.struct  #: every fixed field of a record with IPv4 hosts, up to BODYLENGTH
FIXED_V4_DTYPE = V4.dtype
HEAD = V4.head_struct("born_timestamp")  #: the fields before the born host (the same in every layout)
HEAD_SIZE = HEAD.size
HEAD_DTYPE = np.dtype(V4.dtype.descr[:list(V4.formats).index("born_timestamp") + 1])
assert HEAD_DTYPE.itemsize == HEAD_SIZE == V4.offset["born_addr"]
QUEUE_OFFSET_POS = V4.offset["queue_offset"]
PHY_OFFSET_POS = V4.offset["phy_offset"]
SYSFLAG_POS = V4.offset["sys_flag"]
BORN_TIMESTAMP_POS = V4.offset["born_timestamp"]
BORN_HOST_POS = V4.offset["born_addr"]
BODY_CRC_POS = V4.offset["body_crc"]
#: TOTALSIZE and MAGICCODE: a reader takes the bytes for a record once these are there
PUBLISH_SIZE = V4.offset["body_crc"]
#: the topic-length field's width by version, and the properties-length field's
TOPIC_LEN_V1, TOPIC_LEN_V2, PROPS_LEN = 1, 2, 2
#: the smallest valid record: 91 bytes of fixed fields (TOTALSIZE's floor in the length formula)
MIN_RECORD_SIZE = V4.size + TOPIC_LEN_V1 + PROPS_LEN


def _base(name: str) -> int:
    """Offset of ``name`` less the widths of the IPv4 hosts before it (``48 + B`` -> 48)."""
    o = V4.offset[name]
    return o - (IPV4_ADDR + PORT_SIZE) * ((o > BORN_HOST_POS) + (o > V4.offset["store_addr"]))


#: ``field offset = BASE + B`` (fields between the hosts) or ``+ B + S`` (after both): FORMAT.md's
#: ``48+B``, ``56+B``, ``56+B+S`` ... (for numpy columns of host widths)
STORE_TIMESTAMP_BASE = _base("store_timestamp")  # + B
STORE_HOST_BASE = STORE_TIMESTAMP_BASE + 8  # + B
RECONSUME_BASE = _base("reconsume_times")  # + B + S
PREPARED_BASE = _base("prepared_transaction_offset")  # + B + S
BODY_LEN_BASE = _base("body_len")  # + B + S
BODY_BASE = BODY_LEN_BASE + 4  # + B + S
assert (STORE_TIMESTAMP_BASE, STORE_HOST_BASE, RECONSUME_BASE, BODY_BASE) == (48, 56, 56, 72)

BLANK = struct.Struct(">ii")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
TOTAL_MAGIC = V4.head_struct("magic")
#: QUEUEOFFSET and PHYSICALOFFSET, adjacent: one ``pack_into`` stamps both
_OFFSETS = struct.Struct(">qq")
assert V4.offset["phy_offset"] == QUEUE_OFFSET_POS + 8


def host_len(sys_flag: int, v6_bit: int) -> int:
    return (IPV6_ADDR if sys_flag & v6_bit else IPV4_ADDR) + PORT_SIZE


def store_timestamp_pos(sys_flag: int) -> int:
    return layout_of(sys_flag).offset["store_timestamp"]


def record_length(body_len: int, topic_len: int, props_len: int, sys_flag: int, v2: bool) -> int:
    """TOTALSIZE of a record with these lengths (FORMAT.md §2.1 length formula)."""
    return (layout_of(sys_flag).size + max(body_len, 0) + (TOPIC_LEN_V2 if v2 else TOPIC_LEN_V1) + topic_len
            + PROPS_LEN + max(props_len, 0))


# ------------------------------------------------------------------------------------------------
# Stamps: what the append lock decides, written into encoded records
# ------------------------------------------------------------------------------------------------

def stamp_record(buf, pos: int, queue_offset: int, phy_offset: int, store_timestamp: int,
                 born_unset: bool = False) -> None:
    """Write the append lock's fields into the encoded record at ``buf[pos]``: QUEUEOFFSET,
    PHYSICALOFFSET, STORETIMESTAMP (where the record's host bits put it) and, when
    ``born_unset``, the store time as BORNTIMESTAMP. Nothing else changes."""
    lay = LAYOUTS[(I32.unpack_from(buf, pos + SYSFLAG_POS)[0] & SYSFLAG_HOSTS_V6) >> 4]
    _OFFSETS.pack_into(buf, pos + QUEUE_OFFSET_POS, queue_offset, phy_offset)
    I64.pack_into(buf, pos + lay.offset["store_timestamp"], store_timestamp)
    if born_unset:
        I64.pack_into(buf, pos + BORN_TIMESTAMP_POS, store_timestamp)


def stamp_batch(hdr: np.ndarray, starts: np.ndarray, queue_offset0: int | np.ndarray, phy0: int,
                store_timestamp: int, born_unset: np.ndarray | bool | None = None) -> None:
    """:func:`stamp_record` for the headers of a batch (a ``FIXED_V4_DTYPE`` array): consecutive
    QUEUEOFFSETs from ``queue_offset0`` (or, an array, those), PHYSICALOFFSETs ``phy0 + starts``, one
    STORETIMESTAMP (also the BORNTIMESTAMP where ``born_unset``, a mask, or of every record when it
    is True)."""
    n = hdr.size
    if isinstance(queue_offset0, np.ndarray):
        hdr["queue_offset"] = queue_offset0
    else:
        hdr["queue_offset"] = np.arange(queue_offset0, queue_offset0 + n, dtype=np.int64)
    hdr["phy_offset"] = starts + np.int64(phy0)
    hdr["store_timestamp"] = np.int64(store_timestamp)
    if born_unset is True:
        hdr["born_timestamp"] = np.int64(store_timestamp)
    elif born_unset is not None and born_unset is not False and born_unset.any():
        hdr["born_timestamp"][born_unset] = np.int64(store_timestamp)


#: bytes from a record's start to the end of its STORETIMESTAMP when the born host is IPv4
STORE_TIMESTAMP_END_V4 = V4.offset["store_timestamp"] + I64.size


def store_timestamp_at(buf, pos: int) -> int:
    """STORETIMESTAMP of the record at ``buf[pos]`` (where its SYSFLAG's host bits put it)."""
    return I64.unpack_from(buf, pos + store_timestamp_pos(I32.unpack_from(buf, pos + SYSFLAG_POS)[0]))[0]
