"""Encoding one CommitLog record (FORMAT.md §2), every position from :mod:`.record_layout`.

:func:`encode_record` encodes any record from a :class:`RecordFields` (its stamped fields are
written later by :func:`~.record_layout.stamp_record`). :class:`V4Shape` is the put path's form of
the usual record (IPv4 hosts): :meth:`V4Shape.prepare` outside the append lock, then
:meth:`V4Shape.write_stamped` under it packs the header once with the stamp and writes the record.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import properties as P
from .hashes import crc32, crc32_raw
from .record_layout import (BLANK, BLANK_MAGIC, I16, I32, I64, MAGIC_V1, MAGIC_V2, PHY_OFFSET_POS, PORT_SIZE, PROPS_LEN,
                            PUBLISH_SIZE, QUEUE_OFFSET_POS, V4, layout_for_hosts, record_length)


@dataclass(slots=True)
class RecordFields:
    """Every field of one record as the encoder takes it. ``born_host``/``store_host`` are raw
    (address + i32 port); ``sys_flag`` must already carry the V6 bits matching them."""

    topic: bytes
    body: bytes
    props: bytes
    queue_id: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    v2: bool
    queue_offset: int = 0
    phy_offset: int = 0


def topic_field(topic: bytes, v2: bool) -> bytes:
    """The TOPICLENGTH field (i8 for V1, i16 for V2) and the topic."""
    return (I16.pack(len(topic)) if v2 else bytes((len(topic),))) + topic


def encode_record(fields: RecordFields | None = None, /, **by_name) -> bytearray:
    """Encode one record from ``fields`` (or the same fields given by name). The offsets and
    times the append lock owns may be stamped later (:func:`~.record_layout.stamp_record`)."""
    f = fields if fields is not None else RecordFields(**by_name)
    body, topic, props = f.body, f.topic, f.props
    total = record_length(len(body), len(topic), len(props), f.sys_flag, f.v2)
    lay = layout_for_hosts(len(f.born_host), len(f.store_host))
    born, store = f.born_host, f.store_host
    out = bytearray(lay.struct.pack(
        total, MAGIC_V2 if f.v2 else MAGIC_V1, crc32(body) if body else 0, f.queue_id, f.flag, f.queue_offset,
        f.phy_offset, f.sys_flag, f.born_timestamp, born[:-PORT_SIZE], I32.unpack_from(born, len(born) - PORT_SIZE)[0],
        f.store_timestamp, store[:-PORT_SIZE], I32.unpack_from(store, len(store) - PORT_SIZE)[0], f.reconsume_times,
        f.prepared_transaction_offset, len(body)))
    out += body
    out += topic_field(topic, f.v2)
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
    start = pos + total - P.CRC32_RESERVED_LEN + len(P.CRC32_KEY) + 1
    digits = P.crc_digits(crc)
    buf[start:start + len(digits)] = digits
    return crc


def encode_blank(remaining: int) -> bytes:
    return BLANK.pack(remaining, BLANK_MAGIC)


_PACK_V4 = V4.struct.pack
_HEAD_SIZE = V4.size
_I16_PACK = I16.pack


class V4Shape:
    """What records of one topic and pair of IPv4 hosts share (a put path keeps one per topic
    and hosts): the topic field, the hosts, the fixed overhead. ``born_host``/``store_host`` are
    raw (4-byte address + i32 port)."""

    __slots__ = ("topic_tail", "magic", "born_host", "store_host", "overhead", "_born", "_store")

    def __init__(self, topic: bytes, v2: bool, born_host: bytes, store_host: bytes):
        if len(born_host) != V4.born_addr + PORT_SIZE or len(store_host) != V4.store_addr + PORT_SIZE:
            raise ValueError("V4Shape is for IPv4 hosts")
        self.topic_tail = topic_field(topic, v2)
        self.magic = MAGIC_V2 if v2 else MAGIC_V1
        self.born_host, self.store_host = bytes(born_host), bytes(store_host)
        self.overhead = _HEAD_SIZE + len(self.topic_tail) + PROPS_LEN  # TOTALSIZE less body and properties
        self._born = (born_host[:V4.born_addr], I32.unpack_from(born_host, V4.born_addr)[0])
        self._store = (store_host[:V4.store_addr], I32.unpack_from(store_host, V4.store_addr)[0])

    def prepare(self, msg, body: bytes, props: bytes) -> tuple[int, int, int, bytes]:
        """Outside the append lock, what :meth:`write_stamped` needs besides ``msg`` and the stamp:
        ``(TOTALSIZE, BODYCRC, BODYLENGTH, the bytes after the fixed part)``. ``msg`` has the
        attributes of a ``Message``: queue_id, flag, sys_flag (without host bits), born_timestamp,
        reconsume_times, prepared_transaction_offset."""
        blen, plen = len(body), len(props)
        return (self.overhead + blen + plen, crc32_raw(body) & 0x7FFFFFFF, blen,
                b"".join((body, self.topic_tail, _I16_PACK(plen), props)))

    def write_stamped(self, dst, pos: int, msg, prepared: tuple, stamp: tuple[int, int, int]) -> None:
        """Under the append lock: ``msg``'s record (``prepared`` by :meth:`prepare`) written into
        ``dst`` at ``pos`` with ``stamp`` = (QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP; also the
        BORNTIMESTAMP when ``msg.born_timestamp`` is None), TOTALSIZE and MAGICCODE last: a crash or a
        reader sees the whole record or none. The bytes of :func:`encode_record` then
        :func:`~.record_layout.stamp_record`, the header packed once with its stamp (one ``struct``
        call: the put path's hot spot)."""
        total, crc, blen, tail = prepared
        qoff, phy, store_ts = stamp
        born_ts = msg.born_timestamp
        ba, bp = self._born
        sa, sp = self._store
        head = _PACK_V4(total, self.magic, crc, msg.queue_id, msg.flag, qoff, phy, msg.sys_flag,
                        store_ts if born_ts is None else born_ts, ba, bp, store_ts, sa, sp, msg.reconsume_times,
                        msg.prepared_transaction_offset, blen)
        dst[pos + _HEAD_SIZE:pos + total] = tail
        dst[pos + PUBLISH_SIZE:pos + _HEAD_SIZE] = head[PUBLISH_SIZE:]
        dst[pos:pos + PUBLISH_SIZE] = head[:PUBLISH_SIZE]
