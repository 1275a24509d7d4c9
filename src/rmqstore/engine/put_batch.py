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

import numpy as np

from ..format import message as M
from ..format import properties as P
from ..format.encode_batch import BatchFields, encode_batch
from ..types import Message, PutMessageResult
from .batch_facts import SEP
from .put_encode import SLOW_SYSFLAGS, illegal

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


def put_raw_batch(cl, batch: RawBatch) -> PutMessageResult:
    """Append ``batch``; the result is ``put_messages``'s for the same messages."""
    fast = _put_fast(cl, batch.template, batch.flags, batch.bodies, batch.props)
    return fast if fast is not None else cl.put_messages(batch.messages())


def _put_fast(cl, template: Message, flags: list[int], bodies: list[bytes], props: list[bytes]):
    """The copied-through append, or None for the path through ``Message`` objects."""
    plan = cl.fast_plan(template)
    if (plan is None or not bodies or template.sys_flag & SLOW_SYSFLAGS or type(template.queue_id) is not int
            or template.queue_id < 0 or not -(1 << 31) <= template.queue_id < 1 << 31):
        return None
    joined = SEP.join(props)  # (canonical properties are ASCII: the separator is in none of them)
    if b"DELAY\x01" in joined or b"INNER_NUM\x01" in joined:
        return None
    values = batch_shape(props, joined)
    if values is None and not canonical_properties(props):
        return None
    if sum(map(len, bodies)) > cl.max_body:
        return illegal("message body size exceeded")
    shape = plan[0]
    born = template.born_timestamp
    flag_col = flags[0] if flags.count(flags[0]) == len(flags) else np.asarray(flags, dtype=np.int64)
    try:
        batch = encode_batch(BatchFields(
            shape.topic_tail, bodies, props, queue_id=template.queue_id, flags=flag_col,
            sys_flags=template.sys_flag, born_timestamps=None if born is None else born,
            born_host=shape.born_host, store_host=shape.store_host, reconsume_times=template.reconsume_times,
            prepared_offsets=template.prepared_transaction_offset))
    except (OverflowError, ValueError, TypeError):
        return None  # (a field out of range: put_messages says which)
    if batch.props_max > P.MAX_PROPERTIES_SIZE or batch.largest > cl.max_record:
        return None
    if batch.size + M.END_FILE_MIN_BLANK_LENGTH > cl.cfg.mapped_file_size_commit_log:
        return illegal(f"batch of {batch.size} bytes cannot fit one commitlog segment")
    return cl.append_batch(template, batch, True if born is None else None, props[0], shape.store_host,
                           (joined, values))
