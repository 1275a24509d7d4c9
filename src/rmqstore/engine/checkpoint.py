"""StoreCheckpoint: the 4096-byte ``checkpoint`` file (mirrors ``StoreCheckpoint``).

The page is rewritten in place with one ``pwrite`` and fsync'd. Callers flush values captured
*before* the data they describe was flushed (see ``MessageStore._flush_queues_and_checkpoint``),
so the file never claims more than is on disk; recovery only uses it to choose where to start
scanning, and verify reports a checkpoint that is ahead of the data (``checkpoint_ahead``).
"""
from __future__ import annotations

import os

from ..errors import StoreIOError
from ..format.checkpoint import FILE_SIZE, CheckpointValues


class StoreCheckpoint:
    def __init__(self, path: str, *, read_only: bool):
        self.path = path
        self.read_only = read_only
        self.values = CheckpointValues()
        if os.path.exists(path):
            self.values = self.read_file(path)

    @staticmethod
    def read_file(path: str) -> CheckpointValues:
        """The values on disk (all zero when the file is missing)."""
        try:
            with open(path, "rb") as fh:
                return CheckpointValues.unpack(fh.read(FILE_SIZE))
        except FileNotFoundError:
            return CheckpointValues()
        except OSError as e:
            raise StoreIOError(f"cannot read checkpoint: {e.strerror}", path=path) from e

    def flush(self, values: CheckpointValues | None = None) -> None:
        """Write ``values`` (default: :attr:`values`) in place and fsync (a 4 KiB page write)."""
        if self.read_only:
            return
        data = (values or self.values).pack()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, data, 0)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise StoreIOError(f"cannot write checkpoint: {e.strerror}", path=self.path) from e
