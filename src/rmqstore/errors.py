"""Exception hierarchy.

One root, :class:`RmqStoreError`; each subclass also inherits the matching builtin so callers can
catch either. Faults carry the file path and byte offset they concern (``path``/``offset``
attributes, ``None`` when not applicable). Expected outcomes of a put or a pull are status enums,
never exceptions.
"""
from __future__ import annotations


class RmqStoreError(Exception):
    """Root of every error raised by rmqstore."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None):
        where = []
        if path is not None:
            where.append(f"path={path}")
        if offset is not None:
            where.append(f"offset={offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.path = path
        self.offset = offset


class ConfigError(RmqStoreError, ValueError):
    """A configuration value is missing, of the wrong type or out of range."""


class CorruptRecordError(RmqStoreError, ValueError):
    """Bytes on disk do not form what the format says should be there."""


class UnitMismatchError(CorruptRecordError):
    """A consume-queue unit that does not point at its record (the unit is damaged; its record may
    be intact elsewhere)."""


class StoreIOError(RmqStoreError, OSError):
    """An operating-system level failure while reading or writing store files."""


class OffsetError(RmqStoreError, LookupError):
    """An offset points outside the data the store holds."""


class StoreLockedError(RmqStoreError, RuntimeError):
    """Another writer holds the store's lock file."""


class ReadOnlyStoreError(RmqStoreError, PermissionError):
    """A write was attempted on a store opened read-only."""


class StoreNotFoundError(RmqStoreError, FileNotFoundError):
    """The directory given is missing or is not a message store."""


class StoreClosedError(RmqStoreError, RuntimeError):
    """The store was used after close()."""


class MessageIdError(RmqStoreError, ValueError):
    """A message id (offsetMsgId or UNIQ_KEY) is not in the form RocketMQ writes."""


class OutputExistsError(RmqStoreError, FileExistsError):
    """An output that exists, or a directory holding data the command did not create: refused
    before anything is written (no command deletes or overwrites what it did not create)."""


class HAProtocolError(RmqStoreError, ValueError):
    """Bytes on a replication (HA) connection are not what RocketMQ's classic HA protocol allows
    there (a report past the master's end, a frame at the wrong offset, a body too large)."""
