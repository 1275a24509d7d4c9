"""Encoding a batch of CommitLog records at once (numpy headers), the form of ``put_messages``.

Records of one batch share topic, queue and IPv4 hosts. Every header field but those the append
lock owns is filled column-wise here; :meth:`BatchV4.render` stamps those
(:func:`~.record_layout.stamp_batch`) and joins headers, bodies and properties. Positions and
field names come from :mod:`.record_layout` (``FIXED_V4_DTYPE``).
"""
from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from itertools import chain

import numpy as np

from . import properties as P
from .hashes import crc32_raw
from .record_layout import FIXED_V4_DTYPE, I16, I32, MAGIC_V1, MAGIC_V2, PROPS_LEN, TOPIC_LEN_V1, V4, stamp_batch


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

    @functools.cached_property
    def size(self) -> int:
        return int(np.add.reduce(self.totals))

    @functools.cached_property
    def largest(self) -> int:
        """The largest record's size (0 for no record)."""
        return int(np.maximum.reduce(self.totals)) if self.totals.size else 0

    def render(self, queue_offset0: int | np.ndarray, phy0: int, store_timestamp: int,
               born_unset: np.ndarray | bool | None = None) -> bytes:
        """The records back to back, stamped as :func:`~.record_layout.stamp_batch` says
        (QUEUEOFFSETs from ``queue_offset0`` or those given, PHYSICALOFFSETs from ``phy0``, one
        STORETIMESTAMP)."""
        hdr = self.hdr
        n = hdr.size
        if len(self.tails) != n:
            raise ValueError(f"properties of {self.props_max} bytes cannot be encoded "
                             f"(at most {P.MAX_PROPERTIES_SIZE})")
        stamp_batch(hdr, self.starts, queue_offset0, phy0, store_timestamp, born_unset)
        # interleave header, body, topic + properties length, properties with C-level iterators
        pieces = zip(_headers_of(n).unpack(hdr.tobytes()), self.bodies, self.tails, self.props)
        return b"".join(chain.from_iterable(pieces))


@functools.lru_cache(maxsize=64)
def _headers_of(n: int) -> struct.Struct:
    """``n`` header strings: one ``unpack`` splits a batch's headers (a third of the time of
    ``iter_unpack``, which makes a tuple per header)."""
    return struct.Struct(f"{V4.size}s" * n)


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
def topic_tails(topic_tail: bytes) -> _Tails:
    """The (cached) ``tails[n]`` pieces of one topic field."""
    return _Tails(topic_tail)


@functools.lru_cache(maxsize=256)
def _batch_row(topic_tail: bytes, queue_id: int, born_host: bytes, store_host: bytes) -> np.ndarray:
    """The header fields every record of a batch shares (copied ``n`` times, never written)."""
    tl = len(topic_tail)
    row = np.zeros(1, dtype=FIXED_V4_DTYPE)
    v1 = tl and topic_tail[0] <= 127 and tl - TOPIC_LEN_V1 == topic_tail[0]
    row["magic"] = MAGIC_V1 if v1 else MAGIC_V2
    row["queue_id"] = queue_id
    row["born_addr"] = born_host[:V4.born_addr]
    row["born_port"] = I32.unpack_from(born_host, V4.born_addr)[0]
    row["store_addr"] = store_host[:V4.store_addr]
    row["store_port"] = I32.unpack_from(store_host, V4.store_addr)[0]
    row.flags.writeable = False
    return row


#: batches of up to this many records start from cached header bytes (:func:`_batch_rows`)
ROWS_KEPT = 256


@functools.lru_cache(maxsize=256)
def _batch_rows(topic_tail: bytes, queue_id: int, born_host: bytes, store_host: bytes, n: int) -> bytes:
    """The bytes of ``n`` copies of :func:`_batch_row`: a batch's headers start as a copy of these
    (one ``memcpy``, where ``np.repeat`` or ``copy`` of a structured array take several microseconds)."""
    return np.repeat(_batch_row(topic_tail, queue_id, born_host, store_host), n).tobytes()


@dataclass(slots=True)
class BatchFields:
    """The fields of a batch's records. ``topic_tail`` is the V1/V2 topic-length field plus the
    topic bytes; hosts are raw IPv4 (address + i32 port); a column given as an int is that value in
    every record, as None all zero (``queue_id``: an int, or a column when the records of several
    producers' batches for one topic are encoded together)."""

    topic_tail: bytes
    bodies: list
    props: list
    queue_id: object
    flags: object
    sys_flags: object
    born_timestamps: object
    born_host: bytes
    store_host: bytes
    reconsume_times: object
    prepared_offsets: object


_COLUMNS = (("flag", "flags"), ("sys_flag", "sys_flags"), ("born_timestamp", "born_timestamps"),
            ("reconsume_times", "reconsume_times"), ("prepared_transaction_offset", "prepared_offsets"))


def encode_batch(f: BatchFields) -> BatchV4:
    """Batch form of :func:`~.encode.encode_record`. Every field but the three the append lock
    owns is filled here with column-wise numpy assignments; :meth:`BatchV4.render` completes them.
    Properties of more than ``MAX_PROPERTIES_SIZE`` bytes cannot be encoded (``props_max`` tells the
    caller, which must not render such a batch)."""
    bodies, props = f.bodies, f.props
    n = len(bodies)
    blen = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
    plens = list(map(len, props))
    props_max = max(plens, default=0)
    totals = blen + np.array(plens, dtype=np.int64)
    totals += V4.size + len(f.topic_tail) + PROPS_LEN
    starts = totals.cumsum()  # (the methods and ufunc reductions, not numpy's Python-level wrappers)
    starts -= totals
    qid = f.queue_id if type(f.queue_id) is int else 0
    if n <= ROWS_KEPT:
        hdr = np.frombuffer(bytearray(_batch_rows(f.topic_tail, qid, f.born_host, f.store_host, n)),
                            dtype=FIXED_V4_DTYPE)
    else:
        hdr = np.repeat(_batch_row(f.topic_tail, qid, f.born_host, f.store_host), n)
    if type(f.queue_id) is not int:
        hdr["queue_id"] = f.queue_id
    hdr["total"] = totals
    hdr["body_crc"] = np.fromiter(map(crc32_raw, bodies), dtype=np.int64, count=n) & 0x7FFFFFFF
    hdr["body_len"] = blen
    for name, attr in _COLUMNS:
        values = getattr(f, attr)
        if values is None or (isinstance(values, int) and not values):
            continue  # all zero, as copied from the row
        if isinstance(values, int) or (values.any() if isinstance(values, np.ndarray) else any(values)):
            hdr[name] = values
    pieces = list(map(topic_tails(f.topic_tail).__getitem__, plens)) if props_max <= P.MAX_PROPERTIES_SIZE else []
    return BatchV4(hdr, bodies, props, pieces, starts, totals, props_max)


def encode_batch_v4(topic_tail: bytes, bodies: list[bytes], props: list[bytes], /, **shared) -> BatchV4:
    """:func:`encode_batch` with the fields by name (``queue_id``, ``flags``, ``sys_flags``,
    ``born_timestamps``, ``born_host``, ``store_host``, ``reconsume_times``, ``prepared_offsets``)."""
    return encode_batch(BatchFields(topic_tail, bodies, props, **shared))
