"""Recovery, second step: a :class:`.plan.RecoveryPlan` applied. A writer cuts the files
(:func:`apply_recovery`: the commitlog tail saved and zeroed, consume queues and index files cut
back, the records after the re-dispatch start dispatched again); a reader sets its in-memory
view only (:func:`apply_read_view`) and writes nothing. Each returns the
:class:`.report.RecoveryReport`."""
from __future__ import annotations

import dataclasses
import os

from ...io.mapped_file import fsync_dirty_dirs
from .. import dispatch as D
from ..contract import StoreParts
from .index_repair import complete_split_record
from .index_tail import index_cut_point, store_ts_reader, truncate_index_file
from .plan import RecoveryPlan
from .queues import cut_queue, narrow_queue_view
from .report import CorruptSpan, RecoveryReport
from .scan import scan_log
from .tails import save_cut_bytes
from .view import really_corrupt, set_read_positions, validate_read_views


def apply_recovery(store: StoreParts, plan: RecoveryPlan) -> RecoveryReport:
    """A writer: make the files what ``plan`` says (FORMAT.md §9 with the changes described in
    :mod:`rmqstore.engine.recovery`)."""
    report = report_of(plan, applied=True)
    if plan.mode == "empty":
        for cq in store.consume_queues.values():
            cq.destroy()
        store.consume_queues.clear()
    else:
        report.cuts = cut_commitlog(store, plan)
        settle_checkpoint(store, plan)
    report.redispatch_from = cut_derived_files(store, plan, report.index_files_rebuilt)
    if plan.mode != "empty":
        report.records_redispatched = redispatch_records(store, report.redispatch_from, plan.end_offset)
        flush_derived_files(store)
    settle_queues(store, plan, report)
    return report


def cut_derived_files(store: StoreParts, plan: RecoveryPlan, rebuilt: list[str]) -> int:
    """The consume queues and index files cut as ``plan`` says (the names of index files that
    lost items added to ``rebuilt``). Returns where the re-dispatch starts."""
    for topic, qid, new_end in plan.queue_cuts:
        cut_queue(store.consume_queues[(topic, qid)], new_end)
    redispatch = plan.redispatch_from
    if plan.index_cuts:
        redispatch = min(redispatch, _cut_index_files(store, plan, rebuilt))
    elif plan.index_catch_up_from is not None:
        redispatch = min(redispatch, plan.index_catch_up_from)
    return max(redispatch, store.commit_log.min_offset)


def flush_derived_files(store: StoreParts) -> None:
    """The consume queues, the index, their directories and the checkpoint to disk."""
    for cq in store.consume_queues.values():
        cq.flush(0)
    store.index_service.flush()
    fsync_dirty_dirs()
    store.checkpoint.flush()


def apply_read_view(store: StoreParts, plan: RecoveryPlan) -> RecoveryReport:
    """A reader: its view of the files as ``plan`` would leave them, in memory; nothing written.
    After a crash its consume-queue views end at the last unit that matches its record."""
    report = report_of(plan, applied=False)
    if plan.mode != "empty":
        report.corrupt_records = really_corrupt(store, list(plan.corrupt))
        report.cuts = [dataclasses.replace(c) for c in plan.cuts]
        set_read_positions(store, plan.end_offset)
        cl = store.commit_log
        cl.confirm_offset = cl.flushed_offset = plan.end_offset
        settle_checkpoint(store, plan)
        if plan.abnormal:
            validate_read_views(store, from_phy=plan.redispatch_from)
        else:
            for topic, qid, new_end in plan.queue_cuts:
                narrow_queue_view(store.consume_queues[(topic, qid)], new_end)
    if plan.index_dropped:
        # kept as they are (every query result is checked against its record)
        report.index_files_rebuilt = list(plan.index_dropped)
        store.index_service.adopt(list(plan.index_files))
    report.redispatch_from = max(plan.redispatch_from, store.commit_log.min_offset)
    settle_queues(store, plan, report)
    return report


def report_of(plan: RecoveryPlan, *, applied: bool) -> RecoveryReport:
    return RecoveryReport(mode=plan.mode, applied=applied, start_offset=plan.start_offset,
                          end_offset=plan.end_offset, last_valid_offset=plan.last_valid_offset,
                          records_scanned=plan.records, corrupt_records=list(plan.corrupt))


def cut_commitlog(store: StoreParts, plan: RecoveryPlan) -> list:
    """The bytes at and after the end of valid data: saved under ``recovery/``, zeroed, and the
    segments after it removed."""
    cl = store.commit_log
    by_name = {os.path.basename(mf.path): mf for mf in cl.queue.files}
    cuts = [dataclasses.replace(c) for c in plan.cuts]
    extents = []
    for c in cuts:
        mf = by_name[c.segment]
        pos = c.offset - mf.file_from_offset
        extents.append((mf, pos, pos + c.length))
    save_cut_bytes(store.path, extents, cuts)
    for mf, pos, stop in extents:
        mf.zero_from(pos, stop)
        mf.flush(0)
    cl.queue.truncate_dirty_files(plan.end_offset)
    for mf in cl.queue.files:
        mf.flushed_position = mf.wrote_position
    cl.confirm_offset = cl.flushed_offset = plan.end_offset
    return cuts


def settle_checkpoint(store: StoreParts, plan: RecoveryPlan) -> None:
    """The checkpoint (in memory) for the end of valid data: a cut record's store time must not
    stay in it."""
    cpv = store.checkpoint.values
    if plan.last_valid_offset >= 0:
        cpv.confirm_phy_offset = plan.last_valid_offset
    if plan.records:
        cpv.physic_msg_timestamp = min(cpv.physic_msg_timestamp, plan.max_store_timestamp)
        cpv.logics_msg_timestamp = min(cpv.logics_msg_timestamp, plan.max_store_timestamp)


def _cut_index_files(store: StoreParts, plan: RecoveryPlan, rebuilt: list[str]) -> int:
    """Index files of ``plan.index_cuts``: upstream deletes those newer than the checkpoint after
    a crash (and loses their entries for records before the recovery point). Here they are cut
    back to the recovery point and kept; the re-dispatch adds the rest (the names of the files
    that lost items are added to ``rebuilt``). Returns where the re-dispatch must start for the
    index."""
    ts_at = store_ts_reader(store.commit_log.queue.files)
    prev_end = (0, 0)
    out = []
    for f in plan.index_files:
        if f.name in plan.index_cuts:
            # a record whose keys spill from the previous file into this one keeps them here
            limit = max(plan.index_cut_to, prev_end[0] + 1) if out else plan.index_cut_to
            point = index_cut_point(f, limit)
            kept, _, upper = point
            if kept <= 1:
                # no item left: removed whole (its header may still carry the end of a file cut
                # back or removed before it); the index creates a fresh current file when needed
                if upper > 1:
                    rebuilt.append(f.name)
                f.destroy()
                continue
            if truncate_index_file(f, limit, ts_at, prev_end, point):
                rebuilt.append(f.name)
                f.flush()
        out.append(f)
        prev_end = (f.end_phy, f.end_ts)
    store.index_service.adopt(out)
    return complete_split_record(store, plan.index_cut_to)


def settle_queues(store: StoreParts, plan: RecoveryPlan, report: RecoveryReport) -> None:
    """Every queue's max offset in the commitlog's table and its min offset; the queues that lost
    units reported."""
    cl = store.commit_log
    before = {(t, q): n for t, q, n in plan.queue_ends}
    for key, cq in store.consume_queues.items():
        cl.topic_queue_table[(cq.topic, cq.queue_id)] = cq.max_offset
        cq.correct_min_offset(cl.min_offset)
        if cq.max_offset < before.get(key, 0):
            report.consume_queues_truncated.append(f"{cq.topic}/{cq.queue_id}")


def redispatch_records(store: StoreParts, start: int, end: int) -> int:
    """Dispatch the records in ``[start, end)`` to the consume queues and the index. Corrupt
    records whose framing is intact get their unit (reads refuse them); a record lost to
    corruption leaves a queue-offset gap, which is filled with units pointing at the corrupt
    bytes so that the queue's later units keep their offsets. Returns the records dispatched."""
    if start >= end:
        return 0
    topic_cache: dict[bytes, str] = {}
    spans: list[CorruptSpan] = []
    count = 0

    def on_batch(mf, batch) -> None:
        nonlocal count
        if spans:
            D.pad_gaps(store, mf, batch, spans, topic_cache, store.consume_queues.get)
        D.dispatch_batch(mf.u8, batch, D.DispatchTarget(store.find_consume_queue, store.index_service,
                                                        store.delay_levels_ms, topic_cache,
                                                        build_index=store.cfg.message_index_enable))
        store.on_dispatched(int(batch.store_timestamp[-1]))
        count += len(batch)

    def on_corrupt(span) -> None:
        if span.kind == "record_invalid":
            spans.append(span)

    scan_log(store.commit_log.queue.files, start, store.cfg, check_crc=False, limit_phy=end, on_batch=on_batch,
             dispatchable=True, on_corrupt=on_corrupt)
    return count
