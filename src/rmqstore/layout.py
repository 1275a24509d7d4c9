"""Store directory layout helpers: paths, and segment sizes inferred from the files themselves.

A store copied from a broker is opened offline without its broker.conf: the commitlog and consume
queue segment sizes are the sizes of their files, and the index geometry follows from an index
file's size when it has upstream's default 1:4 slot:item ratio (``40 + 84*slots`` bytes).
"""
from __future__ import annotations

import collections
import os

from .config import MessageStoreConfig
from .errors import ConfigError, StoreNotFoundError

from .io.paths import CHECKPOINT, COMMITLOG, CONSUMEQUEUE, INDEX, LOCK  # noqa: F401 - the names, re-exported


def _segment_spacing(directory: str) -> int | None:
    """The segment size as the distance between consecutive segment names (a name is the start
    offset: exact whatever a damaged file's length), None with fewer than two segments."""
    try:
        starts = sorted(int(n) for n in os.listdir(directory) if n.isdigit() and len(n) == 20)
    except (FileNotFoundError, NotADirectoryError):
        return None
    gaps = [b - a for a, b in zip(starts, starts[1:]) if b > a]
    return min(gaps) if gaps else None


def _first_segment_size(directory: str) -> int | None:
    """The segment size of a directory of segments: the spacing of their names when there are
    several (a short or missing file is damage, not geometry), else the one file's size."""
    if not os.path.isdir(directory):
        return None
    spacing = _segment_spacing(directory)
    if spacing is not None:
        return spacing
    for name in sorted(os.listdir(directory)):
        p = os.path.join(directory, name)
        if name.isdigit() and len(name) == 20 and os.path.isfile(p):
            size = os.path.getsize(p)
            if size > 0:
                return size
    return None


def is_store_dir(path: str) -> bool:
    """A directory holding a commitlog, consume queues, a checkpoint or a writer's lock (a store
    just opened by a writer has only its lock)."""
    return os.path.isdir(path) and any(
        os.path.exists(os.path.join(path, d)) for d in (COMMITLOG, CONSUMEQUEUE, CHECKPOINT, LOCK))


def _first_cq_segment_size(store_dir: str) -> int | None:
    """The consume-queue file size: the name spacing of a queue with several files, else the
    first queue's file size."""
    cq_root = os.path.join(store_dir, CONSUMEQUEUE)
    if not os.path.isdir(cq_root):
        return None
    single = None
    for topic in sorted(os.listdir(cq_root)):
        tdir = os.path.join(cq_root, topic)
        if not os.path.isdir(tdir):
            continue
        for q in sorted(os.listdir(tdir)):
            if not q.isdigit():
                continue
            spacing = _segment_spacing(os.path.join(tdir, q))
            if spacing is not None:
                return spacing
            if single is None:
                single = _first_segment_size(os.path.join(tdir, q))
    return single


def _first_index_size(store_dir: str) -> int | None:
    """The index file size: the most common size among the index files (all have the same
    size; a truncated one is damage)."""
    idx = os.path.join(store_dir, INDEX)
    if not os.path.isdir(idx):
        return None
    sizes = collections.Counter()
    for n in sorted(os.listdir(idx)):
        p = os.path.join(idx, n)
        if n.isdigit() and os.path.isfile(p) and os.path.getsize(p) > 0:
            sizes[os.path.getsize(p)] += 1
    return max(sizes, key=lambda k: (sizes[k], k)) if sizes else None
    for n in sorted(os.listdir(idx)):
        p = os.path.join(idx, n)
        if n.isdigit() and os.path.isfile(p) and os.path.getsize(p) > 0:
            return os.path.getsize(p)
    return None


def check_geometry(store_dir: str, cfg: MessageStoreConfig) -> None:
    """Raise :class:`ConfigError` naming both sizes when the store's first commitlog, consume-queue
    or index file contradicts ``cfg`` (a store written with other segment sizes)."""
    found = (("commitlog segment", "mappedFileSizeCommitLog", _first_segment_size(os.path.join(store_dir, COMMITLOG)),
              cfg.mapped_file_size_commit_log),
             ("consume-queue file", "mappedFileSizeConsumeQueue", _first_cq_segment_size(store_dir), cfg.cq_file_size),
             ("index file", "maxHashSlotNum/maxIndexNum", _first_index_size(store_dir), cfg.index_file_size))
    for what, keys, on_disk, configured in found:
        if on_disk is not None and on_disk != configured:
            raise ConfigError(f"the store's {what}s are {on_disk} bytes but the config says {configured} ({keys}); "
                              "open without a config to use the store's own sizes", path=store_dir)


def resolve_config(store_dir: str, cfg: MessageStoreConfig | None) -> MessageStoreConfig:
    """The config a store is opened with: ``cfg`` checked against the files (:func:`check_geometry`),
    or, when None, the embedded preset with the segment sizes of the files already there."""
    if cfg is not None:
        if os.path.isdir(store_dir):
            check_geometry(store_dir, cfg)
        return cfg
    base = MessageStoreConfig.embedded()
    return infer_config(store_dir, base) if os.path.isdir(store_dir) else base


def infer_config(store_dir: str, base: MessageStoreConfig | None = None) -> MessageStoreConfig:
    """``base`` (defaults if None) with segment sizes taken from the store's files where present."""
    if not os.path.isdir(store_dir):
        raise StoreNotFoundError("store directory does not exist", path=store_dir)
    cfg = base or MessageStoreConfig()
    changes: dict[str, int] = {}
    cl = _first_segment_size(os.path.join(store_dir, COMMITLOG))
    if cl and cl != cfg.mapped_file_size_commit_log:
        changes["mapped_file_size_commit_log"] = cl
    cq = _first_cq_segment_size(store_dir)
    if cq and cq != cfg.cq_file_size:
        changes["mapped_file_size_consume_queue"] = cq
    ix = _first_index_size(store_dir)
    if ix and ix != cfg.index_file_size and (ix - 40) % 84 == 0:
        changes["max_hash_slot_num"] = (ix - 40) // 84
        changes["max_index_num"] = 4 * ((ix - 40) // 84)
    return cfg.replace(**changes) if changes else cfg
