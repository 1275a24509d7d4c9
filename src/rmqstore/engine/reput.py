"""The background dispatcher (mirrors ``ReputMessageService``): follows the commitlog from
``reput_from`` to the store's dispatch end, one batch a round, through the commitlog cursor
(:mod:`rmqstore.format.cursor`), and writes each batch with :func:`.dispatch.dispatch_batch`.
Records a producer's batch put left as hints are not walked again."""
from __future__ import annotations

import logging
import threading
import time

import numpy as np

from ..format import cursor as C
from ..format import message as M
from ..format.record import tags_code_of
from . import batch_facts as BF
from .dispatch import (BATCH_RECORDS, COALESCE_S, DispatchTarget, dispatch_batch, dispatch_properties, head_says,
                       index_hashes)
from .recovery import find_resync

log = logging.getLogger("rmqstore.engine.dispatch")

#: rounds up to this many records are dispatched record by record (:meth:`ReputMessageService._dispatch_small`):
#: numpy's fixed cost per call is most of a small round (a broker's rounds hold a few sends each)
SMALL_ROUND = 32
#: with a writer dispatching inline (set_inline), how often this thread looks for records it left behind
SAFETY_NET_S = 0.05


def _contiguous(batch: M.RecordBatch, end_pos: int) -> bool:
    """Each record of ``batch`` ends where the next starts and the last at ``end_pos`` (record
    starts handed over by the producer are checked against the records' own TOTALSIZE)."""
    ends = batch.starts + batch.total
    return bool(len(batch)) and int(ends[-1]) == end_pos and np.array_equal(ends[:-1], batch.starts[1:])


class _SmallRound:
    """A round dispatched record by record with plain ints (no numpy): each record's consume-queue
    unit (grouped by queue) and index items, written together by :meth:`write`."""

    __slots__ = ("store", "levels", "index", "units", "phys", "tss", "flags", "item_rec", "item_hash")

    def __init__(self, store):
        self.store, self.levels = store, store.delay_levels_ms
        self.index = store.index_service if store.cfg.message_index_enable else None
        self.units: dict[tuple[str, int], list] = {}
        self.phys, self.tss, self.flags, self.item_rec, self.item_hash = [], [], [], [], []

    def add(self, rec: tuple, props: dict[str, str]) -> None:
        """One record: ``rec`` starts with ``(phy, total size, queue offset, store time, topic, queue
        id, sysFlag)`` (a put's fact), ``props`` the properties dispatch reads."""
        phy, total, qoff, store_ts, topic, qid, sys_flag = rec[:7]
        tx = sys_flag & M.SYSFLAG_TX_MASK
        if tx != M.TX_PREPARED and tx != M.TX_ROLLBACK:  # (a half or rolled-back message gets no unit)
            tags = tags_code_of(topic, props, store_ts, self.levels) if props else 0
            self.units.setdefault((topic, qid), []).append((qoff, phy, total, tags))
        if self.index is not None and props:
            hashes = index_hashes(topic, props)
            self.item_rec += [len(self.phys)] * len(hashes)
            self.item_hash += hashes
        self.phys.append(phy)
        self.tss.append(store_ts)
        self.flags.append(sys_flag)

    def write(self) -> set[tuple[str, int]]:
        """Write the units by queue, the index items and the dispatch mark; the touched queues."""
        store = self.store
        for (topic, qid), us in self.units.items():
            cq = store.find_consume_queue(topic, qid)
            for u in us:
                cq.put_unit(*u)
        if self.index is not None:
            self.index.build_index_lists(self.phys, self.tss, self.flags, self.item_rec, self.item_hash)
        store.on_dispatched(self.tss[-1])
        return set(self.units)


class ReputMessageService:
    """Background dispatcher: follows the commitlog from ``reput_from`` to the confirm offset."""

    def __init__(self, store, reput_from: int):
        self.store = store
        self.reput_from = reput_from
        self._wake = threading.Event()
        self._urgent = threading.Event()
        self._last_round = 0.0
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._thread: threading.Thread | None = None
        self._topic_cache: dict[bytes, str] = {}
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.inline = False  # (set_inline)

    # --- control -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rmqstore-reput", daemon=True)
        self._thread.start()

    def wake(self, _end: int = 0) -> None:
        """New records (called on every append): dispatched in the next round. Rounds follow each
        other at least ``COALESCE_S`` apart, as upstream's ReputMessageService runs one every
        millisecond: under load a round takes what arrived meanwhile instead of one record each."""
        if not self._wake.is_set():
            self._wake.set()

    def wake_now(self) -> None:
        """Dispatch without waiting out the round interval (someone waits for it)."""
        self._urgent.set()
        self._wake.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._urgent.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def running(self) -> bool:
        """The dispatcher thread is alive (False before :meth:`start`, after :meth:`shutdown`,
        and once an error stopped it: :attr:`error` says which)."""
        t = self._thread
        return t is not None and t.is_alive()

    @property
    def stopped(self) -> bool:
        """:meth:`shutdown` was called (the thread does not come back)."""
        return self._stop.is_set()

    def behind_bytes(self) -> int:
        return max(0, self.store.dispatch_end() - self.reput_from)

    def wait_until(self, offset: int, timeout: float | None = None) -> bool:
        """Block until everything below ``offset`` is dispatched."""
        with self._progress:
            return self._progress.wait_for(lambda: self.reput_from >= offset or self.error is not None, timeout)

    def _run(self) -> None:
        stalled_at = -1
        while not self._stop.is_set():
            if self.inline:  # the writer dispatches after its appends: this thread is the safety net
                woke = self._wake.wait(SAFETY_NET_S)
                if not woke and not self._urgent.is_set():
                    before, stalled_at = stalled_at, self._stalled(stalled_at)
                    if stalled_at < 0 or stalled_at != before:
                        continue
            else:
                self._wake.wait(0.001 if self.reput_from < self.store.dispatch_end() else 0.05)
            self._wake.clear()
            wait = COALESCE_S - (time.monotonic() - self._last_round)
            if wait > 0 and not self._urgent.is_set():
                self._urgent.wait(wait)
            self._urgent.clear()
            try:
                self.do_reput()
                self._last_round = time.monotonic()
            except BaseException as e:  # noqa: BLE001 - surfaced through wait_dispatched
                log.exception("dispatch failed at offset %d", self.reput_from)
                self.error = e
                with self._progress:
                    self._progress.notify_all()
                return

    def set_inline(self, inline: bool) -> None:
        """``True``: a writer dispatches after its appends (:meth:`do_reput` in its own thread), so
        appends do not wake this thread, which then runs a round only when asked (:meth:`wake`,
        :meth:`wake_now`) or when records stayed undispatched for a whole ``SAFETY_NET_S``: it no
        longer polls every millisecond behind the writer, taking the lock and the GIL from it."""
        self.inline = inline
        self.store.commit_log.on_append = None if inline else self.wake

    def _stalled(self, before: int) -> int:
        """(safety net) ``reput_from`` when records wait for dispatch, else -1: a round is due when it
        is the same as at the previous look, ``before`` (the writer did not move it meanwhile)."""
        if self.reput_from >= self.store.dispatch_end():
            return -1
        if self.reput_from == before:
            log.debug("dispatch: records waited %.2f s past %d for the writer's rounds; dispatching them here",
                      SAFETY_NET_S, before)
        return self.reput_from

    # --- work --------------------------------------------------------------------------------
    def hinted_starts(self, mf, pos: int, seg_end: int) -> tuple[tuple[np.ndarray, C.Halt] | None, int]:
        """Record starts for ``mf`` from ``pos`` out of the ones the producer's batch path left in
        ``commit_log.batch_starts``: ``((starts, halt), seg_end)`` as a walk answers, when they begin exactly at
        ``pos`` (consecutive batches up to ``BATCH_RECORDS`` records, none past ``seg_end``),
        otherwise ``(None, where the walk should stop)``: the next handed-over batch, so that
        only records put one at a time are walked. Batches already behind ``pos`` are dropped."""
        hints = self.store.commit_log.batch_starts
        base = mf.file_from_offset
        at = base + pos
        while hints and hints[0][1] <= at:  # only this thread pops: hints[0] stays until it does
            hints.popleft()
        parts, count, limit = [], 0, base + seg_end
        while hints and count < BATCH_RECORDS:
            first, end, starts = hints[0]
            if first != at or end > limit:
                break
            parts.append(starts + (first - base))
            count += len(starts)
            at = end
            hints.popleft()
        if parts:
            return ((parts[0] if len(parts) == 1 else np.concatenate(parts)), C.Halt(C.Stop.LIMIT, at - base)), seg_end
        if hints and at < hints[0][0] < limit:
            return None, hints[0][0] - base
        return None, seg_end

    def _resync(self, mf, bad: int, end: int) -> int:
        """Where dispatch goes on after an invalid record at commitlog offset ``bad``: the next intact
        record (MAGIC + PHYSICALOFFSET, the recovery's resync rule), else the end of readable data."""
        cl = self.store.commit_log
        files = cl.queue.files
        found = find_resync(files, files.index(mf), bad - mf.file_from_offset, self.store.cfg) if mf in files else None
        if found is not None:
            i, pos = found
            new = files[i].file_from_offset + pos
            log.error("dispatch: invalid record at %d in %s; the next intact record starts at %d", bad, mf.path, new)
            return min(new, end) if new > self.reput_from else cl.roll_next_file(self.reput_from)
        log.error("dispatch: invalid record at %d in %s; skipping to the end of readable data", bad, mf.path)
        new = min(end, mf.file_from_offset + mf.wrote_position)
        return new if new > self.reput_from else cl.roll_next_file(self.reput_from)

    def _dispatch_small(self, mf, starts: list[int], limit: int, whole: bool = False):
        """Dispatch a small round record by record with plain ints (what ``decode_batch`` and
        ``dispatch_batch`` do for it, the same bytes written, without numpy's fixed cost per call):
        the records at ``starts`` while each is an intact IPv4 record ending where the next starts
        and before ``limit``. Returns ``(end offset, touched queues)``, or None when the first record
        is not one this path takes (IPv6 hosts, invalid framing), or with ``whole`` (starts handed
        over by the producer) when not all of them are records ending at ``limit``: the batch path
        then decides."""
        mm, cache = mf.mm, self._topic_cache
        rnd = _SmallRound(self.store)
        at = starts[0]
        for st in starts:
            scanned = M.scan_v4(mm, st, limit) if st == at else None
            if scanned is None or not scanned[5]:
                break
            f, topic_pos, topic_len, props_pos, props_len, _ = scanned
            at = st + f[0]
            tb = mm[topic_pos:topic_pos + topic_len]
            topic = cache.get(tb)
            if topic is None:
                topic = cache[tb] = tb.decode("utf-8", "replace")
            props = dispatch_properties(mm[props_pos:props_pos + props_len]) if props_len > 0 else {}
            rnd.add((f[6], f[0], f[5], f[11], topic, f[3], f[7]), props)
        if not rnd.phys or (whole and (len(rnd.phys) < len(starts) or at != limit)):
            return None
        return mf.file_from_offset + at, rnd.write()

    def _dispatch_facts(self, mf, end: int):
        """Dispatch from what the group commit's single puts left in ``commit_log.put_facts``
        (:data:`~.group_commit.FACTS_MAX`) when they start at ``reput_from``: the same units and
        index items as :meth:`_dispatch_small`, the records not read back (each one's head is
        checked: its TOTALSIZE, magic, queue id, queue offset, PHYSICALOFFSET and sysFlag as the
        fact says; a cut of the commitlog's tail drops the facts).
        ``(end offset, touched queues)``, or None when no fact starts here (facts behind
        ``reput_from`` are dropped: those records were dispatched from the segment)."""
        facts = self.store.commit_log.put_facts
        at = self.reput_from
        if not self._facts_start_here(facts):
            return None
        base, mm = mf.file_from_offset, mf.mm
        limit = min(end, base + mf.file_size)
        run = []
        while facts and len(run) < SMALL_ROUND:
            f = facts[0]
            phy, total = f[0], f[1]
            if phy != at or phy + total > limit:
                break
            if not head_says(mm, phy - base, (total, f[5], f[2], phy, f[6])):
                break
            run.append(f)
            facts.popleft()
            at = phy + total
        if not run:
            return None
        return at, self._write_facts(run)

    def _facts_start_here(self, facts) -> bool:
        """Drop the facts (a put's or a batch's: the first field is the commitlog offset) of records
        behind ``reput_from``, dispatched from the segment; whether the next one starts there."""
        at = self.reput_from
        while facts and facts[0][0] < at:
            facts.popleft()
        return bool(facts) and facts[0][0] == at

    def _write_facts(self, run: list) -> set:
        """The consume-queue units and index items of ``run`` (facts in commitlog order)."""
        rnd = _SmallRound(self.store)
        for f in run:
            fields = f[7]
            rnd.add(f, fields if type(fields) is dict else dispatch_properties(fields) if fields else {})
        return rnd.write()

    def _dispatch_batch_facts(self, mf, end: int):
        """Dispatch the batches whose facts (``commit_log.batch_facts``, :mod:`.batch_facts`) start at
        ``reput_from`` and follow each other inside ``mf`` and below ``end``, each one's first and last
        record head checked (:func:`~.batch_facts.heads_match`; a mismatch leaves the batch to the
        walk). ``(end offset, touched queues)``, or None when no fact starts here (facts behind
        ``reput_from`` are dropped, with the record starts of the batches dispatched)."""
        cl = self.store.commit_log
        facts = cl.batch_facts
        at = self.reput_from
        if not self._facts_start_here(facts):
            return None
        base, mm = mf.file_from_offset, mf.mm
        limit = min(end, base + mf.file_size)
        run, count = [], 0
        while facts and count < BATCH_RECORDS:
            f = facts[0]
            if f.phy != at or f.end > limit or not BF.heads_match(mm, base, f):
                break
            run.append(f)
            facts.popleft()
            at = f.end
            count += f.starts.size
        if not run:
            return None
        hints = cl.batch_starts
        while hints and hints[0][1] <= at:
            hints.popleft()
        return at, BF.dispatch_facts(self.store, run)

    def do_reput(self, end: int | None = None) -> None:
        """Dispatch everything in ``[reput_from, end)`` (default: the store's dispatch end)."""
        with self.lock:
            store = self.store
            cl = store.commit_log
            end = store.dispatch_end() if end is None else end
            if self.reput_from < cl.min_offset:
                self.reput_from = cl.min_offset
            while self.reput_from < end:
                mf = cl.queue.find(self.reput_from)
                if mf is None:
                    break
                new, touched = self._reput_round(mf, end)
                if new <= self.reput_from:
                    break  # nothing complete to dispatch yet
                with self._progress:
                    self.reput_from = new
                    self._progress.notify_all()
                if touched:
                    store.notify_dispatched(touched)

    def _walk_from(self, mf, pos: int, seg_end: int) -> tuple[np.ndarray, C.Halt, bool]:
        """Record starts from ``pos`` (the producer's hints, else a walk) and whether they are hints."""
        hinted, walk_end = self.hinted_starts(mf, pos, seg_end)
        if hinted is not None:
            return hinted[0], hinted[1], True
        starts, halt = C.walk_starts(mf.mm, pos, walk_end, BATCH_RECORDS)
        if not len(starts) and walk_end < seg_end:  # no record ends where a batch was said to start
            starts, halt = C.walk_starts(mf.mm, pos, seg_end, BATCH_RECORDS)
        return starts, halt, False

    def _reput_round(self, mf, end: int) -> tuple[int, set[tuple[str, int]]]:
        """One batch of ``mf`` from ``reput_from``: where dispatch goes on, and the touched queues."""
        store = self.store
        from_facts = self._dispatch_facts(mf, end)
        if from_facts is None:
            from_facts = self._dispatch_batch_facts(mf, end)
        if from_facts is not None:
            return from_facts
        base = mf.file_from_offset
        pos = self.reput_from - base
        seg_end = min(mf.file_size, end - base)
        starts, halt, hinted = self._walk_from(mf, pos, seg_end)
        if 0 < len(starts) <= SMALL_ROUND:  # a broker's usual round: a few records, no numpy
            small = self._dispatch_small(mf, starts.tolist(), halt.pos if hinted else seg_end, hinted)
            if small is not None:
                return small
        batch = M.decode_batch(mf.u8, starts)
        if hinted and not _contiguous(batch, halt.pos):
            log.warning("dispatch: record starts handed over for [%d, %d) do not match the records; walking them",
                        self.reput_from, base + halt.pos)
            starts, halt = C.walk_starts(mf.mm, pos, seg_end, BATCH_RECORDS)
            batch = M.decode_batch(mf.u8, starts)
        step = C.check_framing(mf.mm, mf.u8, batch, halt, None)
        batch = step.batch
        touched: set[tuple[str, int]] = set()
        new = self.reput_from
        if len(batch):
            touched = dispatch_batch(mf.u8, batch, DispatchTarget(store.find_consume_queue, store.index_service,
                                                                  store.delay_levels_ms, self._topic_cache,
                                                                  build_index=store.cfg.message_index_enable))
            store.on_dispatched(int(batch.store_timestamp[-1]))
            new = base + step.end
        stop, at = step.halt.stop, base + step.halt.pos
        if len(batch) < len(starts) or (stop in (C.Stop.INVALID, C.Stop.END) and not len(batch) and at < end):
            # (zeros before the readable end are damage, or a stand-in's gap: resync past them)
            new = self._resync(mf, at, end)
        elif stop is C.Stop.BLANK and (not len(batch) or new == at):
            new = store.commit_log.roll_next_file(at)
        return new, touched
