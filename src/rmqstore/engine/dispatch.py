"""Dispatch (reput): build consume queues and the index from new commitlog records.

Mirrors ``ReputMessageService`` + ``CommitLogDispatcherBuildConsumeQueue`` +
``CommitLogDispatcherBuildIndex``. Records are walked and decoded in batches with the numpy codecs
(:func:`~rmqstore.format.message.decode_batch`); per batch the units of each queue are written with
one copy and the index takes all keys of the batch at once. The Spark rebuild calls
:func:`dispatch_batch` too, so both produce identical files.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..format import cursor as C
from ..format import hashes as H
from ..format import message as M
from ..format.arrays import padded_rows, range_positions, rows_at, stable_argsort
from ..format.properties import split_keys
from ..format.record import SCHEDULE_TOPIC, tags_code_of
from ..format.record_layout import V4

log = logging.getLogger(__name__)

BATCH_RECORDS = 8192
#: the least time between two dispatch rounds of the background thread (see ReputMessageService.wake)
COALESCE_S = 0.001
_TX_SKIP_CQ = (M.TX_PREPARED, M.TX_ROLLBACK)


def dispatch_properties(raw: bytes) -> dict[str, str]:
    """The properties dispatch reads (TAGS, KEYS, UNIQ_KEY, DELAY) from a record's raw properties,
    parsed as upstream (name and value non-empty, the last occurrence winning)."""
    props = {}
    for seg in raw.split(b"\x02"):
        j = seg.find(b"\x01")
        if 0 < j < len(seg) - 1:
            k = seg[:j]
            if k in (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY"):
                props[k.decode()] = seg[j + 1:].decode("utf-8", "replace")
    return props


_DISPATCH_NAMES = frozenset({"TAGS", "KEYS", "UNIQ_KEY", "DELAY"})
#: a record's head from TOTALSIZE to SYSFLAG (the hosts come after: the same in every layout)
_RECORD_HEAD = V4.head_struct("sys_flag")


def head_says(mm, pos: int, fields: tuple[int, int, int, int, int]) -> bool:
    """Whether the record at ``pos`` of ``mm`` has a magic code and the head a put's fact says:
    ``fields`` is ``(TOTALSIZE, queue id, queue offset, PHYSICALOFFSET, sysFlag)``."""
    h = _RECORD_HEAD.unpack_from(mm, pos)
    return (h[1] == M.MAGIC_V1 or h[1] == M.MAGIC_V2) and (h[0], h[3], h[5], h[6], h[7]) == fields


def dispatch_fields(properties) -> dict[str, str] | None:
    """:func:`dispatch_properties` of the bytes a ``Message``'s checked properties encode to (a
    mapping or name/value pairs; no name empty, no separator in a name or value), taken from the
    properties themselves: None when a value is not a ``str`` (the bytes then say)."""
    out = {}
    for k, v in (properties.items() if type(properties) is dict else properties or ()):
        if k in _DISPATCH_NAMES and v is not None:
            if type(v) is not str:
                return None
            if v:
                out[k] = v
    return out


def _keys_of(props: dict[str, str]) -> list[str]:
    """The record's index keys without their topic: UNIQ_KEY first, then each KEYS token."""
    u = props.get("UNIQ_KEY")
    return ([] if u is None else [u]) + split_keys(props.get("KEYS"))


def index_keys(topic: str, props: dict[str, str]) -> list[str]:
    """The record's index keys, ``topic#key``: UNIQ_KEY first, then each KEYS token."""
    return [f"{topic}#{k}" for k in _keys_of(props)]


def index_hashes(topic: str, props: dict[str, str]) -> list[int]:
    """The index key hashes of :func:`index_keys` (``index_key_hash`` of each, in its order)."""
    return [H.index_key_hash(topic, k) for k in _keys_of(props)]


def extract_dispatch_fields(buf, batch: M.RecordBatch, delay_levels_ms, topic_cache: dict):
    """Per record: topic, tagsCode and the index keys (``topic#key`` strings, UNIQ_KEY first)."""
    mv = memoryview(buf)
    topics, tags_codes, key_lists = [], np.empty(len(batch), dtype=np.int64), []
    tp, tl, pp, pl, sts = (batch.topic_pos.tolist(), batch.topic_len.tolist(), batch.props_pos.tolist(),
                          batch.props_len.tolist(), batch.store_timestamp.tolist())
    for i in range(len(batch)):
        tb = bytes(mv[tp[i]:tp[i] + tl[i]])
        topic = topic_cache.get(tb)
        if topic is None:
            topic = topic_cache[tb] = tb.decode("utf-8", "replace")
        topics.append(topic)
        keys: list[str] = []
        if pl[i] > 0:
            props = dispatch_properties(bytes(mv[pp[i]:pp[i] + pl[i]]))
            tags_codes[i] = tags_code_of(topic, props, sts[i], delay_levels_ms)
            keys = index_keys(topic, props)
        else:
            tags_codes[i] = 0
        key_lists.append(keys)
    return topics, tags_codes, key_lists


@dataclass
class DispatchColumns:
    """What dispatch needs from a batch of records, as columns.

    ``topic_ids[i]`` indexes ``topics``; ``tags_codes[i]`` is the CQ tagsCode; index items are
    ``(item_rec, item_hash)`` in dispatch order (per record: UNIQ_KEY first, then each KEYS token),
    ``item_hash`` being ``abs(hash("topic#key"))`` as an int64 >= 0."""

    topic_ids: np.ndarray
    topics: list[str]
    tags_codes: np.ndarray
    item_rec: np.ndarray
    item_hash: np.ndarray


def _gather_ranges(u8: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copy byte ranges into one buffer, each preceded by 0x02 and the last followed by one.
    Returns ``(buf, slot_starts)``; range i occupies ``buf[slot_starts[i]+1 : slot_starts[i]+1+lens[i]]``
    and is followed by 0x02 (property values end there, as at a separator).

    Ranges of similar length (the usual properties) are taken as padded rows
    (:func:`_gather_padded`); otherwise the bytes are gathered by position."""
    lens = np.maximum(lens, 0)
    n = int(lens.size)
    width = int(lens.max()) + 2 if n else 0
    if n and n * width <= 2 * (int(lens.sum()) + n) + 16 * n and int(pos.max()) + width - 1 <= u8.size:
        return _gather_padded(u8, pos, lens, width)
    return _gather_by_position(u8, pos, lens)


def _gather_padded(u8: np.ndarray, pos: np.ndarray, lens: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_gather_ranges` as rows of ``width`` bytes: row i is the byte before range i (then set
    to 0x02), the range, and 0x02 up to the width (empty properties to the parsing); one strided
    row copy. Every row must fit in ``u8``."""
    rows = padded_rows(u8, pos - 1, lens + 1, width, 2)
    rows[:, 0] = 2
    return rows.ravel(), np.arange(lens.size, dtype=np.int64) * width


def _gather_by_position(u8: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_gather_ranges` byte by byte (any lengths): the ranges back to back, one 0x02 before
    each and one at the end."""
    lens = np.maximum(lens, 0)
    n = int(lens.size)
    total = int(lens.sum())
    width = lens + 1
    slot = np.cumsum(width) - width
    out = np.empty(total + n + 1, dtype=np.uint8)
    if total:
        src = range_positions(pos, lens)
        data = np.ones(out.size, dtype=bool)
        data[slot] = False
        data[-1] = False
        out[data] = u8[src]
    out[slot] = 2
    out[-1] = 2
    return out, slot


def _find_after(buf: np.ndarray, cand: np.ndarray, pat: bytes) -> np.ndarray:
    """The positions of ``cand`` (sorted, each holding ``pat[0]``) where all of ``pat`` starts in
    ``buf``, narrowed byte by byte: the separators found once stand for the first byte of every
    property-name pattern, instead of one pass over the whole buffer per name."""
    cand = cand[:np.searchsorted(cand, buf.size - len(pat) + 1)]
    for j in range(1, len(pat)):
        cand = cand[buf[cand + j] == pat[j]]
    return cand


def _property_values(buf, slot, seps, name: bytes):
    """(record index, value start, value end) of the effective ``name`` property of each record
    that has one: key and value non-empty, the last occurrence winning (upstream parsing)."""
    hit = _find_after(buf, seps, b"\x02" + name + b"\x01")
    vstart = hit + len(name) + 2
    vend = seps[np.searchsorted(seps, vstart)]
    keep = vend > vstart
    hit, vstart, vend = hit[keep], vstart[keep], vend[keep]
    rec = np.searchsorted(slot, hit, side="right") - 1
    if rec.size > 1:
        last = np.ones(rec.size, dtype=bool)
        last[:-1] = rec[1:] != rec[:-1]
        rec, vstart, vend = rec[last], vstart[last], vend[last]
    return rec, vstart, vend


def _text(buf: np.ndarray, a: int, b: int) -> str:
    return buf[a:b].tobytes().decode("utf-8", "replace")


#: batches up to this many records take the per-record path (numpy's fixed cost per call dominates a
#: broker's one-message dispatches: about 0.8 ms vectorised against tens of microseconds)
SMALL_BATCH = 16


def _columns_of_fields(batch: M.RecordBatch, u8: np.ndarray, delay_levels_ms, topic_cache: dict) -> DispatchColumns:
    """:class:`DispatchColumns` from :func:`extract_dispatch_fields` (a small batch, record by record)."""
    topics_per, tags_codes, key_lists = extract_dispatch_fields(u8, batch, delay_levels_ms, topic_cache)
    topics: list[str] = []
    ids = {}
    topic_ids = np.empty(len(batch), dtype=np.int64)
    item_rec: list[int] = []
    item_hash: list[int] = []
    for i, t in enumerate(topics_per):
        j = ids.get(t)
        if j is None:
            j = ids[t] = len(topics)
            topics.append(t)
        topic_ids[i] = j
        for key in key_lists[i]:
            item_rec.append(i)
            item_hash.append(H.abs_key_hash(H.java_hash(key)))
    return DispatchColumns(topic_ids, topics, tags_codes, np.array(item_rec, dtype=np.int64),
                           np.array(item_hash, dtype=np.int64))


def extract_dispatch_columns(u8: np.ndarray, batch: M.RecordBatch, delay_levels_ms, topic_cache: dict
                             ) -> DispatchColumns:
    """Vectorised counterpart of :func:`extract_dispatch_fields` (same answers, as columns)."""
    if len(batch) <= SMALL_BATCH:
        return _columns_of_fields(batch, u8, delay_levels_ms, topic_cache)
    topic_ids, topics = _topic_column(u8, batch, topic_cache)
    # properties: one buffer, values located by byte patterns
    props = _Props(*_gather_ranges(u8, batch.props_pos, batch.props_len))
    tags_codes = _tags_codes(props, batch, topic_ids, topics, delay_levels_ms)
    item_rec, item_hash = _index_items(props, topic_ids, topics)
    return DispatchColumns(topic_ids, topics, tags_codes, item_rec, item_hash)


def _topic_column(u8: np.ndarray, batch: M.RecordBatch, topic_cache: dict) -> tuple[np.ndarray, list[str]]:
    """Per record the index of its topic in the batch's distinct topics, and those topics: topics as
    fixed-width rows (length byte + padded bytes), the distinct rows decoded once."""
    tl = batch.topic_len
    width = int(tl.max()) if len(batch) else 0
    if width and int(tl.min()) == width:
        first = batch.topic_pos[0]
        if (rows_at(u8, batch.topic_pos, width) == u8[first:first + width]).all():  # one topic (the usual case)
            return np.zeros(len(batch), dtype=np.int64), [_decoded(u8, int(first), width, topic_cache)]
    cols = np.arange(width, dtype=np.int64)
    idx = batch.topic_pos[:, None] + np.minimum(cols, np.maximum(tl[:, None] - 1, 0))
    mat = np.where(cols < tl[:, None], u8[idx], 0).astype(np.uint8)
    rows = np.concatenate([tl.astype(np.uint8)[:, None], mat], axis=1)
    _, first, topic_ids = np.unique(np.ascontiguousarray(rows).view(np.dtype((np.void, rows.shape[1]))).ravel(),
                                    return_index=True, return_inverse=True)
    topics = [_decoded(u8, int(batch.topic_pos[i]), int(tl[i]), topic_cache) for i in first.tolist()]
    return topic_ids.ravel(), topics


def _decoded(u8: np.ndarray, pos: int, n: int, topic_cache: dict) -> str:
    """The topic name in ``u8[pos:pos + n]``, decoded once per distinct name."""
    tb = u8[pos:pos + n].tobytes()
    t = topic_cache.get(tb)
    if t is None:
        t = topic_cache[tb] = tb.decode("utf-8", "replace")
    return t


@dataclass
class _Props:
    """A batch's properties gathered into one buffer (:func:`_gather_ranges`), with the positions
    of its 0x02 separators."""

    buf: np.ndarray
    slot: np.ndarray

    def __post_init__(self) -> None:
        self.seps = np.flatnonzero(self.buf == 2)

    def values(self, name: bytes):
        return _property_values(self.buf, self.slot, self.seps, name)


def _tags_codes(props: _Props, batch: M.RecordBatch, topic_ids: np.ndarray, topics: list[str], delay_levels_ms
                ) -> np.ndarray:
    """Per record the consume-queue tagsCode: the TAGS hash; for the schedule topic, the delivery
    time its DELAY level says."""
    buf = props.buf
    tags_codes = np.zeros(len(batch), dtype=np.int64)
    trec, ts_, te_ = props.values(b"TAGS")
    if trec.size:
        h, ok = H.java_hash_ranges(buf, ts_, te_)
        tags_codes[trec] = H.to_int32(h).astype(np.int64)
        for j in np.flatnonzero(~ok).tolist():
            tags_codes[trec[j]] = H.java_hash_cached(_text(buf, int(ts_[j]), int(te_[j])))
    if SCHEDULE_TOPIC in topics:
        drec, ds, de = props.values(b"DELAY")
        sched = topics.index(SCHEDULE_TOPIC)
        for r, a, b in zip(drec.tolist(), ds.tolist(), de.tolist()):
            if topic_ids[r] == sched:
                found = {"DELAY": _text(buf, a, b)}
                tr = np.flatnonzero(trec == r)
                if tr.size:
                    found["TAGS"] = _text(buf, int(ts_[tr[0]]), int(te_[tr[0]]))
                tags_codes[r] = tags_code_of(SCHEDULE_TOPIC, found, int(batch.store_timestamp[r]), delay_levels_ms)
    return tags_codes


def _key_tokens(buf: np.ndarray, krec: np.ndarray, ks: np.ndarray, ke: np.ndarray):
    """The KEYS values split on single spaces (empty tokens dropped): (token start, end, record)."""
    if not krec.size:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    spaces = np.flatnonzero(buf == 0x20)
    nxt_space = np.searchsorted(spaces, ks)
    inner = nxt_space < spaces.size
    if not (spaces[nxt_space[inner]] < ke[inner]).any():
        return ks, ke, krec  # (the usual case: no value holds a space, each is one token)
    inside = np.zeros(buf.size + 1, dtype=np.int8)
    inside[ks] = 1  # value ranges never touch (a 0x02 ends each), so no position repeats
    inside[ke] = -1
    inside = np.cumsum(inside[:-1], dtype=np.int8) > 0
    tok = inside & (buf != 0x20)
    prev = np.concatenate([[False], tok[:-1]])
    nxt = np.concatenate([tok[1:], [False]])
    tstart = np.flatnonzero(tok & ~prev)
    tend = np.flatnonzero(tok & ~nxt) + 1
    return tstart, tend, krec[np.searchsorted(ks, tstart, side="right") - 1]


def _index_items(props: _Props, topic_ids: np.ndarray, topics: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The index items in dispatch order (per record UNIQ_KEY, then each KEYS token): the record of
    each and ``abs(hash("topic#key"))``."""
    buf = props.buf
    urec, us, ue = props.values(b"UNIQ_KEY")
    tstart, tend, tok_rec = _key_tokens(buf, *props.values(b"KEYS"))
    item_rec = np.concatenate([urec, tok_rec]).astype(np.int64)
    starts = np.concatenate([us, tstart]).astype(np.int64)
    ends = np.concatenate([ue, tend]).astype(np.int64)
    order = stable_argsort(item_rec)  # uniq keys sort before the KEYS tokens of a record
    item_rec, starts, ends = item_rec[order], starts[order], ends[order]
    if not item_rec.size:
        return item_rec, np.zeros(0, dtype=np.int64)
    prefix = np.array([H.java_hash(t + "#") & 0xFFFFFFFF for t in topics], dtype=np.uint64)
    kh, ok = H.java_hash_ranges(buf, starts, ends)
    full = H.to_int32(H.combine_hash(prefix[topic_ids[item_rec]], kh, ends - starts)).astype(np.int64)
    for j in np.flatnonzero(~ok).tolist():
        full[j] = H.java_hash(f"{topics[topic_ids[item_rec[j]]]}#{_text(buf, int(starts[j]), int(ends[j]))}")
    return item_rec, np.where(full == H.INT_MIN, 0, np.abs(full))


def queue_groups(batch: M.RecordBatch, cols: DispatchColumns):
    """Yield ``(topic, queue_id, records)`` for the records of a batch that get a consume-queue
    unit (not PREPARED or ROLLBACK), grouped by queue, in commitlog order inside a group."""
    if len(batch) <= SMALL_BATCH:
        yield from _queue_groups_small(batch, cols)
        return
    tx = batch.sys_flag & M.SYSFLAG_TX_MASK
    sel = np.flatnonzero((tx != M.TX_PREPARED) & (tx != M.TX_ROLLBACK))
    if not sel.size:
        return
    key = cols.topic_ids[sel].astype(np.int64) * (1 << 32) + batch.queue_id[sel].astype(np.int64)
    order = stable_argsort(key)
    sel, key = sel[order], key[order]
    for grp in np.split(sel, np.flatnonzero(np.diff(key)) + 1):
        i0 = int(grp[0])
        yield cols.topics[cols.topic_ids[i0]], int(batch.queue_id[i0]), grp


def _queue_groups_small(batch: M.RecordBatch, cols: DispatchColumns):
    """:func:`queue_groups` record by record (same groups, same order)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (t, q, f) in enumerate(zip(cols.topic_ids.tolist(), batch.queue_id.tolist(), batch.sys_flag.tolist())):
        tx = f & M.SYSFLAG_TX_MASK
        if tx != M.TX_PREPARED and tx != M.TX_ROLLBACK:
            groups.setdefault((t, q), []).append(i)
    for (t, q) in sorted(groups):
        yield cols.topics[t], q, np.array(groups[(t, q)], dtype=np.int64)


@dataclass
class DispatchTarget:
    """Where :func:`dispatch_batch` writes: ``cq_for(topic, queue_id)`` gives the consume queue of a
    unit, ``index_service`` takes the index items (None: no index), ``delay_levels_ms`` the schedule
    topic's levels, ``topic_cache`` topic names decoded so far (shared between batches)."""

    cq_for: Callable
    index_service: object | None
    delay_levels_ms: object
    topic_cache: dict = field(default_factory=dict)
    build_cq: bool = True
    build_index: bool = True


def dispatch_batch(buf, batch: M.RecordBatch, target: DispatchTarget) -> set[tuple[str, int]]:
    """Write the CQ units and index items of a batch of valid records (commitlog order) to
    ``target``; returns the ``(topic, queue_id)`` pairs that got units."""
    queues: set[tuple[str, int]] = set()
    if len(batch) == 0:
        return queues
    u8 = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    cols = extract_dispatch_columns(u8, batch, target.delay_levels_ms, target.topic_cache)
    if target.build_cq:
        for topic, qid, grp in queue_groups(batch, cols):
            target.cq_for(topic, qid).put_units(batch.queue_offset[grp], batch.phy_offset[grp], batch.total[grp],
                                                cols.tags_codes[grp])
            queues.add((topic, qid))
    if target.build_index and target.index_service is not None:
        target.index_service.build_index_hashed(batch.phy_offset, batch.store_timestamp, batch.sys_flag,
                                                cols.item_rec, cols.item_hash)
    return queues


def iter_record_batches(queue, start: int, end: int, batch_records: int = BATCH_RECORDS):
    """Yield ``(mapped_file, RecordBatch)`` for the valid records in ``[start, end)`` of a commitlog
    segment queue, in order, following blank records to the next segment (the commitlog cursor,
    :mod:`rmqstore.format.cursor`, segment by segment).

    Stops at the end of data, at ``end``, or before the first invalid record; the generator's
    return value (``StopIteration.value``) is ``(offset, Stop)``: where it stopped and why
    (:attr:`~rmqstore.format.cursor.Stop.END` for the end of data or ``end``)."""
    pos_phy = start
    while pos_phy < end:
        mf = queue.find(pos_phy)
        if mf is None:
            return pos_phy, C.Stop.END
        base = mf.file_from_offset
        step = C.read_batch(mf.mm, mf.u8, pos_phy - base, min(mf.file_size, end - base), batch_records)
        if len(step.batch):
            yield mf, step.batch
            pos_phy = base + step.end
        halt = step.halt
        if halt.stop is C.Stop.BLANK:
            pos_phy = base + mf.file_size
        elif halt.stop is C.Stop.FULL:
            continue
        elif halt.stop is C.Stop.END and mf.stand_in and queue.find(base + mf.file_size) is not None:
            pos_phy = base + mf.file_size  # the rest of a missing or short segment: a gap
        else:
            return pos_phy, C.Stop.END if halt.stop in (C.Stop.END, C.Stop.LIMIT) else halt.stop
    return pos_phy, C.Stop.END


def pad_gaps(store, mf, batch, spans, topic_cache, cq_of) -> None:
    """Blank units for the records lost in the corrupt ``spans`` before ``batch``'s records: a queue whose
    next record (by queue offset) lies past a span keeps the queue offsets the lost records held, each
    blank unit pointing at the span (recovery's re-dispatch and verify's rebuild both keep them)."""
    cols = extract_dispatch_columns(mf.u8, batch, store.delay_levels_ms, topic_cache)
    tx = batch.sys_flag & M.SYSFLAG_TX_MASK
    seen = set()
    for i in np.flatnonzero((tx != M.TX_PREPARED) & (tx != M.TX_ROLLBACK)).tolist():
        key = (cols.topics[cols.topic_ids[i]], int(batch.queue_id[i]))
        if key in seen:
            continue
        seen.add(key)
        cq = cq_of(key)
        if cq is None or not cq.queue.files:
            continue
        q, have = int(batch.queue_offset[i]), cq.max_offset
        span = next((s for s in spans if cq.max_physic_offset <= s.offset < int(batch.phy_offset[i])), None)
        if q <= have or span is None:
            continue
        n = q - have
        cq.put_units(np.arange(have, q, dtype=np.int64), np.full(n, span.offset, dtype=np.int64),
                     np.full(n, min(span.length, 0x7FFFFFFE), dtype=np.int64), np.zeros(n, dtype=np.int64))
