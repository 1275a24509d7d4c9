"""The engine contract: what the engine's modules (reput/dispatch, recovery, verify, retention,
rebuild) may use of an open store, and nothing else of it.

The facade (:class:`~rmqstore.message_store.MessageStore`) implements :class:`StoreParts` and hands
itself to the engine as one; an engine module never imports the facade and names no attribute of a
``store`` outside this protocol (``tests/unit/test_architecture.py`` walks the engine's AST and fails
on any other). Keeping the contract a protocol over live attributes, rather than a snapshot object,
is deliberate: the facade swaps some parts while it runs (the index service while verify looks at
the files on disk, ``reput`` once dispatch starts, ``disk_full`` as retention measures the disk).
"""
from __future__ import annotations

import threading
from typing import Callable, Mapping, Protocol, Sequence


class StoreParts(Protocol):
    """An open store as the engine sees it."""

    # --- what it is ------------------------------------------------------------------------------
    path: str                      #: the store directory (absolute)
    cfg: object                    #: its :class:`~rmqstore.config.MessageStoreConfig`
    read_only: bool
    delay_levels_ms: Sequence[int]  #: the broker's delay levels (tagsCode of SCHEDULE_TOPIC_XXXX)
    disk_full: bool                #: puts refused (retention sets it from the disk usage)

    # --- its parts -------------------------------------------------------------------------------
    commit_log: object             #: :class:`~rmqstore.engine.commit_log.CommitLog`
    consume_queues: Mapping        #: ``(topic, queueId) -> ConsumeQueue``
    index_service: object          #: :class:`~rmqstore.engine.index.IndexService`
    checkpoint: object             #: :class:`~rmqstore.engine.checkpoint.StoreCheckpoint`
    reput: object                  #: :class:`~rmqstore.engine.reput.ReputMessageService` (once started)
    consumer_offsets: object       #: :class:`~rmqstore.engine.consumer_offsets.ConsumerOffsetManager`

    # --- its locks -------------------------------------------------------------------------------
    maintenance_lock: threading.RLock  #: one maintenance run (verify, retention) at a time
    cq_lock: threading.Lock            #: the consume-queue map and the index service

    # --- what the engine asks of it ---------------------------------------------------------------
    def retire(self, obj) -> None:
        """Close ``obj`` (a mapped file or an index file) once readers that may hold it are done."""

    def refresh(self) -> int:
        """A read-only store: catch up with what a writer appended."""

    def wait_dispatched(self, timeout: float | None = None) -> None:
        """Until everything written is dispatched."""

    def dispatch_end(self) -> int:
        """Where dispatch may read up to (the flushed or the confirmed offset)."""

    def on_dispatched(self, store_ts: int) -> None:
        """A dispatched batch's last store time (the checkpoint's logics time)."""

    def notify_dispatched(self, queues: set[tuple[str, int]]) -> None:
        """Tell the dispatch listeners which queues have new messages."""

    def find_consume_queue(self, topic: str, queue_id: int) -> object:
        """The queue's ConsumeQueue, created on first use."""


#: the names an engine module may use of a ``store`` (checked by the architecture test)
CONTRACT_NAMES = frozenset(n for n in list(StoreParts.__annotations__) + [
    n for n, v in vars(StoreParts).items() if isinstance(v, Callable) and not n.startswith("_")])
