"""One fixed-size memory-mapped segment file (mirrors ``DefaultMappedFile``).

The file always has exactly ``file_size`` bytes on disk (created sparse, zero-filled). Positions
(``wrote_position``, ``flushed_position``) are kept in memory; recovery sets them. A read-only
file is mapped with ``ACCESS_READ`` and can never be modified through this object.
"""
from __future__ import annotations

import mmap
import os
import threading

import numpy as np

from ..errors import CorruptRecordError, ReadOnlyStoreError, StoreIOError

PAGE = mmap.PAGESIZE
OS_PAGE_SIZE = 4096


class MappedFile:
    """A segment named by its 20-digit start offset."""

    __slots__ = ("path", "file_size", "file_from_offset", "read_only", "mm", "_fd", "wrote_position",
                 "flushed_position", "_u8", "_lock", "last_store_timestamp", "closed")

    def __init__(self, path: str, file_size: int, *, read_only: bool = False, create: bool = False):
        self.path = path
        self.file_size = file_size
        name = os.path.basename(path)
        self.file_from_offset = int(name) if name.isdigit() else 0
        self.read_only = read_only
        self.wrote_position = 0
        self.flushed_position = 0
        self.last_store_timestamp = 0
        self.closed = False
        self._lock = threading.Lock()
        self._u8 = None
        try:
            if read_only:
                self._fd = os.open(path, os.O_RDONLY)
            else:
                self._fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        except OSError as e:
            raise StoreIOError(f"cannot open segment: {e.strerror}", path=path) from e
        try:
            size = os.fstat(self._fd).st_size
            if create and size == 0:
                os.ftruncate(self._fd, file_size)
                size = file_size
            if size != file_size:
                raise CorruptRecordError(f"segment is {size} bytes, expected the configured {file_size}", path=path)
            self.mm = mmap.mmap(self._fd, file_size, access=mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE)
        except OSError as e:
            os.close(self._fd)
            raise StoreIOError(f"cannot map segment: {e.strerror}", path=path) from e
        except Exception:
            os.close(self._fd)
            raise

    # --- views -------------------------------------------------------------------------------
    @property
    def u8(self) -> np.ndarray:
        """uint8 numpy view of the whole file (no copy)."""
        if self._u8 is None:
            self._u8 = np.frombuffer(self.mm, dtype=np.uint8)
        return self._u8

    def read(self, pos: int, size: int) -> memoryview:
        return memoryview(self.mm)[pos:pos + size]

    # --- state -------------------------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def mtime(self) -> float:
        return os.fstat(self._fd).st_mtime

    # --- writing -----------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError("segment is mapped read-only", path=self.path)

    def write_at(self, pos: int, data) -> None:
        self._check_writable()
        self.mm[pos:pos + len(data)] = data

    def append(self, data) -> int:
        """Write at the write position; returns the position written at."""
        self._check_writable()
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            raise StoreIOError(f"append of {n} bytes at {pos} overflows the segment", path=self.path, offset=pos)
        self.mm[pos:pos + n] = data
        self.wrote_position = pos + n
        return pos

    def flush(self, least_pages: int = 0) -> int:
        """msync the dirty range if at least ``least_pages`` 4 KiB pages are dirty (or the file is
        full, or ``least_pages == 0`` and any byte is dirty). Returns the flushed position."""
        if self.read_only:
            return self.flushed_position
        with self._lock:
            wrote, flushed = self.wrote_position, self.flushed_position
            if wrote <= flushed:
                return flushed
            if not self.is_full and least_pages > 0 and (wrote // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE) < least_pages:
                return flushed
            start = (flushed // PAGE) * PAGE
            try:
                self.mm.flush(start, wrote - start)
            except OSError as e:
                raise StoreIOError(f"msync failed: {e.strerror}", path=self.path, offset=start) from e
            self.flushed_position = wrote
            return wrote

    def truncate_positions(self, pos: int) -> None:
        """Set write/flush positions (recovery); zero the bytes after ``pos`` up to the old end."""
        self.wrote_position = pos
        self.flushed_position = min(self.flushed_position, pos)

    def zero_from(self, pos: int, end: int | None = None) -> None:
        self._check_writable()
        end = self.file_size if end is None else end
        step = 1 << 20
        zeros = bytes(step)
        p = pos
        while p < end:
            n = min(step, end - p)
            if any(self.mm[p:p + n]):
                self.mm[p:p + n] = zeros[:n]
            p += n

    # --- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._u8 = None
        try:
            self.mm.close()
        except BufferError:
            pass  # views still exported (e.g. a caller's memoryview); unmapped when they are released
        os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, wrote={self.wrote_position}, flushed={self.flushed_position})"
