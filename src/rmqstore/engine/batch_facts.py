"""Dispatch of a producer's batch from what its put already knew (mirrors what
``CommitLogDispatcherBuildConsumeQueue`` and ``CommitLogDispatcherBuildIndex`` write for each of
its records), instead of walking and decoding the records again.

A batch copied through by :func:`~.put_batch.put_raw_batch` leaves one :class:`BatchFact` in
``CommitLog.batch_facts``: its offsets and sizes (the encoded batch's columns), first queue offset,
store time, topic, queue, sysFlag, its messages' properties as one bytes object and the TAGS,
UNIQ_KEY and KEYS values the put's check of those properties captured. The dispatcher
(:meth:`~.reput.ReputMessageService._reput_round`) checks the first and last record's head of each
fact against the segment (:func:`heads_match`), then writes the consume-queue units and index items
of a run of facts with :func:`dispatch_facts`: columns, each distinct TAGS hashed once, the index
keys (UNIQ_KEY first, then each KEYS token, as :func:`~.dispatch.index_keys`) hashed column-wise;
without captured values, one regex pass per name over the run's properties, or record by record.
Same files, byte for byte, as the walk.
"""
from __future__ import annotations

import re
from itertools import accumulate, chain
from typing import NamedTuple

import numpy as np

from ..format import hashes as H
from ..format import message as M
from ..format.record import SCHEDULE_TOPIC, tags_code_of
from .dispatch import dispatch_properties, head_says, index_hashes

#: at most this many batches' facts wait for the dispatcher (each: a bytes object of the batch's
#: properties and two small arrays); past that, batches are dispatched from their records
BATCH_FACTS_MAX = 1024
#: the separator of messages in :attr:`BatchFact.props`: not ASCII, so never inside the properties
#: of a fact (only batches whose properties are canonical ASCII leave one); its 0x02 puts one before
#: every entry, so that each name pattern starts with a literal (``re`` searches those fast)
SEP = b"\xff\x02"
_TAGS = re.compile(rb"\x02TAGS\x01([^\x02]+)")
_UNIQ = re.compile(rb"\x02UNIQ_KEY\x01([^\x02]+)")
_KEYS = re.compile(rb"\x02KEYS\x01([^\x02]+)")
_MASK32 = 0xFFFFFFFF


class BatchFact(NamedTuple):
    """What the put of one batch knew of its records (commitlog offsets are absolute).
    ``CommitLog.append_batch(..., fact_props)`` leaves one when given ``fact_props``: the batch's
    properties, canonical ASCII (``put_batch.canonical_properties``), joined by :data:`SEP`, and
    what ``put_batch.batch_shape`` found in them (or None); the template's sysFlag is then every
    record's."""

    phy: int  # the first record's offset
    end: int  # where the last record ends
    starts: np.ndarray  # record starts relative to ``phy`` (int64)
    totals: np.ndarray  # record sizes (int64)
    queue_offset: int  # the first record's (the rest follow one by one)
    store_ts: int
    topic: str
    queue_id: int
    sys_flag: int  # every record's
    props: bytes  # the records' properties, ``SEP`` between two records
    values: tuple | None = None  # (names, per record a tuple of their values): TAGS, UNIQ_KEY, KEYS they have


def heads_match(mm, base: int, f: BatchFact) -> bool:
    """Whether the segment mapped in ``mm`` (from commitlog offset ``base``) holds ``f``'s records: the
    first and last record's TOTALSIZE, magic, queue id, queue offset, PHYSICALOFFSET and sysFlag as
    the fact says, and the records back to back up to ``f.end``."""
    last = f.starts.size - 1
    if last < 0 or f.starts.item(0):
        return False
    start_last, total_last = f.starts.item(last), f.totals.item(last)  # (item: no numpy scalar made)
    if start_last + total_last != f.end - f.phy:
        return False
    for i, rel, total in ((0, 0, f.totals.item(0)), (last, start_last, total_last)) if last else ((0, 0, total_last),):
        phy = f.phy + rel
        if not head_says(mm, phy - base, (total, f.queue_id, f.queue_offset + i, phy, f.sys_flag)):
            return False
    return True


def dispatch_facts(store, run: list[BatchFact]) -> set[tuple[str, int]]:
    """Write the consume-queue units and index items of ``run`` (facts back to back, in commitlog
    order) and the dispatch mark; returns the queues that got units (every fact's: facts come from
    ``put_batch._put_fast`` only, which takes no batch with transaction sysFlag bits, so no record
    is a prepared or rolled-back half message kept out of its queue)."""
    counts = [f.starts.size for f in run]
    phys = np.concatenate([f.starts + f.phy for f in run]) if len(run) > 1 else run[0].starts + run[0].phy
    totals = np.concatenate([f.totals for f in run]) if len(run) > 1 else run[0].totals
    tags, item_rec, item_hash = fact_columns(run, counts, store.delay_levels_ms)
    queues: dict[tuple[str, int], list[int]] = {}
    for i, f in enumerate(run):
        queues.setdefault((f.topic, f.queue_id), []).append(i)
    at = list(accumulate(counts, initial=0))
    for key, idx in queues.items():
        cq = store.find_consume_queue(*key)
        q0, a, b = run[idx[0]].queue_offset, at[idx[0]], at[idx[-1] + 1]
        together = b - a == sum(counts[i] for i in idx)  # (no other queue's records between its facts)
        if together and all(run[i].queue_offset == q0 + at[i] - a for i in idx):  # (and offsets following)
            cq.put_run(q0, phys[a:b], totals[a:b], tags[a:b])
        else:
            sl = [slice(at[i], at[i + 1]) for i in idx]
            qoffs = np.concatenate([np.arange(run[i].queue_offset, run[i].queue_offset + counts[i]) for i in idx])
            cq.put_units(qoffs.astype(np.int64), *(np.concatenate([c[s] for s in sl]) for c in (phys, totals, tags)))
    if store.cfg.message_index_enable:
        tss = per_record([f.store_ts for f in run], counts)
        store.index_service.build_index_hashed(phys, tss, per_record([f.sys_flag for f in run], counts), item_rec,
                                                item_hash)
    store.on_dispatched(run[-1].store_ts)
    return set(queues)


def per_record(values: list[int], counts: list[int]) -> np.ndarray:
    """Each fact's value repeated for its records (int64)."""
    if values.count(values[0]) == len(values):
        return np.full(sum(counts), values[0], dtype=np.int64)
    return np.repeat(np.array(values, dtype=np.int64), counts)


def fact_columns(run: list[BatchFact], counts: list[int], delay_levels_ms) -> tuple:
    """``(tagsCodes, item_rec, item_hash)`` of the records of ``run``, as :func:`~.dispatch.dispatch_batch`
    finds them: from the values the puts captured, else one ``findall`` per property name over the
    run's properties; when a name is in some records but not all, or the topic is the schedule
    topic, record by record."""
    n = sum(counts)
    found = _captured(run)
    if found is None:
        joined = b"\x02" + SEP.join([f.props for f in run])
        found = [rx.findall(joined) for rx in (_TAGS, _UNIQ, _KEYS)]
    if any(len(v) not in (0, n) for v in found) or any(f.topic == SCHEDULE_TOPIC for f in run):
        return _columns_per_record(run, delay_levels_ms)
    tags, uniq, keys = found
    tags_codes = _tags_codes(tags, n)
    prefix = _prefix_hashes(run, counts)
    if keys and b" " in b"".join(keys):  # a KEYS value of more than one token: items record by record
        items, rec = [], []
        for r, (u, kv) in enumerate(zip(uniq or [None] * n, keys)):
            toks = ([u] if u is not None else []) + [k for k in kv.split(b" ") if k]
            items += toks
            rec += [r] * len(toks)
        item_rec = np.array(rec, dtype=np.int64)
        return tags_codes, item_rec, key_hashes(prefix if type(prefix) is int else prefix[item_rec], items)
    if uniq and keys:  # per record UNIQ_KEY, then its one KEYS token
        both = np.stack([key_hashes(prefix, uniq), key_hashes(prefix, keys)], axis=1)
        return tags_codes, np.repeat(np.arange(n, dtype=np.int64), 2), both.ravel()
    items = uniq or keys
    if not items:
        return tags_codes, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return tags_codes, np.arange(n, dtype=np.int64), key_hashes(prefix, items)


def _captured(run: list[BatchFact]) -> list[list] | None:
    """``[TAGS values, UNIQ_KEY values, KEYS values]`` of the records of ``run`` from what the puts
    captured (:attr:`BatchFact.values`), a list empty when no record has that name; None when a fact
    has none, or the facts differ in which names they have."""
    names = run[0].values[0] if run[0].values is not None else None
    if names is None or any(f.values is None or f.values[0] != names for f in run):
        return None
    cols = [list(chain.from_iterable(c)) for c in zip(*(list(zip(*f.values[1]))[:-1] for f in run))]
    by_name = dict(zip(names, cols))
    return [by_name.get(name, []) for name in (b"TAGS", b"UNIQ_KEY", b"KEYS")]


def _tags_codes(tags: list[bytes], n: int) -> np.ndarray:
    """The tagsCode of each of ``n`` records from their TAGS values (all or none), each distinct
    value hashed once."""
    if not tags:
        return np.zeros(n, dtype=np.int64)
    distinct = set(tags)
    if len(distinct) == 1:
        return np.full(n, H.java_hash_cached(tags[0].decode("ascii")), dtype=np.int64)
    codes = {t: H.java_hash_cached(t.decode("ascii")) for t in distinct}
    return np.array([codes[t] for t in tags], dtype=np.int64)


def _prefix_hashes(run: list[BatchFact], counts: list[int]) -> int | np.ndarray:
    """The Java hash of ``topic + "#"`` (< 2**32), an index key's prefix: one int when the records
    share their topic, else per record (uint64)."""
    topics = [f.topic for f in run]
    if topics.count(topics[0]) == len(topics):
        return H.java_hash_cached(topics[0] + "#") & _MASK32
    return np.repeat(np.array([H.java_hash_cached(t + "#") & _MASK32 for t in topics], dtype=np.uint64), counts)


def key_hashes(prefix: int | np.ndarray, keys: list[bytes]) -> np.ndarray:
    """``abs(hash(topic + "#" + key))`` (int64; ``Integer.MIN_VALUE`` gives 0) of ASCII ``keys``
    given the prefix hash (one, or each key's as uint64): keys of one length as the rows of one
    matrix in uint32 arithmetic, whose wrap-around is Java's (the usual UNIQ_KEYs), any others
    through :func:`~rmqstore.format.hashes.java_hash_ranges`."""
    lens = list(map(len, keys))
    width = lens[0]
    if lens.count(width) == len(lens) and width <= 256:
        rows = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), width)
        kh = rows.dot(H.column_weights(width))  # uint32
        shift = pow(31, width, 1 << 32)
        if type(prefix) is int:
            full = kh + np.uint32(prefix * shift & _MASK32)
        else:
            full = ((prefix * np.uint64(shift) + kh) & np.uint64(_MASK32)).astype(np.uint32)
    else:
        ln = np.array(lens, dtype=np.int64)
        ends = np.cumsum(ln)
        kh, ok = H.java_hash_ranges(np.frombuffer(b"".join(keys), dtype=np.uint8), ends - ln, ends)
        if not ok.all():  # (facts hold ASCII properties only)
            raise ValueError("a batch fact's index key is not ASCII")
        pre = np.full(len(keys), prefix, dtype=np.uint64) if type(prefix) is int else prefix
        full = H.combine_hash(pre, kh, ln).astype(np.uint32)
    h = np.abs(full.view(np.int32))  # (abs of Integer.MIN_VALUE wraps to itself: the maximum makes it 0)
    return np.maximum(h, 0, out=h).astype(np.int64)


def _columns_per_record(run: list[BatchFact], delay_levels_ms) -> tuple:
    """:func:`fact_columns` record by record (properties parsed as the walk parses them)."""
    codes, item_rec, item_hash = [], [], []
    r = 0
    for f in run:
        for raw in f.props.split(SEP):
            props = dispatch_properties(raw) if raw else {}
            codes.append(tags_code_of(f.topic, props, f.store_ts, delay_levels_ms) if raw else 0)
            hashes = index_hashes(f.topic, props)
            item_rec += [r] * len(hashes)
            item_hash += hashes
            r += 1
    return (np.array(codes, dtype=np.int64), np.array(item_rec, dtype=np.int64),
            np.array(item_hash, dtype=np.int64))
