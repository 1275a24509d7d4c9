"""A writer's recovery after a crash in one walk of the commitlog.

:func:`.plan.plan_recovery` then :func:`.apply.apply_recovery` walk the records twice: the plan's
validating scan (CRC checks) finds the end of valid data, and the apply's re-dispatch walks the
same records again to rebuild the consume queues and the index from the scan start. After a crash
neither the queue cuts nor the index cuts depend on what the scan finds: both are at the scan
start (:func:`.plan.plan_before_scan`). So a writer cuts them first and dispatches each batch of
records as the scan validates it (:func:`recover_after_crash`).

The result is the two-pass one, file for file. Records are dispatched only while the data is
clean: at the first corrupt span the dispatch stops where the clean records end, and after the
scan the two-pass re-dispatch (:func:`.apply.redispatch_records`, with its queue-offset padding
and dispatch of framed records whose CRC fails) takes over from there. It walks the same
records from the same offset as the two-pass one would, because everything before that offset
is valid records, which both dispatch alike. A record failing its CRC at the end of the data is
never dispatched: it is the torn tail, past the end.

Two things make the walk fast: the consume queues' record offsets, read before the queues are
cut, are the walk's hints (:class:`.queues.QueueHints`; the cursor checks each one, so wrong or
missing hints cost time, never a different answer), and each batch is dispatched on a worker
thread while the scan validates the next one (:class:`CleanDispatch`).

Not taken (the two passes run instead) when the plan is not after a crash, when an index file is
full (the record that filled it may need its keys again in the next file, from before the scan
start: :func:`.index_repair.complete_split_record`), or when retention has moved the commitlog's
start past the scan start.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from ...format import message as M
from .. import dispatch as D
from ..contract import StoreParts
from .apply import (cut_commitlog, cut_derived_files, flush_derived_files, redispatch_records, report_of,
                    settle_checkpoint, settle_queues)
from .plan import RecoveryPlan, finish_plan
from .queues import QueueHints
from .report import CorruptSpan, RecoveryReport
from .scan import scan_log


def recover_after_crash(store: StoreParts, pre: RecoveryPlan) -> tuple[RecoveryPlan, RecoveryReport]:
    """The plan and report of :func:`.plan.plan_recovery` + :func:`.apply.apply_recovery` for a
    writer, with one walk of the commitlog: ``pre`` is :func:`.plan.plan_before_scan`'s plan, for
    which :func:`one_pass_applies` holds (so the re-dispatch starts at the scan start)."""
    hints = QueueHints(store, pre.start_offset)  # (read before the queues are cut)
    rebuilt: list[str] = []
    redispatch_from = cut_derived_files(store, pre, rebuilt)
    sink = CleanDispatch(store, redispatch_from)
    cfg = store.cfg
    try:
        scan = scan_log(store.commit_log.queue.files, pre.start_offset, cfg, check_crc=cfg.check_crc_on_recover,
                        on_batch=sink.batch, on_corrupt=sink.corrupt, hints=hints)
    finally:
        sink.close()
    plan = finish_plan(store, pre, scan)
    report = report_of(plan, applied=True)
    report.index_files_rebuilt = rebuilt
    report.cuts = cut_commitlog(store, plan)
    settle_checkpoint(store, plan)
    report.redispatch_from = redispatch_from
    report.records_redispatched = sink.count + redispatch_records(store, sink.end, plan.end_offset)
    flush_derived_files(store)
    settle_queues(store, plan, report)
    return plan, report


def one_pass_applies(store: StoreParts, pre: RecoveryPlan) -> bool:
    """Whether :func:`recover_after_crash` can take ``pre`` (see the module's description)."""
    return (pre.abnormal and not any(f.is_write_full for f in pre.index_files)
            and max(pre.redispatch_from, store.commit_log.min_offset) == pre.start_offset)


class CleanDispatch:
    """The scan's valid batches dispatched to the consume queues and the index until the first
    corrupt span; :attr:`end` is where the dispatched records end, :attr:`count` how many.

    A batch is dispatched on a worker thread while the scan validates the next one (the numpy
    work of each releases the GIL for much of its time); one batch at a time, in order. Call
    :meth:`close` after the scan: it waits for the last batch and raises what a dispatch raised."""

    def __init__(self, store: StoreParts, start: int) -> None:
        self.store = store
        self.end = start
        self.count = 0
        self.clean = True
        self.target = D.DispatchTarget(store.find_consume_queue, store.index_service, store.delay_levels_ms, {},
                                       build_index=store.cfg.message_index_enable)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="rmqstore-recovery-dispatch")
        self._pending: Future | None = None

    def batch(self, mf, batch: M.RecordBatch) -> None:
        if not self.clean:
            return
        self._wait()
        self._pending = self._worker.submit(self._dispatch, mf, batch)
        self.count += len(batch)
        self.end = mf.file_from_offset + int(batch.starts[-1] + batch.total[-1])

    def corrupt(self, span: CorruptSpan) -> None:
        self.clean = False

    def close(self) -> None:
        try:
            self._wait()
        finally:
            self._worker.shutdown()

    def _dispatch(self, mf, batch: M.RecordBatch) -> None:
        D.dispatch_batch(mf.u8, batch, self.target)
        self.store.on_dispatched(int(batch.store_timestamp[-1]))

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()
