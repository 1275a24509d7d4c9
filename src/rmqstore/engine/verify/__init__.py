"""Store verification: :func:`verify` checks a store and returns :class:`Finding` objects;
:func:`repair` applies the repairs they carry (``MessageStore.verify`` / ``MessageStore.repair``).

A finding names a file and a byte offset *inside that file* (for a commitlog segment, whose name is
its first phy offset, the phy offset is ``int(name) + offset``), so ``path`` + ``offset`` always
locate the bytes. ``verify`` never raises for damage it finds and never writes; it returns the list
(empty when the store is sound). Kinds (:data:`KINDS`):

``record_crc``
    A commitlog record whose framing is intact but whose body CRC (or, with
    ``forceVerifyPropCRC``, properties CRC) fails, or whose end is zero-filled (a torn write).
``record_invalid``
    Bytes inside the valid data that do not form a record at all (bad magic, length or
    PHYSICALOFFSET); valid records follow them.
``cq_unit``
    A consume-queue unit that does not point at a complete record of its topic, queue id, queue
    offset and size, or whose tagsCode differs from the one the record's TAGS give.
``cq_gap``
    Queue offsets with no unit (records of the queue in the commitlog beyond the queue's last unit),
    or queue offsets that jump between consecutive records of a queue in the commitlog.
``index_item``
    An index item that points at no record, at a record without that key, with a time that does
    not match the record, or outside its hash chain; or a keyed record the index cannot find.
``checkpoint_ahead``
    A checkpoint value beyond the data: confirmPhyOffset past the last valid record,
    physicMsgTimestamp / logicsMsgTimestamp past the newest record's store time, indexMsgTimestamp
    past the newest index file.
``tail_garbage``
    Non-zero bytes after the end of valid data (what a recovery cuts).

Each finding carries its repairs (``Finding.repairs``, typed: :class:`RebuildQueue`,
:class:`RebuildIndex`, :class:`LowerCheckpoint`, :class:`CutTail`). :func:`repair` (a writer only)
rebuilds from the commitlog the consume queues and the index that findings name
(:func:`rebuild_derived`, the same dispatch code as the writer), rewrites a checkpoint that is
ahead, and cuts tail garbage (saving it under ``recovery/`` as recovery does). Damaged commitlog
records cannot be rebuilt: they carry no repair, stay ``fixed=False``, and reads refuse them.

The checks, each usable on its own (the Spark verify runs them per task): :class:`LogChecks` (per
batch of commitlog records) and :func:`check_commitlog` (the walk), :func:`check_consume_queues`,
:func:`check_index` / :func:`check_index_file`, :func:`check_checkpoint`, :func:`check_tail`; they
share a :class:`VerifyContext` (the store, a :class:`Snapshot`, the :class:`FindingLog`) and judge
against the :class:`LogFacts` the walk found.

Limits: at most :data:`MAX_PER_KIND` findings of a kind are listed (then one summary finding, which
carries the repairs of those not listed); the index check holds the phy offsets and hashes of all
index items and of all keys of the scanned records in memory (16 bytes each).
"""
from __future__ import annotations

from .context import LogFacts, Progress, Snapshot, VerifyContext, by_segment, file_pos, work_bytes
from ..dispatch import pad_gaps
from .derived import (DerivedFiles, build_derived, rebuild_derived, shadow_derived,
                      shadow_queue_tails)
from .findings import (KINDS, MAX_PER_KIND, CutTail, Finding, FindingLog, LowerCheckpoint, RebuildIndex,
                       RebuildQueue, Repair, not_listed)
from .index_checks import (check_index, check_index_coverage, check_index_file, index_file_problems,
                           missing_key_finding)
from .log_checks import LogChecks, check_commitlog, corrupt_finding, gap_finding, walk_commitlog
from .queue_checks import check_consume_queues
from .repairs import RepairPlan, repair
from .state_checks import check_checkpoint, check_tail
from .verifier import Verifier, verify

__all__ = [
    "KINDS", "MAX_PER_KIND", "Finding", "FindingLog", "Repair", "RebuildQueue", "RebuildIndex", "LowerCheckpoint",
    "CutTail", "not_listed", "file_pos", "by_segment", "work_bytes", "Progress", "Snapshot", "LogFacts",
    "VerifyContext", "LogChecks", "walk_commitlog", "check_commitlog", "corrupt_finding", "gap_finding",
    "check_consume_queues", "check_index", "check_index_file", "check_index_coverage", "missing_key_finding",
    "index_file_problems", "check_checkpoint", "check_tail", "Verifier", "verify", "RepairPlan", "repair",
    "DerivedFiles", "build_derived", "rebuild_derived", "shadow_derived", "shadow_queue_tails",
    "pad_gaps",
]
