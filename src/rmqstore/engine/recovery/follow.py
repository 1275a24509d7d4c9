"""A read-only store following a writer in another process (``MessageStore.refresh``): its view
grows by complete, valid records only, its consume queues by units that match those records, and
files deleted by retention leave the view."""
from __future__ import annotations

import logging
import os

from ...errors import CorruptRecordError, StoreIOError
from ...format import index_file as IF
from ..consume_queue import load_consume_queues
from ..contract import StoreParts
from ..index import IndexFile
from .scan import scan_log
from .view import really_corrupt, set_read_positions, validate_read_views

log = logging.getLogger("rmqstore.message_store")


def follow_writer(store: StoreParts) -> int:
    """New commitlog segments are mapped and scanned from the current end with CRC checks: the
    view grows only by complete, valid records. Consume queues grow only by units that match
    their records inside that view; new queues and index files appear; files deleted by
    retention leave the view (min offsets move; their mappings are retired). Returns the new end
    of valid data. The caller holds the store's refresh lock."""
    cl = store.commit_log
    added, removed = cl.queue.refresh()
    for mf in removed:
        store.retire(mf)
    files = cl.queue.files
    if files:
        start = min(max(cl.confirm_offset, files[0].file_from_offset),
                    files[-1].file_from_offset + files[-1].file_size)
        scan = scan_log(files, start, store.cfg, check_crc=True)
        end = max(scan.end, start)
        for s in really_corrupt(store, scan.corrupt):
            log.error("%s: %s (kept, never served)", s.segment, s.reason)
    else:
        end = 0
    set_read_positions(store, end)
    cl.confirm_offset = cl.flushed_offset = end
    # consume queues: new queues, new files, units that match their records
    known = set(store.consume_queues)
    load_consume_queues(store.path, store.cfg, store.read_only, store.consume_queues)
    fresh = [cq for k, cq in store.consume_queues.items() if k not in known]
    for cq in fresh:
        for mf in cq.queue.files:
            mf.wrote_position = mf.flushed_position = 0
    for key, cq in list(store.consume_queues.items()):
        if key in known:
            added_q, removed_q = cq.queue.refresh()
            for mf in removed_q:
                store.retire(mf)
    validate_read_views(store)
    grown = set()
    for key, cq in store.consume_queues.items():
        if cl.topic_queue_table.get(key, 0) < cq.max_offset:
            grown.add(key)
        cl.topic_queue_table[key] = cq.max_offset
        cq.correct_min_offset(cl.min_offset)
    refresh_index(store)
    if grown:
        store.notify_dispatched(grown)
    return end


def refresh_index(store: StoreParts) -> None:
    """A reader's index service: files deleted by retention leave (retired), new full-size files
    are mapped read-only, and the header of each file not yet full is read again."""
    svc = store.index_service
    d = svc.dir
    cfg = store.cfg
    with svc.lock:
        while svc.files and not os.path.exists(svc.files[0].path):
            store.retire(svc.files.pop(0))
        have = {f.name for f in svc.files}
        last = svc.files[-1].name if svc.files else ""
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            names = []
        for name in names:
            p = os.path.join(d, name)
            if name in have or name <= last or not name.isdigit():
                continue
            try:
                if os.path.getsize(p) != cfg.index_file_size:
                    continue
                svc.files.append(IndexFile(p, cfg.max_hash_slot_num, cfg.max_index_num, read_only=True))
            except (FileNotFoundError, StoreIOError, CorruptRecordError):
                continue
        for f in svc.files:
            if f.is_write_full:
                continue  # a full file never changes
            h = IF.HEADER.unpack_from(f.mf.mm, 0)
            if 0 <= h[5] <= f.index_num:
                f.begin_ts, f.end_ts, f.begin_phy, f.end_phy, f.slot_count = h[:5]
                f.index_count = max(1, h[5])
