"""A directory of equal-size segments named by their 20-digit start offset (``MappedFileQueue``).

Segment ``k+1`` starts exactly ``file_size`` after segment ``k``. Lookup by offset is by index with a
linear-scan fallback. Read-only queues never create, truncate or delete files.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Iterator

from ..errors import CorruptRecordError, ReadOnlyStoreError, StoreIOError
from .mapped_file import MappedFile

log = logging.getLogger(__name__)


def segment_name(offset: int) -> str:
    return f"{offset:020d}"


class MappedFileQueue:
    def __init__(self, directory: str, file_size: int, *, read_only: bool = False):
        self.directory = directory
        self.file_size = file_size
        self.read_only = read_only
        self.files: list[MappedFile] = []
        #: (path, why) of the segments stood in for at load (missing or short in the middle)
        self.gaps: list[tuple[str, str]] = []
        self._lock = threading.RLock()

    # --- loading -----------------------------------------------------------------------------
    def _names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.directory) if n.isdigit() and len(n) == 20)
        except FileNotFoundError:
            return []

    def load(self) -> None:
        """Map every segment in the directory. A zero-length *last* file is dropped (deleted unless
        read-only); a file larger than the segment size, or one whose name does not fall on the
        segment grid after its predecessor, is a :class:`CorruptRecordError` (a geometry mismatch,
        not damage). Damage is a gap, never a refusal: a segment missing between two others, or a
        short one before the last, is replaced by a read-only stand-in
        (:meth:`MappedFile.stand_in_for`: what is left of it, zeros after) and listed in ``gaps``;
        a short *last* segment is extended with zeros by a writer (recovery then finds where its
        data ends, as after a crash) and stood in for by a reader. A writer reserves the blocks of
        the last segment (see :mod:`.mapped_file`) and removes leftovers of segment creations
        interrupted by a crash."""
        if not os.path.isdir(self.directory):
            return
        if not self.read_only:
            self._remove_creation_leftovers()
        names = self._names()
        for i, name in enumerate(names):
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            last = i == len(names) - 1
            if size == 0 and last:
                if not self.read_only:
                    os.unlink(path)
                continue
            if size > self.file_size:
                raise CorruptRecordError(
                    f"segment is {size} bytes but the configured segment size is {self.file_size} "
                    "(check mappedFileSize* in the config)", path=path)
            start = int(name)
            if self.files:
                expected = self.files[-1].file_from_offset + self.file_size
                if start < expected or (start - expected) % self.file_size:
                    raise CorruptRecordError(
                        f"segment does not follow {self.files[-1].path} (expected a start of {expected} plus "
                        f"a multiple of the segment size {self.file_size})", path=path)
                while expected < start:
                    self._stand_in(os.path.join(self.directory, segment_name(expected)), "missing")
                    expected += self.file_size
            if size < self.file_size:
                if last and not self.read_only:
                    log.error("%s: segment is %d bytes, not %d: extended with zeros (its data ends where the "
                              "recovery finds it)", path, size, self.file_size)
                    try:
                        os.truncate(path, self.file_size)
                    except OSError as e:
                        raise StoreIOError(f"cannot extend a short segment: {e.strerror}", path=path) from e
                else:
                    self._stand_in(path, f"short ({size} of {self.file_size} bytes)")
                    continue
            mf = MappedFile(path, self.file_size, read_only=self.read_only)
            mf.wrote_position = mf.flushed_position = self.file_size
            self.files.append(mf)
        if not self.read_only and self.files:
            self.files[-1].ensure_allocated()

    def _stand_in(self, path: str, why: str) -> None:
        log.error("%s: segment %s: its offsets [%d, %d) are a gap; every other segment is served", path, why,
                  int(os.path.basename(path)), int(os.path.basename(path)) + self.file_size)
        self.files.append(MappedFile.stand_in_for(path, self.file_size, why))
        self.gaps.append((path, why))

    def _remove_creation_leftovers(self) -> None:
        parent = os.path.dirname(self.directory)
        prefix = f".{os.path.basename(self.directory)}."
        try:
            names = os.listdir(parent)
        except FileNotFoundError:
            return
        for n in names:
            if n.startswith(prefix) and n.endswith(".creating"):
                try:
                    os.unlink(os.path.join(parent, n))
                except OSError:
                    pass

    def refresh(self) -> tuple[list[MappedFile], list[MappedFile]]:
        """Read-only: follow a writer in another process. Segments created since the last look are
        mapped (only at their full size, in sequence); leading segments deleted by retention are
        dropped from the list (their mappings stay valid until closed). Returns ``(added, removed)``."""
        added: list[MappedFile] = []
        removed: list[MappedFile] = []
        with self._lock:
            while self.files and not os.path.exists(self.files[0].path):
                removed.append(self.files.pop(0))
            # trailing segments a writer's recovery deleted (and may have created again)
            while self.files and not self.files[-1].same_file_on_disk():
                removed.append(self.files.pop())
            have = {os.path.basename(mf.path) for mf in self.files}
            for name in self._names():
                if name in have:
                    continue
                start = int(name)
                if self.files and start <= self.files[-1].file_from_offset:
                    continue
                if self.files and start != self.files[-1].file_from_offset + self.file_size:
                    break
                path = os.path.join(self.directory, name)
                try:
                    if os.path.getsize(path) != self.file_size:
                        break
                    mf = MappedFile(path, self.file_size, read_only=self.read_only)
                except (FileNotFoundError, StoreIOError):
                    break
                mf.wrote_position = mf.flushed_position = 0
                self.files.append(mf)
                added.append(mf)
        return added, removed

    # --- lookup ------------------------------------------------------------------------------
    @property
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def find(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        first = files[0]
        idx = offset // self.file_size - first.file_from_offset // self.file_size
        if 0 <= idx < len(files):
            mf = files[idx]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        for mf in files:
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return first if return_first_on_not_found else None

    def __iter__(self) -> Iterator[MappedFile]:
        return iter(list(self.files))

    def __len__(self) -> int:
        return len(self.files)

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        last = self.last
        return last.file_from_offset + last.wrote_position if last else 0

    @property
    def flushed_where(self) -> int:
        """Global offset up to which every byte written is known to be flushed."""
        for mf in self.files:
            if mf.flushed_position < mf.wrote_position or not mf.is_full:
                return mf.file_from_offset + mf.flushed_position
        return self.max_offset

    # --- writing -----------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError("store is open read-only", path=self.directory)

    def create_file(self, start_offset: int) -> MappedFile:
        self._check_writable()
        with self._lock:
            os.makedirs(self.directory, exist_ok=True)
            path = os.path.join(self.directory, segment_name(start_offset))
            mf = MappedFile(path, self.file_size, create=True)
            self.files.append(mf)
            return mf

    def get_last_mapped_file(self, start_offset: int = 0, create: bool = True) -> MappedFile | None:
        """The last segment if it has room, else (with ``create``) a new one after it, or the first
        one at ``start_offset - start_offset % file_size`` when the queue is empty."""
        last = self.last
        if last is not None and not last.is_full:
            return last
        if not create:
            return last
        if last is None:
            return self.create_file(start_offset - start_offset % self.file_size)
        return self.create_file(last.file_from_offset + self.file_size)

    def truncate_dirty_files(self, offset: int) -> list[str]:
        """Drop segments that start after ``offset``; set the positions of the one holding it.
        Returns the paths deleted.

        Segments are deleted newest first, so a process killed in the middle (recovery itself can
        be interrupted) leaves a contiguous run of segments, never a hole that the next open would
        have to refuse; that open simply truncates again."""
        self._check_writable()
        removed = []
        with self._lock:
            keep = [mf for mf in self.files if mf.file_from_offset <= offset]
            for mf in reversed([mf for mf in self.files if mf.file_from_offset > offset]):
                removed.append(mf.path)
                mf.destroy()
            for mf in keep:
                if offset < mf.file_from_offset + self.file_size:
                    mf.truncate_positions(offset - mf.file_from_offset)
            self.files = keep
        removed.reverse()
        return removed

    def delete_first(self, mf: MappedFile, *, keep_mapped: bool = False) -> None:
        """Remove the first segment from the queue and its file from disk. ``keep_mapped`` leaves
        the mapping open for readers still holding it; the caller closes it later."""
        self._check_writable()
        with self._lock:
            self.files.remove(mf)
        if keep_mapped:
            mf.unlink()
        else:
            mf.destroy()

    def destroy(self) -> None:
        with self._lock:
            for mf in self.files:
                mf.destroy()
            self.files = []
            try:
                os.rmdir(self.directory)
            except OSError:
                pass

    def flush(self, least_pages: int = 0) -> int:
        """Flush every segment with unflushed bytes; returns the global flushed offset."""
        for mf in list(self.files):
            if mf.wrote_position > mf.flushed_position:
                mf.flush(least_pages)
        return self.flushed_where

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        self.files = []
