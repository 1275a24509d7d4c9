"""Consumer groups for embedded use: ``store.consumer(group, topics)`` polls every queue of its
topics, keeps its position per queue and commits it to the store's ``config/consumerOffset.json``
(the broker's own file, :mod:`rmqstore.engine.consumer_offsets`), so a store moved to a RocketMQ
broker keeps the group's progress and the other way round.

Semantics (a demanding user's, written down in docs/embedded.md):

* A group with a committed offset for a queue starts there; a queue it never committed starts at
  ``start``: ``"earliest"`` (the queue's min offset, the default), ``"latest"`` (its max offset) or
  an epoch-ms timestamp (``getOffsetInQueueByTime`` with the lower boundary).
* ``poll`` pulls from the assigned queues in turn (a rotating start, so that no queue starves) with
  the group's tag subscription, returns as soon as it has messages and otherwise waits up to
  ``timeout_s`` for the dispatcher to announce new messages in one of its queues (no busy loop).
  New queues of the topics are picked up by the next poll. A position behind the queue's min offset
  (retention deleted those messages) moves to the min offset, as RocketMQ's consumers do.
* ``commit`` records the positions of what ``poll`` returned and writes the file at once (fsync'd);
  ``auto_commit=True`` records them on every poll and lets the store write the file every
  ``flushConsumerOffsetInterval`` (5 s) and at close: after a crash a group may see the messages of
  the last few seconds again (at-least-once), never lose one.
* On a read-only store (a reader following a live writer in another process), ``poll`` calls
  :meth:`MessageStore.refresh` while it waits; commits need ``offsets=`` a file of the caller's
  (the store's own file belongs to its writer).
"""
from __future__ import annotations

import os
import threading
import time
from typing import Iterable

from .engine.consumer_offsets import ConsumerOffsetManager
from .errors import ReadOnlyStoreError, StoreClosedError
from .types import GetMessageStatus, MessageRecord

EARLIEST = "earliest"
LATEST = "latest"
#: largest pull per queue and call (upstream's default ``pullBatchSize`` is 32; a larger pull is
#: the same work per message with fewer calls; a poll never holds more than ``max_messages``)
PULL_BATCH = 256
#: how often a consumer of a read-only store looks for a writer's new data while it waits
REFRESH_INTERVAL_S = 0.05
#: pulls one queue gets per round of a poll
MAX_PULLS_PER_QUEUE = 16
#: pull statuses after which the position moves to ``next_begin_offset`` and pulling goes on
_MOVING = frozenset((GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.OFFSET_TOO_SMALL,
                     GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.OFFSET_FOUND_NULL,
                     GetMessageStatus.MESSAGE_WAS_REMOVING))


class Consumer:
    """One member of a consumer group on an open :class:`~rmqstore.MessageStore` (not thread-safe:
    use one per thread). Built by :meth:`MessageStore.consumer`."""

    def __init__(self, store, group: str, topics: str | Iterable[str], subscription: str | None = None, *,
                 auto_commit: bool = False, start: str | int = EARLIEST,
                 offsets: str | os.PathLike | ConsumerOffsetManager | None = None):
        if not isinstance(group, str) or not group:
            raise ValueError("group must be a non-empty str")
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics or not all(isinstance(t, str) and t for t in self.topics):
            raise ValueError(f"topics must be one or more non-empty str, got {topics!r}")
        if not (start in (EARLIEST, LATEST) or (isinstance(start, int) and not isinstance(start, bool))):
            raise ValueError(f"start must be 'earliest', 'latest' or a timestamp in ms, got {start!r}")
        self.store = store
        self.group = group
        self.subscription = subscription
        self.auto_commit = auto_commit
        self.start = start
        self.offsets = _offset_manager(store, offsets)
        self._positions: dict[tuple[str, int], int] = {}
        self._turn = 0
        self._arrived = threading.Event()
        self._closed = False
        store.add_dispatch_listener(self._on_dispatch)

    # --- the dispatcher's wake-up ------------------------------------------------------------------
    def _on_dispatch(self, queues: set[tuple[str, int]]) -> None:
        topics = self.topics
        if any(t in topics for t, _ in queues):
            self._arrived.set()

    # --- assignment and positions ------------------------------------------------------------------
    def assignment(self) -> list[tuple[str, int]]:
        """Every queue of the subscribed topics that the store holds now."""
        have = self.store.topics()
        return [(t, q) for t in self.topics for q in have.get(t, ())]

    def _position(self, topic: str, queue_id: int) -> int:
        key = (topic, queue_id)
        pos = self._positions.get(key)
        if pos is None:
            pos = self.offsets.query_offset(self.group, topic, queue_id)
            if pos is None:
                pos = self._start_offset(topic, queue_id)
            self._positions[key] = pos
        return pos

    def _start_offset(self, topic: str, queue_id: int) -> int:
        st = self.store
        if self.start == EARLIEST:
            return st.get_min_offset_in_queue(topic, queue_id)
        if self.start == LATEST:
            return st.get_max_offset_in_queue(topic, queue_id)
        return st.get_offset_in_queue_by_time(topic, queue_id, int(self.start), "lower")

    # --- consuming ---------------------------------------------------------------------------------
    def poll(self, max_messages: int = 100, timeout_s: float = 1.0) -> list[MessageRecord]:
        """Up to ``max_messages`` messages from the assigned queues; waits up to ``timeout_s`` for
        the first one (0: do not wait). An empty list means nothing arrived in time."""
        self._check_open()
        if max_messages <= 0:
            raise ValueError(f"max_messages must be > 0, got {max_messages}")
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            self._arrived.clear()
            out = self._pull_round(max_messages)
            if out:
                if self.auto_commit:
                    self._record_positions()
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            if self.store.read_only:
                self._arrived.wait(min(left, REFRESH_INTERVAL_S))
                self.store.refresh()
            else:
                self._arrived.wait(left)

    def _pull_round(self, max_messages: int) -> list[MessageRecord]:
        queues = self.assignment()
        out: list[MessageRecord] = []
        if not queues:
            return out
        n = len(queues)
        first = self._turn % n
        self._turn += 1
        for i in range(n):
            topic, qid = queues[(first + i) % n]
            want = max_messages - len(out)
            if want <= 0:
                break
            out.extend(self._pull_queue(topic, qid, want))
        return out

    def _pull_queue(self, topic: str, queue_id: int, want: int) -> list[MessageRecord]:
        """Up to ``want`` messages from one queue. Pulls go on while they move the position
        (filtered-out stretches, a position behind the min offset or past the end) up to
        ``MAX_PULLS_PER_QUEUE`` calls, then the next queue gets its turn."""
        st = self.store
        pos = self._position(topic, queue_id)
        got: list[MessageRecord] = []
        for _ in range(MAX_PULLS_PER_QUEUE):
            g = st.get_message(self.group, topic, queue_id, pos, min(want - len(got), PULL_BATCH), self.subscription,
                               transfer_limits=False)
            got.extend(g.messages)
            if g.next_begin_offset == pos or g.status not in _MOVING:
                break
            pos = g.next_begin_offset
            if len(got) >= want:
                break
        self._positions[(topic, queue_id)] = pos
        return got

    # --- offsets -----------------------------------------------------------------------------------
    def _record_positions(self) -> None:
        for (topic, qid), pos in self._positions.items():
            self.offsets.commit_offset(self.group, topic, qid, pos)

    def commit(self) -> None:
        """Commit the positions of everything ``poll`` returned, and write the offsets file."""
        self._check_open()
        if self.offsets.read_only:
            raise ReadOnlyStoreError("the store is open read-only: pass offsets='path/to/offsets.json' to "
                                     "store.consumer() to keep this group's offsets", path=self.offsets.path)
        self._record_positions()
        self.offsets.persist()

    def committed(self) -> dict[tuple[str, int], int]:
        """``{(topic, queue_id): offset}`` the group has committed in its topics."""
        return {(t, q): o for t in self.topics for q, o in sorted(self.offsets.query_offsets(self.group, t).items())}

    def position(self) -> dict[tuple[str, int], int]:
        """``{(topic, queue_id): next offset poll reads}`` for every assigned queue."""
        return {(t, q): self._position(t, q) for t, q in self.assignment()}

    def lag(self) -> dict[tuple[str, int], int]:
        """``{(topic, queue_id): messages not yet consumed}``: the queue's max offset minus the
        position (what poll has returned counts as consumed)."""
        st = self.store
        return {(t, q): max(0, st.get_max_offset_in_queue(t, q) - p) for (t, q), p in self.position().items()}

    def seek(self, topic: str, queue_id: int, offset: int) -> None:
        """Read ``topic``/``queue_id`` from ``offset`` on (committed by the next commit)."""
        self._check_open()
        if topic not in self.topics:
            raise ValueError(f"{topic!r} is not one of this consumer's topics {self.topics}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        self._positions[(topic, queue_id)] = offset

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Every assigned queue to its first message stored at or after ``timestamp_ms`` (the lower
        boundary of ``getOffsetInQueueByTime``)."""
        self._check_open()
        for t, q in self.assignment():
            self._positions[(t, q)] = self.store.get_offset_in_queue_by_time(t, q, int(timestamp_ms), "lower")

    def close(self) -> None:
        """Stop listening to the store; with ``auto_commit`` the positions are committed first."""
        if self._closed:
            return
        if self.auto_commit and not self.offsets.read_only:
            self._record_positions()
            self.offsets.persist()
        self._closed = True
        self.store.remove_dispatch_listener(self._on_dispatch)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"consumer {self.group!r} is closed")

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer(group={self.group!r}, topics={self.topics!r}, subscription={self.subscription!r})"


def _offset_manager(store, offsets) -> ConsumerOffsetManager:
    if offsets is None:
        return store.consumer_offsets
    if isinstance(offsets, ConsumerOffsetManager):
        return offsets
    mgr = ConsumerOffsetManager(os.fspath(offsets))
    mgr.load()
    return mgr
