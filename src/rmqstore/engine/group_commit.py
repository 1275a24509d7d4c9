"""Group commit: puts that arrived together (a broker's sends from many connections in one pass of
its event loop) appended as one group, each answered with its own result.

RocketMQ's broker groups the *flush* of concurrent puts (``GroupCommitService``); here the append
is grouped too: the single messages of a group are encoded outside the lock as
:meth:`~.commit_log.CommitLog.put_message` encodes them, then appended one after the other under
one hold of the append lock, and the group gets one dispatcher wake-up and, under SYNC_FLUSH, one
flush wait. Consecutive producers' batches (``SEND_BATCH_MESSAGE``) for one topic are encoded as
one batch and appended likewise (:func:`~.put_batch.put_raw_batches`). Other batches
(``put_messages``) and messages the fast path does not take keep their own put, in their turn, so
a connection's messages keep their order. The bytes written are those of the one-by-one puts.
"""
from __future__ import annotations

import struct

from ..errors import StoreIOError
from ..types import Message, PutMessageResult, PutMessageStatus
from .dispatch import dispatch_fields
from .put_batch import RawBatch, put_raw_batches
from .put_encode import NO_WAIT, append_failed, illegal, out_of_range

_PUT_OK = PutMessageStatus.PUT_OK
#: at most this many appends wait in ``CommitLog.put_facts`` for the dispatcher: ``(phy offset, total
#: size, queue offset, store time, topic, queue id, sysFlag, the properties dispatch reads (a dict:
#: :func:`~.dispatch.dispatch_fields`) or else the encoded properties)`` of each single put
#: of a group, in commitlog order. The dispatcher writes their consume-queue units and index items
#: from these (after checking each record's head in the segment) instead of reading the records
#: back; it alone pops them, and records without facts are read as before.
FACTS_MAX = 4096


def put_group(cl, items: list) -> list[PutMessageResult]:
    """One result per item of ``items``, in order: a list of one message is a single put
    (``put_message``), a longer one a batch for one topic and queue (``put_messages``), a
    :class:`~.put_batch.RawBatch` a batch as its producer sent it. Consecutive single messages
    are appended as one group (:func:`put_run`), consecutive raw batches as one encoded batch where
    they can be (:func:`~.put_batch.put_raw_batches`)."""
    out: list[PutMessageResult] = []
    singles: list[Message] = []
    raws: list[RawBatch] = []
    for msgs in items:
        single, raw = type(msgs) is list and len(msgs) == 1, isinstance(msgs, RawBatch)
        if singles and not single:
            out += put_run(cl, singles)
            singles = []
        if raws and not raw:
            out += put_raw_batches(cl, raws)
            raws = []
        if single:
            singles.append(msgs[0])
        elif raw:
            raws.append(msgs)
        else:
            out.append(cl.put_messages(msgs))
    return out + (put_run(cl, singles) if singles else []) + (put_raw_batches(cl, raws) if raws else [])


def put_run(cl, msgs: list[Message]) -> list[PutMessageResult]:
    """Single messages appended as one group, one result each in order: the fast-path ones
    (:meth:`~.commit_log.CommitLog.fast_parts`) under one hold of the lock; any other goes through
    ``put_message`` in its turn."""
    out: list = [None] * len(msgs)
    run: list = []
    for i, msg in enumerate(msgs):
        parts = cl.fast_parts(msg)
        if parts is None:
            _append_run(cl, run, out)
            run = []
            out[i] = cl.put_message(msg)
        else:
            run.append((i, msg, parts))
    _append_run(cl, run, out)
    return out


def _append_run(cl, run: list, out: list) -> None:
    """Append ``run`` (``(index, message, fast parts)``) under one hold of the lock and fill ``out``.
    A message whose fields do not fit is refused alone (nothing of it is written); an I/O error
    (no segment could be created) fails the messages not yet written."""
    if not run:
        return
    done, end, failed = [], 0, None
    facts = cl.put_facts
    try:
        with cl.put_lock:
            for i, msg, (shape, store_hex, props, total, prepared) in run:
                try:
                    phy, qoff, store_ts, end = cl.append_fast(msg, shape, total, prepared)
                except (struct.error, OverflowError):
                    out[i] = illegal(out_of_range([msg]) or "a field does not fit its width")
                    continue
                if len(facts) < FACTS_MAX:
                    fields = dispatch_fields(msg.properties)
                    facts.append((phy, total, qoff, store_ts, msg.topic, msg.queue_id, msg.sys_flag,
                                  props if fields is None else fields))
                done.append((i, props, PutMessageResult(_PUT_OK, f"{store_hex}{phy:016X}", phy, total, qoff,
                                                        store_ts, 1)))
    except (OSError, StoreIOError) as ex:
        failed = append_failed(ex)
    for i, _, _ in run:
        if out[i] is None:
            out[i] = failed
    if not done:
        return
    waits = any(NO_WAIT not in props for _, props, _ in done)
    status = cl.after_append(end, None if waits else NO_WAIT)  # one wake-up, one flush wait
    for i, props, result in done:
        if status is not _PUT_OK and NO_WAIT not in props:
            result.status = status
        out[i] = result
