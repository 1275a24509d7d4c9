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


Listing = list[tuple[str, int]]  # (file name, size) of the files of one directory


def _is_segment(name: str) -> bool:
    return name.isdigit() and len(name) == 20


def _listing(directory: str) -> Listing:
    """``(name, size)`` of the regular files of ``directory`` (empty when it is missing)."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for n in names:
        p = os.path.join(directory, n)
        if os.path.isfile(p):
            out.append((n, os.path.getsize(p)))
    return out


def segment_size_of(files: Listing) -> int | None:
    """The segment size of a directory of segments: the spacing of their names when there are
    several (a name is the start offset: exact whatever a damaged file's length; a short or missing
    file is damage, not geometry), else the one file's size; None without segments."""
    starts = sorted(int(n) for n, _ in files if _is_segment(n))
    gaps = [b - a for a, b in zip(starts, starts[1:]) if b > a]
    if gaps:
        return min(gaps)
    for name, size in sorted(files):
        if _is_segment(name) and size > 0:
            return size
    return None


def cq_segment_size_of(queues: dict[tuple[str, str], Listing]) -> int | None:
    """The consume-queue file size from the files of every queue (``(topic, queue dir)`` ->
    listing): the name spacing of the first queue with several files (topics and queues in name
    order), else the first queue's file size."""
    single = None
    for key in sorted(queues):
        if not key[1].isdigit():
            continue
        files = queues[key]
        starts = sorted(int(n) for n, _ in files if _is_segment(n))
        if len(starts) > 1 and any(b > a for a, b in zip(starts, starts[1:])):
            return segment_size_of(files)
        if single is None:
            single = segment_size_of(files)
    return single


def index_size_of(files: Listing) -> int | None:
    """The index file size: the most common size among the index files (all have the same size;
    a truncated one is damage)."""
    sizes = collections.Counter(size for n, size in files if n.isdigit() and size > 0)
    return max(sizes, key=lambda k: (sizes[k], k)) if sizes else None


def is_store_dir(path: str) -> bool:
    """A directory holding a commitlog, consume queues, a checkpoint or a writer's lock (a store
    just opened by a writer has only its lock)."""
    return os.path.isdir(path) and any(
        os.path.exists(os.path.join(path, d)) for d in (COMMITLOG, CONSUMEQUEUE, CHECKPOINT, LOCK))


def _first_segment_size(directory: str) -> int | None:
    return segment_size_of(_listing(directory)) if os.path.isdir(directory) else None


def _cq_listings(store_dir: str) -> dict[tuple[str, str], Listing]:
    cq_root = os.path.join(store_dir, CONSUMEQUEUE)
    out: dict[tuple[str, str], Listing] = {}
    if not os.path.isdir(cq_root):
        return out
    for topic in os.listdir(cq_root):
        tdir = os.path.join(cq_root, topic)
        if os.path.isdir(tdir):
            for q in os.listdir(tdir):
                out[(topic, q)] = _listing(os.path.join(tdir, q))
    return out


def _first_cq_segment_size(store_dir: str) -> int | None:
    return cq_segment_size_of(_cq_listings(store_dir))


def _first_index_size(store_dir: str) -> int | None:
    return index_size_of(_listing(os.path.join(store_dir, INDEX)))


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
    """``base`` (defaults if None) with segment sizes taken from the store's files where present.
    Index files whose size is not upstream's 1:4 slot:item ratio give their geometry from their
    contents (:func:`~rmqstore.format.index_file.infer_geometry`); a :class:`ConfigError` naming
    the keys to set when they cannot."""
    if not os.path.isdir(store_dir):
        raise StoreNotFoundError("store directory does not exist", path=store_dir)
    index_dir = os.path.join(store_dir, INDEX)
    files = _listing(index_dir)
    cfg = config_with_sizes(base or MessageStoreConfig(), _first_segment_size(os.path.join(store_dir, COMMITLOG)),
                            _first_cq_segment_size(store_dir), index_size_of(files))
    return config_with_geometry(cfg, files, lambda name, size: index_geometry(os.path.join(index_dir, name), size),
                                index_dir)


def config_with_geometry(cfg: MessageStoreConfig, files: Listing, geometry_of, where: str) -> MessageStoreConfig:
    """``cfg`` (as :func:`config_with_sizes` made it from the same listing) when the index files
    (``files``: their names and sizes) are ``cfg``'s size or absent; else ``cfg`` with the geometry
    that the contents of the first index file (in name order) of their common size tell:
    ``geometry_of(name, size)`` -> ``(slots, items)`` or None. A :class:`ConfigError` at ``where``
    naming the keys to set when no file tells. The one rule for local and remote stores."""
    size = index_size_of(files)
    if size is None or size == cfg.index_file_size:
        return cfg
    for name, n in sorted(files):
        if name.isdigit() and n == size:
            found = geometry_of(name, size)
            if found is not None:
                return cfg.replace(max_hash_slot_num=found[0], max_index_num=found[1])
    raise ConfigError(f"the store's index files are {size} bytes, not upstream's 1:4 slot:item ratio, and "
                      "no index file's keys tell its geometry: give a config with maxHashSlotNum and "
                      f"maxIndexNum (40 + 4*maxHashSlotNum + 20*maxIndexNum = {size})", path=where)


def index_geometry(path: str, size: int) -> tuple[int, int] | None:
    """``(slots, items)`` read from the contents of the index file ``path`` of ``size`` bytes (see
    :func:`~rmqstore.format.index_file.infer_geometry`), or None when they do not tell."""
    import mmap

    from .format.index_file import infer_geometry

    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
        return infer_geometry(mm, size)


def config_with_sizes(cfg: MessageStoreConfig, commitlog: int | None, consume_queue: int | None,
                      index: int | None) -> MessageStoreConfig:
    """``cfg`` with the segment sizes found in a store's files (None: nothing found, keep
    ``cfg``'s); an index size gives the geometry only with upstream's 1:4 slot:item ratio. The one
    rule for local stores (:func:`infer_config`) and remote ones (the Spark source's listing)."""
    changes: dict[str, int] = {}
    if commitlog and commitlog != cfg.mapped_file_size_commit_log:
        changes["mapped_file_size_commit_log"] = commitlog
    if consume_queue and consume_queue != cfg.cq_file_size:
        changes["mapped_file_size_consume_queue"] = consume_queue
    if index and index != cfg.index_file_size and (index - 40) % 84 == 0:
        changes["max_hash_slot_num"] = (index - 40) // 84
        changes["max_index_num"] = 4 * ((index - 40) // 84)
    return cfg.replace(**changes) if changes else cfg
