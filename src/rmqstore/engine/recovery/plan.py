"""Recovery, first step: what a recovery of the store's files does, computed from them without
changing a byte (:func:`plan_recovery`, a :class:`RecoveryPlan`). A writer then applies it
(:func:`.apply.apply_recovery`); a reader applies it to its in-memory view only
(:func:`.apply.apply_read_view`). Both compute the same plan from the same files."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ...format import message as M
from ...format.checkpoint import CheckpointValues
from ..contract import StoreParts
from .index_repair import index_end
from .queues import QueueHints, queue_cut_point
from .records import max_record_size, record_ok_at
from .report import CorruptSpan, TailCut
from .scan import ScanResult, scan_log
from .tails import describe_cuts, tail_extents


@dataclass(frozen=True)
class RecoveryPlan:
    """What a recovery of a store does, computed from its files (see :func:`plan_recovery`)."""

    mode: str                           #: "normal" (clean shutdown) / "abnormal" (abort file) / "empty"
    checkpoint: CheckpointValues        #: the checkpoint as read (its timestamps choose the start segment)
    dispatch_from: int                  #: end of the consume queues' last units (-1: no unit)
    queue_ends: tuple[tuple[str, int, int], ...] = ()  #: (topic, queueId, max offset) before recovery
    # --- the commitlog ----------------------------------------------------------------------------
    start_offset: int = 0               #: first byte scanned (the start segment's first byte)
    end_offset: int = 0                 #: E, the end of valid data: the commitlog is cut here
    end_reason: str = "end of data"     #: why the valid data ends at E
    last_valid_offset: int = -1         #: start of the last valid record (the checkpoint's confirm offset)
    records: int = 0                    #: valid records scanned
    max_store_timestamp: int = 0        #: the newest store time among them
    corrupt: tuple[CorruptSpan, ...] = ()  #: bad bytes inside the valid data (kept in place)
    cuts: tuple[TailCut, ...] = ()      #: non-zero bytes at or after E (saved under recovery/, zeroed)
    # --- the consume queues -----------------------------------------------------------------------
    queue_cut_to: int = 0               #: units pointing at or past this offset are cut
    queue_cuts: tuple[tuple[str, int, int], ...] = ()  #: (topic, queueId, new max offset)
    redispatch_from: int = 0            #: records from here are dispatched again
    # --- the index --------------------------------------------------------------------------------
    index_dropped: tuple[str, ...] = ()  #: files newer than the checkpoint after a crash (upstream deletes them)
    index_cuts: tuple[str, ...] = ()    #: files whose items from ``index_cut_to`` on are cut
    index_cut_to: int = 0
    index_catch_up_from: int | None = None  #: an index behind the queues (its newest file lost) catches up from here
    #: every index file (the service's and the dropped ones), by name: what the apply step works on
    index_files: tuple = field(default=(), compare=False, repr=False)

    @property
    def abnormal(self) -> bool:
        return self.mode == "abnormal"

    def describe(self) -> str:
        """One line: what the recovery does."""
        s = (f"{self.mode} recovery plan: valid data [{self.start_offset}, {self.end_offset}) ({self.end_reason}), "
             f"{self.records} records")
        s += "".join(f"; cut {c.length} bytes at {c.offset} in {c.segment}" for c in self.cuts)
        s += f"; {len(self.corrupt)} corrupt spans kept" if self.corrupt else ""
        s += f"; {len(self.queue_cuts)} consume queues cut at {self.queue_cut_to}" if self.queue_cuts else ""
        s += f"; index files {', '.join(self.index_cuts)} cut at {self.index_cut_to}" if self.index_cuts else ""
        if self.index_catch_up_from is not None:
            s += f"; index catches up from {self.index_catch_up_from}"
        return s + f"; dispatch again from {self.redispatch_from}"


def plan_recovery(store: StoreParts, last_exit_ok: bool, dropped_index: list) -> RecoveryPlan:
    """The plan for ``store``'s files as loaded (consume queues recovered to their own ends):
    ``last_exit_ok`` when there was no ``abort`` file; ``dropped_index``: the index files the
    index service did not load (newer than the checkpoint after a crash)."""
    return plan_from_scan(store, plan_before_scan(store, last_exit_ok, dropped_index))


def plan_from_scan(store: StoreParts, pre: RecoveryPlan) -> RecoveryPlan:
    """:func:`plan_before_scan`'s plan completed by the validating scan of the commitlog."""
    if pre.mode == "empty":
        return pre
    cfg = store.cfg
    return finish_plan(store, pre, scan_log(store.commit_log.queue.files, pre.start_offset, cfg,
                                            check_crc=cfg.check_crc_on_recover,
                                            hints=QueueHints(store, pre.start_offset)))


def plan_before_scan(store: StoreParts, last_exit_ok: bool, dropped_index: list) -> RecoveryPlan:
    """The part of the plan that needs no scan of the commitlog: the mode, the start of the scan
    and, after a crash, the consume-queue and index cuts (both at the scan start, which is where
    the re-dispatch starts). :func:`finish_plan` adds the scan's answers; a writer after a crash
    may apply the cuts first and dispatch during the scan (:mod:`.one_pass`)."""
    cqs = store.consume_queues
    files = store.commit_log.queue.files
    cfg = store.cfg
    plan = RecoveryPlan(
        mode="empty" if not files else ("normal" if last_exit_ok else "abnormal"),
        checkpoint=dataclasses.replace(store.checkpoint.values),
        dispatch_from=max((cq.max_physic_offset for cq in cqs.values()), default=-1),
        queue_ends=tuple((t, q, cq.max_offset) for (t, q), cq in cqs.items()),
        index_dropped=tuple(f.name for f in dropped_index),
        index_files=tuple(sorted(set(store.index_service.files) | set(dropped_index), key=lambda f: f.name)))
    if not files:
        return _plan_index(store, plan)
    cp = plan.checkpoint
    start_i = choose_start_segment(files, cfg, normal=plan.mode == "normal", dispatch_from_phy=plan.dispatch_from,
                                   min_timestamp=cp.min_timestamp, index_msg_timestamp=cp.index_msg_timestamp)
    start_phy = files[start_i].file_from_offset
    plan = dataclasses.replace(plan, start_offset=start_phy, end_offset=start_phy)
    if plan.abnormal:  # (a scan never ends before its start: the cuts are at the start whatever it finds)
        plan = _plan_index(store, _with_queue_cuts(store, plan, start_phy, start_phy))
    return plan


def finish_plan(store: StoreParts, pre: RecoveryPlan, scan: ScanResult) -> RecoveryPlan:
    """:func:`plan_before_scan`'s plan with the scan's answers: the end of valid data, the tail to
    cut, the corrupt spans kept; after a clean shutdown also the consume-queue and index cuts (at
    the end of valid data)."""
    files = store.commit_log.queue.files
    end = scan.end
    cuts = describe_cuts(tail_extents(files, end, max_record_size(store.cfg) + 4096), scan.reason)
    plan = dataclasses.replace(
        pre, end_offset=end, end_reason=scan.reason, last_valid_offset=scan.last_valid, records=scan.records,
        max_store_timestamp=scan.max_store_timestamp, corrupt=tuple(scan.corrupt), cuts=tuple(cuts))
    if plan.abnormal:
        return plan
    return _plan_index(store, _with_queue_cuts(store, plan, end, min(max(plan.dispatch_from, 0), end)))


def _with_queue_cuts(store: StoreParts, plan: RecoveryPlan, cut_to: int, redispatch: int) -> RecoveryPlan:
    """The consume-queue units pointing at or past ``cut_to`` cut; records from ``redispatch``
    dispatched again (and the index cut there)."""
    queue_cuts = []
    for (topic, qid), cq in store.consume_queues.items():
        new_end = queue_cut_point(cq, cut_to)
        if new_end is not None:
            queue_cuts.append((topic, qid, new_end))
    return dataclasses.replace(plan, queue_cut_to=cut_to, queue_cuts=tuple(queue_cuts), redispatch_from=redispatch,
                               index_cut_to=redispatch)


def _plan_index(store: StoreParts, plan: RecoveryPlan) -> RecoveryPlan:
    """Index files cut back to the re-dispatch start (after a crash: those newer than the
    checkpoint and the newest, which can hold a half-written put; after a clean shutdown whose
    commitlog lost its tail: those covering cut records), or the offset an index behind catches
    up from."""
    svc = store.index_service
    every = plan.index_files
    cuts, cut_to = list(plan.index_dropped), plan.index_cut_to
    if plan.mode != "empty" and every:
        if plan.abnormal and every[-1].name not in plan.index_dropped:
            cuts.append(every[-1].name)
        elif not plan.abnormal:
            # (a new record at a cut record's offset would otherwise be taken as indexed already)
            cuts, cut_to = [f.name for f in svc.files if f.end_phy >= plan.end_offset], plan.end_offset
    catch_up = None
    if not cuts and plan.mode == "normal" and store.cfg.message_index_enable and svc.files:
        catch_up = index_end(store, plan.end_offset)
    return dataclasses.replace(plan, index_cuts=tuple(cuts), index_cut_to=cut_to, index_catch_up_from=catch_up)


def choose_start_segment(files, cfg, *, normal: bool, dispatch_from_phy: int, min_timestamp: int,
                         index_msg_timestamp: int) -> int:
    """Index of the segment to start scanning from (FORMAT.md §9.2)."""
    if not files:
        return 0
    safe = cfg.message_index_enable and cfg.message_index_safe
    lowest = 1 if normal else 0
    for i in range(len(files) - 1, lowest - 1, -1):
        mf = files[i]
        if not record_ok_at(mf, 0, cfg, check_crc=cfg.check_crc_on_recover):
            continue
        (_, _, _, _, _, _, phy, sys_flag, _) = M.HEAD.unpack_from(mf.mm, 0)
        ts = M.I64.unpack_from(mf.mm, M.store_timestamp_pos(sys_flag))[0]
        if ts == 0 or (safe and ts > index_msg_timestamp):
            continue
        if normal and phy <= dispatch_from_phy:
            return i
        if not normal and ts <= min_timestamp:
            return i
    return 0
