"""The broker's group commit: the sends of one pass of the event loop, whichever connections they
came on, put as one group and answered each with its own result.

A send handler hands its messages and its ``answer(result)`` to :meth:`PutGroups.submit` and
returns the :class:`~.server.Deferred` it gets. After the pass (one ``call_soon``) the group is put
with :meth:`Broker.put_items <rmqstore.broker.broker.Broker.put_items>` (the store's
``put_group``: one hold of the append lock, one dispatcher wake-up, one flush wait), each answer
is produced from its ``PutMessageResult`` and written, and the records are dispatched in one round
(in the same callback, or, for a group of several sends when the last round was less than a
millisecond ago, with the groups of that millisecond).

Under SYNC_FLUSH the group's put, which waits for the disk, runs on a put worker: one hand-off per
group, not per request, and one ``call_soon_threadsafe`` back with all the results. One group is in
flight at a time: what arrives while it waits for the disk is the next group, put with one flush
when it is done (RocketMQ's group commit: flushes are one after the other anyway, and a group
started meanwhile would only wait for the flush before it and then flush again).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging

from .server import Deferred

log = logging.getLogger("rmqstore.broker")


class PutGroups:
    """Collects the puts of a pass of the event loop and commits them as one group."""

    def __init__(self, broker, executor: concurrent.futures.Executor | None):
        self.broker = broker
        self.executor = executor
        self.pending: list[tuple[list, object, Deferred]] = []
        self.scheduled = False
        self.inflight: set[asyncio.Future] = set()  # (at most one group: SYNC_FLUSH)
        self.groups = self.puts = 0  # (counters: puts per group is the grouping achieved)

    def submit(self, msgs: list, answer) -> Deferred:
        """Queue a put (on the event loop); its answer arrives through the returned Deferred."""
        d = Deferred()
        self.pending.append((msgs, answer, d))
        if not self.scheduled and not self.inflight:
            self.scheduled = True
            self.broker.loop.call_soon(self.commit)
        return d

    def commit(self) -> None:
        """Put the group collected so far (on the loop, or on a put worker) and answer it."""
        self.scheduled = False
        if self.inflight:
            return  # (a put worker has a group: the next one starts when it is done)
        group, self.pending = self.pending, []
        if not group:
            return
        self.groups += 1
        self.puts += len(group)
        items = [msgs for msgs, _, _ in group]
        if self.executor is None:
            self.answer(group, self._put(items))
            self.broker.dispatch_after_puts(len(group))  # in this callback, or after the coalescing time
            return
        fut = asyncio.wrap_future(self.executor.submit(self._put, items), loop=self.broker.loop)
        self.inflight.add(fut)
        fut.add_done_callback(lambda f: self._done(f, group))

    def _put(self, items: list[list]):
        try:
            return self.broker.put_items(items)
        except Exception as e:  # noqa: BLE001 - every request of the group is answered with it
            return e

    def _done(self, fut: asyncio.Future, group: list) -> None:
        self.inflight.discard(fut)
        self.answer(group, fut.exception() or fut.result())
        if self.pending:
            self.commit()

    @staticmethod
    def answer(group: list, results) -> None:
        """Produce and deliver each answer from its result (or the group's put error)."""
        if isinstance(results, BaseException):
            for _, _, d in group:
                d.fail(results)
            return
        for (_, answer, d), result in zip(group, results):
            try:
                d.resolve(answer(result))
            except Exception as e:  # noqa: BLE001 - answered SYSTEM_ERROR by the server
                d.fail(e)

    async def drain(self, timeout: float) -> None:
        """Commit what is collected and wait (up to ``timeout`` s) for the groups in flight."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.pending or self.inflight:
            if not self.inflight:
                self.commit()
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0 or not self.inflight:
                return
            await asyncio.wait(set(self.inflight), timeout=left)
            await asyncio.sleep(0)  # (the done callbacks run)
