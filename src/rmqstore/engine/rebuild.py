"""In-process rebuild: consume queues and index files written afresh from a store's commitlog.

:func:`rebuild_from` takes the recovered commit log (:func:`rmqstore.rebuild.rebuild` opens the
store read-only for it; the source is never modified); the output directory receives
``consumequeue/`` and ``index/`` exactly as the in-process dispatcher writes them (the same
:func:`~rmqstore.engine.dispatch.dispatch_batch`), so they can be compared byte for byte with the
Spark rebuild or swapped in for broken ones.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..config import MessageStoreConfig
from ..errors import OutputExistsError, StoreIOError
from .checkpoint import StoreCheckpoint
from .consume_queue import ConsumeQueue
from .dispatch import DispatchTarget, dispatch_batch, iter_record_batches
from .index import IndexService
from ..io import paths


@dataclass
class RebuildResult:
    out_dir: str
    records: int
    consume_queues: int
    index_files: int
    end_offset: int
    seconds: float


def check_output(store_dir: str | None, out_dir: str, *, create: bool = True, what: str = "rebuild output") -> None:
    """Refuse (:class:`OutputExistsError`) an output that is the source store, a file, or a
    directory that holds anything (a rebuild never writes into files it did not create); then
    create it unless ``create`` is false."""
    if store_dir is not None and os.path.abspath(out_dir) == os.path.abspath(store_dir):
        raise OutputExistsError(f"{what} must not be the source store", path=out_dir)
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            raise OutputExistsError(f"{what} is a file", path=out_dir)
        entries = sorted(os.listdir(out_dir))
        derived = [d for d in (paths.CONSUMEQUEUE, paths.INDEX) if d in entries]
        if derived:
            raise OutputExistsError(f"{what} directory already holds {'/ and '.join(derived)}/", path=out_dir)
        if entries:
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise OutputExistsError(f"{what} directory is not empty ({shown})", path=out_dir)
    if create:
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            raise StoreIOError(f"cannot create the {what} directory: {e.strerror}", path=out_dir) from e


def rebuild_from(cl, out_dir: str, cfg: MessageStoreConfig, progress=None) -> RebuildResult:
    """Write ``out_dir/consumequeue`` and ``out_dir/index`` from the recovered commit log ``cl``
    (read up to its confirm offset, the end of valid data; see :func:`rmqstore.rebuild.rebuild`,
    which opens a store for this). ``progress(bytes_done)`` is called after every batch when given."""
    t0 = time.perf_counter()
    queues: dict[tuple[str, int], ConsumeQueue] = {}

    def cq_for(topic: str, qid: int) -> ConsumeQueue:
        cq = queues.get((topic, qid))
        if cq is None:
            cq = queues[(topic, qid)] = ConsumeQueue(out_dir, topic, qid, cfg, read_only=False)
        return cq

    index = IndexService(out_dir, cfg, read_only=False,
                         checkpoint=StoreCheckpoint(paths.checkpoint_path(out_dir), read_only=True))
    records = 0
    target = DispatchTarget(cq_for, index, cfg.delay_levels_ms, build_index=cfg.message_index_enable)
    end = cl.confirm_offset
    try:
        for mf, batch in iter_record_batches(cl.queue, cl.min_offset, end):
            dispatch_batch(mf.mm, batch, target)
            records += len(batch)
            if progress is not None:
                progress(mf.file_from_offset + int(batch.starts[-1] + batch.total[-1]))
    finally:
        n_index = len(index.files)
        index.close()
        for cq in queues.values():
            cq.flush(0)
            cq.close()
    return RebuildResult(out_dir, records, len(queues), n_index, end, time.perf_counter() - t0)
