"""The broker's group commit: the sends of one pass of the event loop, whichever connections they
came on, put as one group and answered each with its own result.

A send handler hands its messages and its ``answer(result)`` to :meth:`PutGroups.submit` and
returns the :class:`~.server.Deferred` it gets. After the pass (one ``call_soon``) the group is put
with :meth:`Broker.put_items <rmqstore.broker.broker.Broker.put_items>` (the store's
``put_group``: one hold of the append lock, one dispatcher wake-up, one flush wait), each answer
is produced from its ``PutMessageResult`` and written, and the records are dispatched in one round
(in the same callback, or, for a group of several sends when the last round was less than a
millisecond ago, with the groups of that millisecond).

Under SYNC_FLUSH the put, which waits for the disk, runs on one group-commit thread (RocketMQ's
``GroupCommitService``): it takes every group queued so far as one (appended together, one flush
wait), posts all their answers back to the event loop with one ``call_soon_threadsafe``, and goes
straight on with what was queued meanwhile. No thread per request, none parked per request.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import threading

from .server import Deferred

log = logging.getLogger("rmqstore.broker")


class PutGroups:
    """Collects the puts of a pass of the event loop and commits them as one group."""

    def __init__(self, broker, *, sync: bool = False):
        self.broker = broker
        self.pending: list[tuple[list, object, Deferred]] = []
        self.scheduled = False
        self.after_read = False  # (commit at the end of the current read: submit)
        self.groups = self.puts = 0  # (counters: puts per group is the grouping achieved)
        self._queue: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._busy = self._stopping = False
        self._thread: threading.Thread | None = None
        if sync:
            self._thread = threading.Thread(target=self._group_commit, name="rmqstore-group-commit", daemon=True)
            self._thread.start()

    def submit(self, msgs, answer) -> Deferred:
        """Queue a put (on the event loop); its answer arrives through the returned Deferred.

        The group is committed after the pass of the loop (``call_soon``), or, when the put comes
        from a connection's read and no other callback waits in this pass (asyncio's ready queue
        is empty: no other connection's read is due before the next poll), at the end of that
        read: the same group, without one more pass of the loop (a poll) per lone send. (An event
        loop without asyncio's ready queue, such as uvloop's, always takes the pass.)"""
        d = Deferred()
        self.pending.append((msgs, answer, d))
        if not self.scheduled:
            self.scheduled = True
            loop = self.broker.loop
            if self.broker.server.reading and not getattr(loop, "_ready", True):
                self.after_read = True
            else:
                loop.call_soon(self.commit)
        return d

    def read_done(self) -> None:
        """(the server, after a read's frames) Commit now when :meth:`submit` chose the end of the read."""
        if self.after_read:
            self.after_read = False
            self.commit()

    def commit(self) -> None:
        """Put the group collected so far (on the loop, or through the group-commit thread) and answer it."""
        self.scheduled = False
        group, self.pending = self.pending, []
        if not group:
            return
        self.groups += 1
        self.puts += len(group)
        if self._thread is None:
            self.answer(group, self._put([msgs for msgs, _, _ in group]))
            self.broker.dispatch_after_puts(len(group))  # in this callback, or after the coalescing time
            return
        with self._cv:
            self._queue.append(group)
            self._cv.notify()

    def _put(self, items: list):
        try:
            return self.broker.put_items(items)
        except Exception as e:  # noqa: BLE001 - every request of the group is answered with it
            return e

    def _group_commit(self) -> None:
        """The group-commit thread (SYNC_FLUSH): everything queued so far is put as one group."""
        while True:
            with self._cv:
                while not self._queue and not self._stopping:
                    self._cv.wait()
                if not self._queue:
                    return
                group = [p for g in self._queue for p in g]
                self._queue.clear()
                self._busy = True
            results = self._put([msgs for msgs, _, _ in group])
            try:
                self.broker.loop.call_soon_threadsafe(self.answer, group, results)
            except RuntimeError:  # the loop is closed: nobody is left to answer
                pass
            with self._cv:
                self._busy = False
                self._cv.notify_all()

    def answer(self, group: list, results) -> None:
        """Produce and deliver each answer from its result (or the group's put error); under
        SYNC_MASTER a put's answer waits (without a thread) until a slave has acknowledged it."""
        if isinstance(results, BaseException):
            for _, _, d in group:
                d.fail(results)
            return
        ha = self.broker.store.ha
        for (_, answer, d), result in zip(group, results):
            waiting = ha.replication_future(result) if ha is not None else None
            if waiting is None:
                _deliver(d, answer, result)
            else:
                waiting.add_done_callback(functools.partial(_on_replicated, self.broker.loop, d, answer, result))

    async def drain(self, timeout: float) -> None:
        """Commit what is collected and wait (up to ``timeout`` s) for the group-commit thread."""
        if self.pending:
            self.commit()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._thread is not None and (self._queue or self._busy) and loop.time() < deadline:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0)  # (the answers it posted are delivered)

    def stop(self) -> None:
        """Stop the group-commit thread once the groups queued are put."""
        if self._thread is not None:
            with self._cv:
                self._stopping = True
                self._cv.notify_all()
            self._thread.join(30)
            self._thread = None


def _deliver(d: Deferred, answer, result) -> None:
    try:
        d.resolve(answer(result))
    except Exception as e:  # noqa: BLE001 - answered SYSTEM_ERROR by the server
        d.fail(e)


def _on_replicated(loop, d: Deferred, answer, result, waited) -> None:
    """(on the HA thread that ended the wait) back to the event loop with the answer"""
    try:
        loop.call_soon_threadsafe(_deliver_replicated, d, answer, result, waited)
    except RuntimeError:  # the loop is closed: nobody is left to answer
        pass


def _deliver_replicated(d: Deferred, answer, result, waited) -> None:
    """HA: the answer of a SYNC_MASTER put once its wait ended (PUT_OK, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE)."""
    result.status = waited.result()
    _deliver(d, answer, result)
