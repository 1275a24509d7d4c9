"""In-process rebuild of a store directory: the store is opened read-only (recovery finds the end of
valid data; the consume queues and index are not looked at) and
:func:`rmqstore.engine.rebuild.rebuild_from` writes ``consumequeue/`` and ``index/`` into the output.
This module sits beside the facade (it opens a :class:`~rmqstore.message_store.MessageStore`), so
the engine below never imports the facade."""
from __future__ import annotations

import os

from .config import MessageStoreConfig
from .engine.rebuild import RebuildResult, check_output, rebuild_from
from .errors import OutputExistsError, StoreLockedError
from .layout import infer_config
from .message_store import MessageStore, lock_holder

__all__ = ["RebuildResult", "check_new_output", "rebuild"]


def check_new_output(out_dir: str, source: str | None = None, what: str = "rebuild output", *,
                     must_not_exist: bool = False) -> None:
    """Refuse an output before any work starts, creating nothing: :class:`StoreLockedError` when a
    live process holds the store lock of the directory, :class:`OutputExistsError` when it is the
    ``source`` store, a file, or a directory that holds anything (or, ``must_not_exist``, exists)."""
    if os.path.isdir(out_dir):
        pid = lock_holder(out_dir)
        if pid is not None:
            who = f"pid {pid}" if pid > 0 else "a live process"
            raise StoreLockedError(f"the {what} directory holds a store that {who} has open", path=out_dir)
    if must_not_exist and os.path.exists(out_dir):
        raise OutputExistsError(f"{what} already exists", path=out_dir)
    check_output(source, out_dir, create=False, what=what)


def rebuild(store_dir: str, out_dir: str, cfg: MessageStoreConfig | None = None, progress=None) -> RebuildResult:
    """Rebuild ``out_dir/consumequeue`` and ``out_dir/index`` from ``store_dir``'s commitlog.

    ``progress(bytes_done)`` is called after every batch when given."""
    check_new_output(out_dir, store_dir)
    cfg = infer_config(store_dir, cfg)
    check_output(store_dir, out_dir)
    with MessageStore.open(store_dir, cfg, read_only=True, stand_in_derived=False) as src:  # the commitlog only
        return rebuild_from(src.commit_log, out_dir, cfg, progress)
