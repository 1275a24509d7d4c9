"""Store directory layout helpers: paths, and segment sizes inferred from the files themselves.

A store copied from a broker is opened offline without its broker.conf: the commitlog and consume
queue segment sizes are the sizes of their files, and the index geometry follows from an index
file's size when it has upstream's default 1:4 slot:item ratio (``40 + 84*slots`` bytes).
"""
from __future__ import annotations

import os

from .config import MessageStoreConfig
from .errors import StoreNotFoundError

COMMITLOG = "commitlog"
CONSUMEQUEUE = "consumequeue"
INDEX = "index"


def _first_segment_size(directory: str) -> int | None:
    if not os.path.isdir(directory):
        return None
    for name in sorted(os.listdir(directory)):
        p = os.path.join(directory, name)
        if name.isdigit() and len(name) == 20 and os.path.isfile(p):
            size = os.path.getsize(p)
            if size > 0:
                return size
    return None


def is_store_dir(path: str) -> bool:
    return os.path.isdir(path) and any(
        os.path.exists(os.path.join(path, d)) for d in (COMMITLOG, CONSUMEQUEUE, "checkpoint"))


def infer_config(store_dir: str, base: MessageStoreConfig | None = None) -> MessageStoreConfig:
    """``base`` (defaults if None) with segment sizes taken from the store's files where present."""
    if not os.path.isdir(store_dir):
        raise StoreNotFoundError("store directory does not exist", path=store_dir)
    cfg = base or MessageStoreConfig()
    changes: dict[str, int] = {}
    cl = _first_segment_size(os.path.join(store_dir, COMMITLOG))
    if cl and cl != cfg.mapped_file_size_commit_log:
        changes["mapped_file_size_commit_log"] = cl
    cq_root = os.path.join(store_dir, CONSUMEQUEUE)
    if os.path.isdir(cq_root):
        done = False
        for topic in sorted(os.listdir(cq_root)):
            tdir = os.path.join(cq_root, topic)
            if not os.path.isdir(tdir):
                continue
            for q in sorted(os.listdir(tdir)):
                size = _first_segment_size(os.path.join(tdir, q)) if q.isdigit() else None
                if size:
                    if size != cfg.cq_file_size:
                        changes["mapped_file_size_consume_queue"] = size
                    done = True
                    break
            if done:
                break
    idx = os.path.join(store_dir, INDEX)
    if os.path.isdir(idx):
        sizes = [os.path.getsize(os.path.join(idx, n)) for n in sorted(os.listdir(idx))
                 if os.path.isfile(os.path.join(idx, n))]
        if sizes and sizes[0] != cfg.index_file_size and (sizes[0] - 40) % 84 == 0:
            slots = (sizes[0] - 40) // 84
            changes["max_hash_slot_num"] = slots
            changes["max_index_num"] = 4 * slots
    return cfg.replace(**changes) if changes else cfg
