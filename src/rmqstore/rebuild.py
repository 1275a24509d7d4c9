"""In-process rebuild of a store directory: the store is opened read-only (recovery finds the end of
valid data; the consume queues and index are not looked at) and
:func:`rmqstore.engine.rebuild.rebuild_from` writes ``consumequeue/`` and ``index/`` into the output.
This module sits beside the facade (it opens a :class:`~rmqstore.message_store.MessageStore`), so
the engine below never imports the facade."""
from __future__ import annotations

from .config import MessageStoreConfig
from .engine.rebuild import RebuildResult, check_output, rebuild_from
from .layout import infer_config
from .message_store import MessageStore

__all__ = ["RebuildResult", "rebuild"]


def rebuild(store_dir: str, out_dir: str, cfg: MessageStoreConfig | None = None, progress=None) -> RebuildResult:
    """Rebuild ``out_dir/consumequeue`` and ``out_dir/index`` from ``store_dir``'s commitlog.

    ``progress(bytes_done)`` is called after every batch when given."""
    cfg = infer_config(store_dir, cfg)
    check_output(store_dir, out_dir)
    with MessageStore.open(store_dir, cfg, read_only=True, stand_in_derived=False) as src:  # the commitlog only
        return rebuild_from(src.commit_log, out_dir, cfg, progress)
