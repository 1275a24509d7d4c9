"""Retention: deleting expired commitlog segments, then the consume-queue and index files whose
data is gone (mirrors ``CleanCommitLogService`` + ``CleanConsumeQueueService``, FORMAT.md §10).

Upstream rules kept:

* Deletion runs when the local hour is one of ``deleteWhen`` (``"04"``, ``"01;13"``), when the disk
  is fuller than ``diskMaxUsedSpaceRatio``, or when asked (``force=True``: upstream's manual
  trigger, which skips the hour test but not the age test).
* Disk use of the commitlog and consume-queue filesystems, ``ceil(used*100/(used+available))/100``:
  past ``diskSpaceCleanForciblyRatio`` (clamped to [0.30, 0.85]) files are deleted whatever their
  age (``cleanFileForciblyEnable``); past ``diskSpaceWarningLevelRatio`` ([0.35, 0.90]) the store is
  marked *disk full* and refuses puts (``SERVICE_NOT_AVAILABLE``) until space returns.
* Commitlog segments are deleted in order, never the last one, stopping at the first one that is
  not expired (``file mtime + fileReservedTime`` hours), at most ``deleteFileBatchMax`` per run.
* Consume-queue files (never a queue's last) are deleted while their *last* unit points below the
  new commitlog minimum, then each queue's min offset is corrected; index files (never the last)
  while their end offset is below it. Reads below the min offsets answer ``OFFSET_TOO_SMALL``.

Beyond upstream: ``MessageStoreConfig.retain_unconsumed_groups`` names consumer groups whose
unconsumed messages are kept. Their committed offsets are read from ``config/consumerOffset.json``
(the broker's file: ``{"offsetTable": {"topic@group": {queueId: nextOffset}}}``, integer keys
unquoted as fastjson writes them). A segment is kept while it holds a message at or after the
smallest committed position of those groups, unless the disk is past the warning level (then
upstream's forced deletion wins, and the result says what was lost). A named group with no
committed offset at all keeps everything (its subscriptions are unknown).

Deleted files are unlinked at once; their mappings stay open for a few seconds for readers that
still hold them (``MessageStore.retire``), so the space is freed shortly after.
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field

from ..config import EMBEDDED
from .consumer_offsets import CONSUMER_OFFSET_FILE, parse_broker_json, read_offset_file  # noqa: F401 - re-exported
from ..errors import ConfigError, CorruptRecordError, ReadOnlyStoreError
from ..format import consume_queue as CQF
from ..io import paths

log = logging.getLogger(__name__)

#: upstream cleanResourceInterval (10 s) and its first delay (60 s); not configurable here
CLEAN_INTERVAL_S = 10.0
FIRST_CLEAN_DELAY_S = 60.0


@dataclass
class CleanResult:
    """What a retention run deleted (or, with ``dry_run``, would delete) and why."""

    commitlog_files: list[str]
    consume_queue_files: list[str]
    index_files: list[str]
    reason: str
    dry_run: bool
    #: a trigger was on: deleteWhen hour, disk space, or force
    triggered: bool = False
    #: disk past diskSpaceCleanForciblyRatio: files deleted whatever their age
    clean_immediately: bool = False
    #: disk past diskSpaceWarningLevelRatio: puts are refused until space returns
    disk_full: bool = False
    #: highest used ratio of the commitlog and consume-queue filesystems (0..1)
    disk_used_ratio: float = 0.0
    min_offset_before: int = 0
    min_offset_after: int = 0
    bytes_freed: int = 0
    #: commitlog offset from which segments are kept for ``retain_unconsumed_groups`` (None: none)
    retained_from: int | None = None
    #: expired segments kept because they hold messages those groups have not consumed
    retained_files: list[str] = field(default_factory=list)
    #: segments deleted although those groups had not consumed them (disk past the warning level)
    unconsumed_deleted: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------
# Inputs: disk usage, the hour, consumer offsets
# ------------------------------------------------------------------------------------------------

def _statvfs(path: str):
    """``os.statvfs`` of the filesystem holding ``path`` (its nearest existing ancestor); None when
    it cannot be read."""
    p = path
    while p and not os.path.exists(p):
        p = os.path.dirname(p)
    try:
        return os.statvfs(p or "/")
    except OSError:
        return None


def disk_used_ratio(path: str) -> float:
    """Upstream ``UtilAll.getDiskPartitionSpaceUsedPercent``: ``ceil(used*100/(used+avail))/100``
    of the filesystem holding ``path`` (-1 when it cannot be read)."""
    st = _statvfs(path)
    if st is None:
        return -1.0
    total = st.f_blocks * st.f_frsize
    free = st.f_bfree * st.f_frsize
    avail = st.f_bavail * st.f_frsize
    used = total - free
    if used + avail <= 0:
        return -1.0
    return math.ceil(used * 100 / (used + avail)) / 100


def disk_free_bytes(path: str) -> int:
    """Bytes available to this user on the filesystem holding ``path`` (-1 when it cannot be read)."""
    st = _statvfs(path)
    return -1 if st is None else st.f_bavail * st.f_frsize


def _clamp(v: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, v))


def delete_hours(delete_when: str) -> set[int]:
    out = set()
    for tok in str(delete_when).split(";"):
        tok = tok.strip()
        if tok:
            try:
                out.add(int(tok))
            except ValueError as e:
                raise ConfigError(f"deleteWhen: {tok!r} is not an hour (expected e.g. \"04\" or \"01;13\")") from e
    return out


def read_consumer_offsets(store_dir: str) -> dict[str, dict[int, int]] | None:
    """``{"topic@group": {queue_id: next offset to consume}}`` from ``config/consumerOffset.json``
    (falling back to its ``.bak`` copy); None when neither exists."""
    return read_offset_file(os.path.join(store_dir, CONSUMER_OFFSET_FILE))


def retained_from(store) -> tuple[int | None, str]:
    """Smallest commitlog offset still unconsumed by ``retain_unconsumed_groups`` (None: nothing
    to keep for them) and a sentence saying why."""
    groups = tuple(store.cfg.retain_unconsumed_groups)
    if not groups:
        return None, ""
    offsets = read_consumer_offsets(store.path) or {}
    have = {k.partition("@")[2] for k in offsets}
    missing = [g for g in groups if g not in have]
    cl = store.commit_log
    if missing:
        return cl.min_offset, f"consumer group(s) {', '.join(missing)} have no committed offsets: everything is kept"
    keep: int | None = None
    why = ""
    for key, table in offsets.items():
        topic, _, group = key.partition("@")
        if group not in groups:
            continue
        for qid, off in table.items():
            cq = store.consume_queues.get((topic, qid))
            if cq is None or off >= cq.max_offset:
                continue
            unit = cq.get_unit(max(off, cq.min_offset))
            if unit is not None and (keep is None or unit[0] < keep):
                keep = int(unit[0])
                why = f"{group} has not consumed {topic}/{qid} from offset {off}"
    return keep, why


# ------------------------------------------------------------------------------------------------
# Planning and deleting
# ------------------------------------------------------------------------------------------------

def _space(store) -> tuple[float, bool, bool, bool]:
    """(used ratio, over diskMaxUsedSpaceRatio, clean immediately, disk full).

    The embedded disk policy never deletes because of usage (never over, never immediate) and is
    full only when the free bytes would not hold the next commitlog segment, consume-queue file
    and index file."""
    cfg = store.cfg
    dirs = [paths.commitlog_dir(store.path), paths.consume_queue_dir(store.path)]
    ratios = [disk_used_ratio(p) for p in dirs]
    ratio = max(ratios)
    if cfg.disk_policy == EMBEDDED:
        need = cfg.mapped_file_size_commit_log + cfg.cq_file_size + cfg.index_file_size
        free = min(disk_free_bytes(p) for p in dirs)
        return ratio, False, False, 0 <= free < need
    warning = _clamp(cfg.disk_space_warning_level_ratio / 100, 0.35, 0.90)
    forcibly = _clamp(cfg.disk_space_clean_forcibly_ratio / 100, 0.30, 0.85)
    max_used = _clamp(cfg.disk_max_used_space_ratio, 10, 95) / 100
    full = ratio > warning
    immediate = ratio > forcibly
    over = immediate or ratio > max_used or ratio < 0
    return ratio, over, immediate, full


def clean_expired(store, now_ms: int | None = None, dry_run: bool = True, force: bool = False) -> CleanResult:
    """One retention run (see the module doc). ``dry_run`` only plans; ``force`` is the manual
    trigger. Deleting needs a writer; a dry run works on a read-only store too."""
    if not dry_run and store.read_only:
        raise ReadOnlyStoreError("deleting files needs the store opened for writing (use dry_run=True)",
                                 path=store.path)
    cfg = store.cfg
    now_ms = int(time.time() * 1000) if now_ms is None else int(now_ms)
    cl = store.commit_log
    with store.maintenance_lock:
        ratio, over, immediate, full = _space(store)
        hour = time.localtime(now_ms / 1000).tm_hour
        time_up = cfg.time_based_retention and hour in delete_hours(cfg.delete_when)
        triggers = [t for t, on in (("deleteWhen hour", time_up), ("disk space", over), ("forced", force)) if on]
        res = CleanResult([], [], [], "", dry_run, bool(triggers), immediate and cfg.clean_file_forcibly_enable,
                          full, ratio, cl.min_offset, cl.min_offset)
        if not dry_run:
            if full and not store.disk_full:
                log.error("%s: disk %.0f%% used, past diskSpaceWarningLevelRatio: puts are refused", store.path,
                          ratio * 100)
            store.disk_full = full
        if not triggers:
            res.reason = (f"not triggered: hour {hour} is not in deleteWhen {cfg.delete_when!r}, disk "
                          f"{ratio * 100:.0f}% used, not forced")
            plan_cl: list = []
        else:
            plan_cl, why = _plan_commitlog(store, now_ms, res)
            res.reason = f"triggered by {', '.join(triggers)}; {why}"
        files = cl.queue.files
        new_min = plan_cl[-1].file_from_offset + plan_cl[-1].file_size if plan_cl else cl.min_offset
        if files and new_min > files[-1].file_from_offset:
            new_min = files[-1].file_from_offset  # the last segment is never deleted
        res.min_offset_after = new_min
        res.commitlog_files = [mf.path for mf in plan_cl]
        res.bytes_freed = sum(mf.file_size for mf in plan_cl)
        plan_cq = _plan_consume_queues(store, new_min)
        plan_ix = _plan_index(store, new_min)
        res.consume_queue_files = [mf.path for _, mf in plan_cq]
        res.index_files = [f.path for f in plan_ix]
        res.bytes_freed += sum(mf.file_size for _, mf in plan_cq) + sum(f.mf.file_size for f in plan_ix)
        if not dry_run:
            _execute(store, plan_cl, plan_cq, plan_ix, new_min)
            if plan_cl or plan_cq or plan_ix:
                log.info("%s: retention deleted %d commitlog, %d consume-queue and %d index files (%s)", store.path,
                         len(plan_cl), len(plan_cq), len(plan_ix), res.reason)
        return res


def _plan_commitlog(store, now_ms: int, res: CleanResult) -> tuple[list, str]:
    cfg = store.cfg
    files = list(store.commit_log.queue.files)
    reserved_ms = cfg.file_reserved_time * 3_600_000
    forcibly = res.clean_immediately
    keep_from, keep_why = retained_from(store)
    res.retained_from = keep_from
    out = []
    why = "nothing expired"
    for mf in files[:-1]:
        if len(out) >= cfg.delete_file_batch_max:
            why = f"deleteFileBatchMax ({cfg.delete_file_batch_max}) reached"
            break
        age_ok = now_ms >= int(mf.mtime() * 1000) + reserved_ms
        if not (age_ok or forcibly):
            why = f"{os.path.basename(mf.path)} is not expired (fileReservedTime {cfg.file_reserved_time} h)"
            break
        if keep_from is not None and mf.file_from_offset + mf.file_size > keep_from:
            if res.disk_full:
                res.unconsumed_deleted.append(mf.path)
            else:
                res.retained_files.append(mf.path)
                why = f"kept for retain_unconsumed_groups: {keep_why}"
                break
        out.append(mf)
    else:
        if out:
            why = "every expired segment but the last"
    if out:
        why = f"{len(out)} segment(s) {'forcibly' if forcibly and res.disk_used_ratio >= 0 else 'expired'}; " + why
    if res.unconsumed_deleted:
        why += (f"; disk past the warning level: {len(res.unconsumed_deleted)} segment(s) with messages not consumed "
                f"by {', '.join(store.cfg.retain_unconsumed_groups)} deleted")
    return out, why


def _last_unit_phy(mf) -> int | None:
    n = mf.wrote_position // CQF.UNIT_SIZE
    if n <= 0:
        return None
    return CQF.UNIT.unpack_from(mf.mm, (n - 1) * CQF.UNIT_SIZE)[0]


def _plan_consume_queues(store, min_phy: int) -> list:
    out = []
    for cq in list(store.consume_queues.values()):
        files = list(cq.queue.files)
        for mf in files[:-1]:
            last = _last_unit_phy(mf)
            if last is None or last >= min_phy:
                break
            out.append((cq, mf))
    return out


def _plan_index(store, min_phy: int) -> list:
    svc = store.index_service
    with svc.lock:
        files = list(svc.files)
    out = []
    if not files or files[0].end_phy >= min_phy:
        return out
    for f in files[:-1]:
        if f.end_phy >= min_phy:
            break
        out.append(f)
    return out


def _execute(store, plan_cl, plan_cq, plan_ix, new_min: int) -> None:
    cl = store.commit_log
    for mf in plan_cl:
        cl.queue.delete_first(mf, keep_mapped=True)
        store.retire(mf)
    touched = []
    for cq, mf in plan_cq:
        cq.queue.delete_first(mf, keep_mapped=True)
        store.retire(mf)
        touched.append(cq)
    for cq in store.consume_queues.values():
        cq.correct_min_offset(new_min)
    svc = store.index_service
    with svc.lock:
        for f in plan_ix:
            if f in svc.files and f is not svc.files[-1]:
                svc.files.remove(f)
                f.mf.unlink()
                store.retire(f)


def run_periodic(store) -> None:
    """The background run (every ``CLEAN_INTERVAL_S`` after ``FIRST_CLEAN_DELAY_S``)."""
    res = clean_expired(store, dry_run=False)
    if res.unconsumed_deleted:
        log.error("%s: disk past the warning level, deleted segments holding unconsumed messages: %s", store.path,
                  ", ".join(res.unconsumed_deleted))
