"""StoreCheckpoint: the 4096-byte ``checkpoint`` file (mirrors ``StoreCheckpoint``)."""
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
            with open(path, "rb") as fh:
                self.values = CheckpointValues.unpack(fh.read(FILE_SIZE))

    def flush(self) -> None:
        """Write the page in place and fsync it (a 4 KiB write is atomic on the page cache)."""
        if self.read_only:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, self.values.pack(), 0)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise StoreIOError(f"cannot write checkpoint: {e.strerror}", path=self.path) from e
