"""A batch appended as its producer sent it (a broker's ``SEND_BATCH_MESSAGE``): one pass from the
messages' columns to the records, without a ``Message`` per message.

What the messages share (topic, queue, hosts, sysFlag, born time, reconsume times) comes in one
template ``Message``; per message only its flag, body and encoded properties. When the properties
are what the one-by-one path would write anyway (:func:`canonical_properties`: parsing them as
upstream and encoding them again gives the same bytes) and nothing needs the general checks (a DELAY
or INNER_NUM property, a transactional or IPv6 template), the bytes are copied through into a batch
encoded column-wise (:func:`~rmqstore.format.encode_batch.encode_batch`) and appended as
``put_messages`` appends a batch; otherwise the messages are built and ``put_messages`` decides, so
the records and the answers are the same either way.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from ..format import message as M
from ..format import javalang as J
from ..format import properties as P
from ..format.encode_batch import BatchFields, encode_batch
from ..types import Message, PutMessageResult
from .batch_facts import SEP, per_record
from .put_encode import (SLOW_SYSFLAGS, batch_properties, born_columns, illegal, message_columns,
                         shared_columns)

#: every byte but the two separators (deleted to see the separators' pattern)
_NOT_SEPARATORS = bytes(b for b in range(256) if b not in (1, 2))
_NAMES = re.compile(rb"\x01[^\x02]*")


#: one entry of canonical properties: an ASCII name and value, neither empty nor holding 0x01 or 0x02
_ENTRY = re.compile(rb"([\x00\x03-\x7f]+)\x01[\x00\x03-\x7f]+\x02")


#: the properties dispatch reads of a copied-through batch (``batch_facts``), captured by :func:`batch_shape`
CAPTURED = (b"TAGS", b"UNIQ_KEY", b"KEYS")


@functools.lru_cache(maxsize=256)
def _shape(names: tuple[bytes, ...]) -> tuple[re.Pattern, tuple[bytes, ...]]:
    """A message (after a ``SEP``, before the next) whose properties are canonical entries named
    ``names`` in that order, the values of the ``CAPTURED`` names as groups (and an empty group: a
    match is always a tuple); and those names in group order."""
    value = rb"[\x00\x03-\x7f]+"
    one = b"".join(re.escape(n) + b"\x01" + (b"(" + value + b")" if n in CAPTURED else value) + b"\x02" for n in names)
    return re.compile(re.escape(SEP) + one + b"()(?=\xff)"), tuple(n for n in names if n in CAPTURED)


def batch_shape(props: list[bytes], joined: bytes) -> tuple[tuple[bytes, ...], list[tuple]] | None:
    """When every message of ``props`` (``joined`` by ``SEP``) has canonical properties with the names
    of the first, in its order, each once (the usual batch: one regex pass for all): the
    ``CAPTURED`` names they have and, per message, those values (a tuple, in that order, then b""; no
    tuples when they have none of those names); else None."""
    names = tuple(_ENTRY.findall(props[0]))
    if len(set(names)) != len(names) or joined.count(SEP) != len(props) - 1:  # (no SEP inside a message)
        return None
    rx, captured = _shape(names)
    rows = rx.findall(SEP + joined + SEP)  # each match starts at a SEP and ends before the next: all or none
    if len(rows) != len(props):
        return None
    return captured, rows if captured else []  # (with no group but the empty one, findall gives strings)


def canonical_properties(props: list[bytes]) -> bool:
    """Whether each of ``props`` is what parsing it as upstream (``string2messageProperties``) and
    encoding the result again writes: ASCII ``name\\x01value\\x02`` entries with non-empty names and
    values, one 0x01 each, and no name twice in a message. (Checked over the whole batch at once
    where it can be; :func:`_put_fast` asks :func:`batch_shape` first, which says yes to the usual batch.)"""
    joined = b"".join(props)
    if not joined.isascii() or b"\x02\x01" in joined or b"\x01\x02" in joined or joined[:1] == b"\x01":
        return False
    seps = joined.translate(None, _NOT_SEPARATORS)
    if seps != b"\x01\x02" * (len(seps) // 2) or len(seps) % 2:
        return False
    if not all(p[-1:] == b"\x02" for p in props if p):
        return False
    if b"\x00" in joined:  # (names per message, one regex pass each)
        per_message = set(_NAMES.sub(b"", p) for p in props)
    else:  # one regex pass over the batch, cut at the joins (a batch's messages usually share their names)
        per_message = set(_NAMES.sub(b"", b"\x00".join(props)).split(b"\x00"))
    for names in per_message:
        split = names.split(b"\x02")
        if len(set(split)) != len(split):
            return False
    return True


@dataclasses.dataclass(slots=True)
class RawBatch:
    """A batch for one topic and queue as its producer sent it: the shared fields in ``template``
    (its body and properties unused), and per message its flag, body and encoded properties."""

    template: Message
    flags: list[int]
    bodies: list[bytes]
    props: list[bytes]

    def __len__(self) -> int:
        return len(self.bodies)

    def messages(self) -> list[Message]:
        """The batch as ``Message`` objects (properties parsed as upstream)."""
        t = self.template
        return [dataclasses.replace(t, flag=f, body=b, properties=P.parse_properties(p))
                for f, b, p in zip(self.flags, self.bodies, self.props)]


class BatchPart(NamedTuple):
    """One producer's batch inside an encoded batch (``CommitLog.append_batch``): its template (topic,
    queue, sysFlag, fixed store time), its first record's index and its record count, its first
    message's encoded properties (WAIT) and what it leaves the dispatcher (a ``BatchFact``'s props
    and values; None: nothing)."""

    template: Message
    at: int
    count: int
    props0: bytes
    facts: tuple | None = None

    def columns(self, batch) -> tuple[np.ndarray, np.ndarray]:
        """Its records' starts (from its first record) and sizes in the encoded ``batch``."""
        if self.count == batch.totals.size:
            return batch.starts, batch.totals
        starts = batch.starts[self.at:self.at + self.count]
        return starts - starts[0], batch.totals[self.at:self.at + self.count]


class _Ready(NamedTuple):
    """A batch that passed the copied-through path's checks, with what its encoding needs."""

    batch: RawBatch
    shape: object  # the plan's V4Shape: topic and hosts
    joined: bytes  # its properties joined by SEP
    values: tuple | None  # what batch_shape captured
    flags: object  # the flag column: one int for all, or an array


def put_raw_batch(cl, batch: RawBatch) -> PutMessageResult:
    """Append ``batch``; the result is ``put_messages``'s for the same messages."""
    return put_raw_batches(cl, [batch])[0]


def put_raw_batches(cl, batches: list[RawBatch]) -> list[PutMessageResult]:
    """Append ``batches`` in order, one result each, as ``put_raw_batch`` would one by one. Consecutive
    batches that the copied-through path takes, for one topic and pair of hosts, are encoded as one
    batch and appended under one hold of the lock (one render, one write, one wake-up and flush
    wait; the same records, offsets and answers as one by one)."""
    out: list[PutMessageResult] = []
    run: list[_Ready] = []
    for b in batches:
        r = _ready(cl, b)
        if type(r) is not _Ready:  # (a refusal, or the path through Message objects: in its turn)
            out += _put_run(cl, run) + [r if r is not None else cl.put_messages(b.messages())]
            run = []
        elif run and not (r.shape is run[0].shape  # (the plan's cached shape: the same topic and hosts)
                          and b.template.store_timestamp == run[0].batch.template.store_timestamp):
            out += _put_run(cl, run)
            run = [r]
        else:
            run.append(r)
    return out + _put_run(cl, run)


def _ready(cl, batch: RawBatch):
    """The copied-through path's checks of ``batch``: a :class:`_Ready`, a refusal, or None for the path
    through ``Message`` objects (which names a field out of range: as a column it would wrap)."""
    t, props, flags = batch.template, batch.props, batch.flags
    if (not all(map(_fits_i32, (t.queue_id, t.sys_flag, t.reconsume_times))) or t.queue_id < 0
            or t.sys_flag & SLOW_SYSFLAGS or not batch.bodies):
        return None
    plan = cl.fast_plan(t)
    if plan is None:
        return None
    joined = SEP.join(props)  # (canonical properties are ASCII: the separator is in none of them)
    if b"DELAY\x01" in joined or b"INNER_NUM\x01" in joined:
        return None
    values = batch_shape(props, joined)
    if values is None and not canonical_properties(props):
        return None
    if sum(map(len, batch.bodies)) > cl.max_body:
        return illegal("message body size exceeded")
    # every flag in int range, one flag for all too (merged with other batches it becomes a column, which
    # would wrap); a batch of one flag (the usual) checks it once
    uniform = flags.count(flags[0]) == len(flags)
    if not (_fits_i32(flags[0]) if uniform else all(map(_fits_i32, flags))):
        return None
    return _Ready(batch, plan[0], joined, values, flags[0] if uniform else np.asarray(flags, dtype=np.int64))


def _fits_i32(v) -> bool:
    return type(v) is int and J.INT_MIN <= v <= J.INT_MAX


def _put_run(cl, run: list[_Ready]) -> list[PutMessageResult]:
    """``run`` encoded as one batch and appended; each batch alone where that cannot be (a field out
    of range, or together they would not go where one-by-one puts put them), through ``Message``
    objects where its own encoding cannot be (``put_messages`` says what is wrong)."""
    if len(run) > 1:
        got = _encode_and_append(cl, run)
        if got is not None:
            return got
    return [x for r in run for x in _encode_and_append(cl, [r]) or [cl.put_messages(r.batch.messages())]]


def _encode_and_append(cl, run: list[_Ready]) -> list[PutMessageResult] | None:
    """One result per batch of ``run``, or None (see :func:`_put_run`)."""
    counts = [len(r.batch) for r in run]
    ts = [r.batch.template for r in run]
    shape, one = run[0].shape, len(run) == 1
    born, born_unset = _born(ts, counts)
    try:
        batch = encode_batch(BatchFields(
            shape.topic_tail, run[0].batch.bodies if one else [b for r in run for b in r.batch.bodies],
            run[0].batch.props if one else [p for r in run for p in r.batch.props],
            queue_id=_per_batch([t.queue_id for t in ts], counts), flags=_flags(run, counts),
            sys_flags=_per_batch([t.sys_flag for t in ts], counts), born_timestamps=born, born_host=shape.born_host,
            store_host=shape.store_host, reconsume_times=_per_batch([t.reconsume_times for t in ts], counts),
            prepared_offsets=_per_batch([t.prepared_transaction_offset for t in ts], counts)))
    except (OverflowError, ValueError, TypeError):
        return None  # (a field out of range: put_messages says which)
    parts = [BatchPart(t, a, n, r.batch.props[0], (r.joined, r.values))
             for t, r, a, n in zip(ts, run, accumulate(counts, initial=0), counts)]
    return _append_checked(cl, batch, parts, born_unset, shape.store_host)


def _append_checked(cl, batch, parts: list[BatchPart], born_unset, store_host: bytes) -> list[PutMessageResult] | None:
    """``CommitLog.append_batch`` after the checks the encoding leaves: None for the general path (a
    record's properties or size over the limits, or several parts that fit no segment together); a
    refusal when one part alone fits no segment."""
    if batch.props_max > P.MAX_PROPERTIES_SIZE or batch.largest > cl.max_record:
        return None
    if batch.size + M.END_FILE_MIN_BLANK_LENGTH > cl.cfg.mapped_file_size_commit_log:
        return [illegal(f"batch of {batch.size} bytes cannot fit one commitlog segment")] if len(parts) == 1 else None
    return cl.append_batch(batch, parts, born_unset, store_host)


def _per_batch(values: list, counts: list[int]):
    """A column of each batch's value for its records: the value itself when every batch has it."""
    return values[0] if values.count(values[0]) == len(values) else per_record(values, counts)


def _flags(run: list[_Ready], counts: list[int]):
    flags = [r.flags for r in run]
    if all(type(f) is int for f in flags):
        return _per_batch(flags, counts)
    return np.concatenate([np.full(n, f, dtype=np.int64) if type(f) is int else f for f, n in zip(flags, counts)])


def _born(templates: list[Message], counts: list[int]) -> tuple:
    """``(born timestamps, born_unset)`` of the records (see ``put_encode.born_columns``): a template
    without a born time gives its records the store time."""
    born = [t.born_timestamp for t in templates]
    if born.count(born[0]) == len(born):
        return (None, True) if born[0] is None else (born[0], None)
    return born_columns([b for b, n in zip(born, counts) for _ in range(n)])  # (rare: one record each)


def put_messages_fast(cl, msgs: list[Message]) -> PutMessageResult | None:
    """Vectorised ``put_messages`` for the common batch: one topic, queue and pair of IPv4 hosts,
    ``bytes`` bodies, ``dict`` properties without DELAY, no properties CRC, nothing transactional.
    Every column is pulled out and checked with C-level iteration (``zip``, ``map``, ``set``),
    headers are filled column-wise in numpy; None sends the batch to the general path (same bytes,
    more checks, per-message messages for what is wrong)."""
    first = msgs[0]
    plan = cl.fast_plan(first)
    if plan is None or type(first.queue_id) is not int or first.queue_id < 0:
        return None
    shared = shared_columns(msgs)
    if shared is None:
        return None
    bodies, props, born = message_columns(msgs)
    if set(map(type, bodies)) != {bytes} or set(map(type, props)) != {dict}:
        return None
    pbytes = batch_properties(props)
    if pbytes is None:
        return None
    if sum(map(len, bodies)) > cl.max_body:
        return illegal("message body size exceeded")
    shape = plan[0]
    born_ts, born_unset = born_columns(born)
    flags, sys_flags, reconsume, prepared = shared
    batch = encode_batch(BatchFields(
        shape.topic_tail, bodies, pbytes, queue_id=first.queue_id, flags=flags, sys_flags=sys_flags,
        born_timestamps=born_ts, born_host=shape.born_host, store_host=shape.store_host,
        reconsume_times=reconsume, prepared_offsets=prepared))
    got = _append_checked(cl, batch, [BatchPart(first, 0, len(msgs), pbytes[0])], born_unset, shape.store_host)
    return None if got is None else got[0]
