"""The slave's writes: replicated bytes appended at exact offsets (``CommitLog.appendData``), and
the cut of a tail the master never had (an old master rejoining as a slave), its bytes kept as
recovery keeps a cut tail."""
from __future__ import annotations

import logging

from ...errors import HAProtocolError
from ...format import cursor as C
from .. import recovery as R
from .. import verify as V

log = logging.getLogger("rmqstore.ha")


def append_replicated(cl, start: int, data) -> int:
    """Append ``data`` (bytes of one segment of the master) at commitlog offset ``start``, which
    must be the commitlog's end; an empty commitlog takes its first segment at ``start``'s file
    boundary and ``start`` must be that boundary. Returns the new end. Wakes the dispatcher."""
    size = cl.cfg.mapped_file_size_commit_log
    n = len(data)
    with cl.put_lock:
        end = cl.confirm_offset
        if cl.queue.last is None:
            if start % size:
                raise HAProtocolError(f"master sent offset {start} to an empty slave: expected a segment "
                                      f"boundary (a multiple of {size})", offset=start)
        elif start != end:
            raise HAProtocolError(f"master pushed offset {start}, slave max offset is {end}", offset=start)
        if not n:
            return end
        mf = cl.queue.get_last_mapped_file(start)
        pos = start - mf.file_from_offset
        if pos != mf.wrote_position or pos + n > mf.file_size:
            raise HAProtocolError(f"{n} bytes at offset {start} do not continue segment {mf.path} "
                                  f"(written to {mf.wrote_position} of {mf.file_size})", offset=start)
        mf.write_at(pos, data, publish_last=False)
        mf.wrote_position = pos + n
        end = cl.confirm_offset = start + n
    on_append = cl.on_append
    if on_append is not None:
        on_append(end)
    return end


def complete_records_end(cl, offset: int, start: int | None = None) -> int:
    """The end of the last whole record at or before ``offset`` (a record boundary <= offset),
    walking from ``start`` (a record boundary; default: the start of ``offset``'s segment)."""
    mf = cl.queue.find(offset if start is None else start)
    if mf is None:
        return min(offset, cl.confirm_offset)
    base = mf.file_from_offset
    pos = 0 if start is None else start - base
    limit = min(offset - base, mf.file_size)
    while True:
        starts, halt = C.walk_starts(mf.mm, pos, limit, 1 << 16)
        if halt.stop is C.Stop.BLANK and base + mf.file_size < offset:
            return complete_records_end(cl, offset, base + mf.file_size)
        if halt.stop is not C.Stop.FULL:
            return base + halt.pos
        pos = halt.pos


def cut_tail(store, at: int, reason: str) -> int:
    """Cut the commitlog of a writer ``store`` at the record boundary at or before ``at``: the
    bytes from there are saved under ``recovery/`` and zeroed, later segments removed, and the
    consume queues and index that point past the cut rebuilt. Returns the new end."""
    cl = store.commit_log
    with store.reput.lock, cl.put_lock:
        cut = complete_records_end(cl, at)
        end = cl.confirm_offset
        ext = [(mf, max(cut - mf.file_from_offset, 0), mf.wrote_position) for mf in cl.queue.files
               if mf.file_from_offset + mf.wrote_position > cut]
        ext = [e for e in ext if e[2] > e[1]]
        if ext:
            cuts = R.describe_cuts(ext, reason)
            R.save_cut_bytes(store.path, ext, cuts)
            for mf, a, b in ext:
                mf.zero_from(a, b)
                mf.flush(0)
        cl.queue.truncate_dirty_files(cut)
        for mf in cl.queue.files:
            mf.flushed_position = min(mf.flushed_position, mf.wrote_position)
        cl.confirm_offset = cut
        cl.flushed_offset = min(cl.flushed_offset, cut)
        store.reput.reput_from = min(store.reput.reput_from, cut)
        cl.put_facts.clear()  # (what the dispatcher was told of the records cut)
        cl.batch_facts.clear()
        cl.batch_starts.clear()  # (the walk checks handed-over starts, but they describe records cut)
    queues = {k for k, cq in list(store.consume_queues.items()) if cq.max_physic_offset > cut}
    index = store.cfg.message_index_enable and any(f.end_phy >= cut for f in store.index_service.files
                                                    if f.index_count > 1)
    if queues or index:
        V.rebuild_derived(store, queues, index)
    for key, cq in list(store.consume_queues.items()):
        cl.topic_queue_table[key] = cq.max_offset
    log.warning("%s: cut the commitlog at %d (was %d): %s; the cut bytes are under recovery/", store.path, cut,
                end, reason)
    return cut
