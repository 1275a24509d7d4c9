"""The consume-queue checks: every unit against its record (topic, queue id, queue offset, size,
tagsCode), and records of a queue beyond the queue's end. Each finding carries a
:class:`RebuildQueue` of its queue."""
from __future__ import annotations

import numpy as np

from ...format import consume_queue as CQF
from ...format import message as M
from .. import recovery as R
from ..dispatch import extract_dispatch_columns
from .context import LogFacts, VerifyContext, by_segment, file_pos
from .findings import Finding, RebuildQueue


def check_consume_queues(ctx: VerifyContext, facts: LogFacts) -> None:
    """Every queue of the snapshot, unit by unit against the commitlog's valid records up to
    ``facts.end``; then (when lag is judged) the records each queue is missing at its end."""
    store = ctx.store
    cq_hi = ctx.snapshot.cq_hi
    for key in sorted(cq_hi):
        cq = store.consume_queues.get(key)
        if cq is None:
            continue
        for mf in list(cq.queue.files):
            ctx.progress.add(mf.wrote_position)
            check_queue_file(ctx, facts.end, key, mf, (cq.min_offset, cq_hi[key]))
    if ctx.snapshot.judge_lag:
        check_queue_ends(ctx, facts)


def check_queue_file(ctx: VerifyContext, end: int, key: tuple[str, int], mf, bounds: tuple[int, int]) -> None:
    """The units of one consume-queue file inside the queue's ``bounds`` (min, max offset)."""
    topic, qid = key
    q_first = mf.file_from_offset // CQF.UNIT_SIZE
    n = mf.wrote_position // CQF.UNIT_SIZE
    a, b = max(bounds[0], q_first), min(bounds[1], q_first + n)
    if a >= b:
        return
    units = np.frombuffer(mf.mm, dtype=CQF.UNIT_DTYPE, count=b - a, offset=(a - q_first) * CQF.UNIT_SIZE)
    phys = units["phy_offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    tags = units["tags_code"].astype(np.int64)
    qs = np.arange(a, b, dtype=np.int64)
    ok = R.match_units(ctx.files, end, (phys, sizes, qs), (topic, qid))
    fix = (RebuildQueue(topic, qid),)
    for j in np.flatnonzero(~ok).tolist():
        ctx.found.add(Finding("cq_unit", mf.path, int(qs[j] - q_first) * CQF.UNIT_SIZE,
                              f"unit {int(qs[j])} of {topic}/{qid} (phy {int(phys[j])}, size {int(sizes[j])}) does "
                              "not point at a complete record of this topic, queue and offset", repairs=fix))
    good = np.flatnonzero(ok)
    if good.size:
        check_tags(ctx, mf, key, (qs[good], phys[good], tags[good]))


def check_tags(ctx: VerifyContext, mf, key: tuple[str, int], units: tuple) -> None:
    """The tagsCode of units that point at their records (``units``: queue offsets, phys, tags)."""
    qs, phys, tags = units
    store, q_first = ctx.store, mf.file_from_offset // CQF.UNIT_SIZE
    fix = (RebuildQueue(*key),)
    for seg, idx in by_segment(ctx.files, phys):
        batch = M.decode_batch(seg.u8, phys[idx] - seg.file_from_offset)
        cols = extract_dispatch_columns(seg.u8, batch, store.delay_levels_ms, ctx.topic_cache)
        bad = np.flatnonzero(cols.tags_codes != tags[idx])
        for j in bad.tolist():
            q = int(qs[idx[j]])
            ctx.found.add(Finding("cq_unit", mf.path, (q - q_first) * CQF.UNIT_SIZE,
                                  f"unit {q} of {key[0]}/{key[1]} has tagsCode {int(tags[idx[j]])}, its record's TAGS "
                                  f"give {int(cols.tags_codes[j])}", repairs=fix))


def check_queue_ends(ctx: VerifyContext, facts: LogFacts) -> None:
    """Records of a queue in the commitlog at or beyond the queue's end (its last units lost)."""
    cq_hi = ctx.snapshot.cq_hi
    for key, (q, phy) in sorted(facts.first_beyond.items()):
        last = facts.queue_last[key][0]
        path, pos = file_pos(ctx.files, phy)
        where = f"the consume queue ends at {cq_hi[key]}" if key in cq_hi else "there is no consume queue"
        ctx.found.add(Finding("cq_gap", path, pos, f"queue {key[0]}/{key[1]}: the record at {phy} has queue offset "
                                                   f"{q} (the commitlog holds offsets up to {last}) but {where}",
                              repairs=(RebuildQueue(*key),)))
