"""Startup recovery of the commitlog (mirrors ``CommitLog#recoverNormally``/``recoverAbnormally``),
and the log-scanning primitives that recovery, :mod:`..verify` and read-only refresh share.

1. Choose the start segment (FORMAT.md §9.2).
2. Scan records with CRC checks (:func:`scan_log`) to the end of valid data ``E``.
3. Keep the evidence: bytes after ``E`` (the torn or corrupt tail, and later segments) are copied to
   ``recovery/<segment>.<n>.cut`` before the commitlog is cut; a :class:`RecoveryReport` says what
   was cut, where and why.
4. Consume queues are truncated; everything after the recovery point is re-dispatched.

What a valid record is (stricter than upstream, which checks magic, the length formula and the
body CRC): also ``PHYSICALOFFSET`` equal to the record's position, and, when present, a non-zero
last byte of TOPIC and of PROPERTIES. A record torn by a crash or a lost page keeps its header but
has zeros where its last bytes should be; upstream's checks miss a tear that falls after the body.

Beyond upstream:

* **Corruption in the middle is not a tail.** Upstream stops at the first bad record and deletes
  everything after it. Here a bad record is skipped when an intact record follows it (found by its
  magic and ``PHYSICALOFFSET`` within one maximal record length, or at the next segment start):
  the bad bytes stay in place, are reported (:class:`CorruptSpan`) and are never served; the
  acknowledged messages after them survive. Only a bad region with nothing valid after it is a torn
  tail and is cut.
* **The index keeps its entries.** After a crash upstream deletes the index files newer than the
  checkpoint (quirk 15.14); here their tail beyond the recovery point is cut
  (:func:`truncate_index_file`) and rebuilt by the re-dispatch.

The package, as plan then apply: :mod:`.plan` computes a :class:`RecoveryPlan` from the files
(steps 1-2 and what steps 3-4 will cut and re-dispatch) without changing a byte; a writer applies
it (:func:`apply_recovery`), a reader applies it to its in-memory view only
(:func:`apply_read_view`), so a read-only open reports what a recovery would do. After a crash a
writer does both in one walk of the log (:mod:`.one_pass`: the cuts, which need no scan then, first;
the records dispatched as the scan validates them), with the same plan and files. The record walk
is :mod:`.scan` (one piece, shared with verify and read-only refresh); :mod:`.records` says what a
valid record is and where valid data continues; :mod:`.tails`, :mod:`.queues`,
:mod:`.index_tail` and :mod:`.index_repair` cut the commitlog tail, the consume queues and the
index files; :mod:`.view` is a reader's view, :mod:`.follow` a reader following a live writer;
:mod:`.report` what a recovery reports.
"""
from __future__ import annotations

import time

# (order matters: engine.dispatch imports find_resync from this package while it is loading)
from .report import CorruptSpan, RecoveryReport, TailCut
from .records import MAX_RESYNC_CANDIDATES, find_resync, max_record_size, record_ok_at
from .scan import SCAN_BATCH, ScanOptions, ScanResult, scan_log, walk_log
from .tails import describe_cuts, save_cut_bytes, tail_extents
from .queues import (QueueHints, cut_queue, last_real_unit_end, match_units, narrow_queue_view, queue_cut_point,
                     validated_unit_end)
from .index_tail import store_ts_reader, truncate_index_file
from .index_repair import complete_split_record, index_end, index_end_of, keyed_records_in
from .view import first_unit_at_or_after, really_corrupt, set_read_positions, validate_read_views, view_end
from .follow import follow_writer, refresh_index
from .plan import RecoveryPlan, choose_start_segment, finish_plan, plan_before_scan, plan_from_scan, plan_recovery
from .apply import apply_read_view, apply_recovery, redispatch_records
from .one_pass import one_pass_applies, recover_after_crash

__all__ = [
    "CorruptSpan", "RecoveryReport", "TailCut", "MAX_RESYNC_CANDIDATES", "find_resync",
    "max_record_size", "record_ok_at", "SCAN_BATCH", "ScanOptions", "ScanResult", "scan_log",
    "walk_log", "describe_cuts", "save_cut_bytes", "tail_extents", "QueueHints", "cut_queue",
    "last_real_unit_end", "match_units", "narrow_queue_view", "queue_cut_point",
    "validated_unit_end", "store_ts_reader", "truncate_index_file", "complete_split_record", "index_end",
    "index_end_of", "keyed_records_in", "first_unit_at_or_after", "really_corrupt", "set_read_positions",
    "validate_read_views", "view_end", "RecoveryPlan", "choose_start_segment", "plan_recovery",
    "apply_read_view", "apply_recovery", "redispatch_records", "one_pass_applies", "recover_after_crash", "plan_before_scan",
    "plan_from_scan", "finish_plan", "now", "follow_writer", "refresh_index",
]


def now() -> float:
    return time.monotonic()
