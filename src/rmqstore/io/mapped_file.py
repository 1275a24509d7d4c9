"""One fixed-size memory-mapped segment file (mirrors ``DefaultMappedFile``).

The file always has exactly ``file_size`` bytes on disk, zero-filled. Positions
(``wrote_position``, ``flushed_position``) are kept in memory; recovery sets them. A read-only
file is mapped with ``ACCESS_READ`` and can never be modified through this object.

Durability rules kept here (beyond upstream, which creates sparse files):

* **Created whole, atomically.** A new segment is sized and its blocks reserved
  (``posix_fallocate``) under a temporary name beside its directory, then renamed into place and
  the directory fsync'd. Other processes never see a short file, and a full disk shows up as a
  :class:`StoreIOError` when a segment is created, never as a ``SIGBUS`` when a mapped page is
  first written (writing a hole of a mapped file on a full disk kills the process).
* **Published last.** :meth:`append` writes everything but the first 8 bytes (TOTALSIZE and
  MAGIC of a commitlog record, the phy offset of a consume-queue unit) first, then those 8 bytes.
  A process killed in the middle, or a reader in another process, sees either nothing (a zero
  header = end of data) or the whole append.
"""
from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import threading

import numpy as np

from ..errors import CorruptRecordError, ReadOnlyStoreError, StoreIOError
from . import paths

log = logging.getLogger(__name__)

PAGE = mmap.PAGESIZE
OS_PAGE_SIZE = 4096
#: First bytes of an append written last (TOTALSIZE + MAGIC of a record).
PUBLISH_BYTES = 8
#: Writes at least this long use ``pwrite`` instead of a copy into the mapping (see ``write_at``).
PWRITE_MIN = 4096
#: ``madvise`` advice that faults pages in writable (Linux 5.14+)
MADV_POPULATE_WRITE = 23


def _libc_madvise():
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):  # pragma: no cover - not a glibc/musl platform
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


#: libc ``madvise`` through ctypes, which releases the GIL for the call (None once unsupported)
_madvise = _libc_madvise()


def fsync_dir(path: str) -> None:
    """fsync a directory so that entries created, renamed or removed in it survive a power loss."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


_DIRTY_DIRS: set[str] = set()
_DIRTY_LOCK = threading.Lock()


def atomic_write_text(path: str, text: str, *, keep_bak: bool = False) -> None:
    """Replace ``path`` with ``text`` atomically: a temporary file, fsync'd, renamed into place, then
    the directory fsync'd (with ``keep_bak`` the previous file becomes ``path.bak`` first)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    if keep_bak and os.path.exists(path):
        os.replace(path, path + ".bak")
    os.replace(tmp, path)
    fsync_dir(directory)


def fsync_dirty_dirs() -> None:
    """fsync the directories that received new segments since the last call (consume-queue and
    index files are created without waiting for it; the store calls this before it writes the
    checkpoint and at close, so the checkpoint never refers to a file a power loss could drop)."""
    with _DIRTY_LOCK:
        dirs = list(_DIRTY_DIRS)
        _DIRTY_DIRS.clear()
    for d in dirs:
        fsync_dir(d)


def _syncs_at_once(path: str) -> bool:
    """Commitlog segments: their directory is fsync'd before any record in them is acknowledged."""
    return os.path.basename(os.path.dirname(path)) == paths.COMMITLOG


def temp_path_for(path: str) -> str:
    """Where a new segment is prepared: the parent of its directory, under a hidden name that no
    loader takes for a segment (``commitlog/X`` -> ``.commitlog.X.creating`` in the store root)."""
    seg_dir = os.path.dirname(path)
    return os.path.join(os.path.dirname(seg_dir), f".{os.path.basename(seg_dir)}.{os.path.basename(path)}.creating")


def preallocate(fd: int, size: int, path: str) -> None:
    """Reserve the blocks of ``[0, size)`` (:class:`StoreIOError` on ENOSPC and other faults;
    filesystems that cannot preallocate are left sparse)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return
        err = StoreIOError(f"cannot reserve {size} bytes for a segment: {e.strerror}", path=path)
        err.errno = e.errno
        raise err from e


class MappedFile:
    """A segment named by its 20-digit start offset."""

    __slots__ = ("path", "file_size", "file_from_offset", "read_only", "mm", "_fd", "wrote_position",
                 "flushed_position", "_u8", "_lock", "last_store_timestamp", "closed", "stand_in")

    def __init__(self, path: str, file_size: int, *, read_only: bool = False, create: bool = False):
        self._init_fields(path, file_size, read_only)
        if create and not read_only and not os.path.exists(path):
            self._fd = self._create(path, file_size)
        else:
            try:
                if read_only:
                    self._fd = os.open(path, os.O_RDONLY)
                else:
                    self._fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
            except OSError as e:
                err = StoreIOError(f"cannot open segment: {e.strerror}", path=path)
                err.errno = e.errno
                raise err from e
        try:
            size = os.fstat(self._fd).st_size
            if create and size == 0:
                os.ftruncate(self._fd, file_size)
                preallocate(self._fd, file_size, path)
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

    def _init_fields(self, path: str, file_size: int, read_only: bool) -> None:
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
        self.stand_in = ""

    @classmethod
    def stand_in_for(cls, path: str, file_size: int, why: str) -> "MappedFile":
        """A read-only stand-in for a segment that is missing or short in the middle of its queue:
        an anonymous mapping of the full size holding what is left of the file (nothing, or its
        first bytes), zeros after. The walkers treat its zeros as a known gap, not as the end of
        the data; nothing is written to it or to the disk for it (``stand_in`` says why it is one).
        Untouched zero pages of an anonymous mapping take no memory."""
        mm = mmap.mmap(-1, file_size)
        try:
            with open(path, "rb") as fh:
                data = fh.read(file_size)
        except FileNotFoundError:
            data = b""
        except OSError as e:
            mm.close()
            raise StoreIOError(f"cannot read segment: {e.strerror}", path=path) from e
        mm[:len(data)] = data
        return cls.holding(path, file_size, mm, why)

    @classmethod
    def holding(cls, path: str, file_size: int, mm: mmap.mmap, why: str) -> "MappedFile":
        """A read-only segment over an anonymous mapping ``mm`` of ``file_size`` bytes already filled
        (a stand-in, or a remote file's ranged reads); closing it closes ``mm``."""
        mf = cls.__new__(cls)
        mf._init_fields(path, file_size, True)
        mf.wrote_position = mf.flushed_position = file_size
        mf._fd = -1
        mf.stand_in = why
        mf.mm = mm
        return mf

    @staticmethod
    def _create(path: str, file_size: int) -> int:
        """Create ``path`` at full size with its blocks reserved, atomically (see module doc)."""
        tmp = temp_path_for(path)
        fd = -1
        try:
            try:
                os.unlink(tmp)  # a leftover of a crash during an earlier creation
            except FileNotFoundError:
                pass
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            os.ftruncate(fd, file_size)
            preallocate(fd, file_size, path)
            os.rename(tmp, path)
        except BaseException as e:
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if isinstance(e, StoreIOError):
                raise
            if isinstance(e, OSError):
                err = StoreIOError(f"cannot create segment: {e.strerror}", path=path)
                err.errno = e.errno
                raise err from e
            raise
        if _syncs_at_once(path):
            fsync_dir(os.path.dirname(path))
        else:
            with _DIRTY_LOCK:
                _DIRTY_DIRS.add(os.path.dirname(path))
        return fd

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
        if self._fd < 0:  # a stand-in: the file's own time if what is left of it is there
            try:
                return os.stat(self.path).st_mtime
            except OSError:
                return 0.0
        return os.fstat(self._fd).st_mtime

    def same_file_on_disk(self) -> bool:
        """True while ``path`` still names the file this object maps (a stand-in: always)."""
        if self._fd < 0:
            return True
        try:
            return os.stat(self.path).st_ino == os.fstat(self._fd).st_ino
        except (FileNotFoundError, OSError):
            return False

    def ensure_allocated(self) -> None:
        """Reserve this file's blocks if it was created sparse (by upstream or an older rmqstore),
        so that writes through the mapping cannot hit a full disk. Best effort: logs on failure."""
        if self.read_only:
            return
        try:
            preallocate(self._fd, self.file_size, self.path)
        except StoreIOError as e:
            log.warning("cannot preallocate %s (writes into holes may fail when the disk fills): %s", self.path, e)

    # --- writing -----------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError("segment is mapped read-only", path=self.path)

    def write_at(self, pos: int, data, publish_last: bool = True) -> None:
        """Write ``data`` at ``pos`` (no position changes), its first 8 bytes last like
        :meth:`append`: a batch of records written at once appears whole or not at all (a reader
        finds no record until its TOTALSIZE and MAGICCODE are there). ``publish_last=False``
        writes the bytes in order in one copy instead, for data whose first bytes must not be
        the last to appear (consume-queue units: a reader in another process checks each unit
        against its record, and must not find a later unit written while the first one is not).

        Large writes go through ``pwrite`` on the file rather than a copy into the mapping: the
        page cache is the same (readers of the mapping see the bytes), but the kernel fills fresh
        pages without a page fault per 4 KiB (a first write through a shared mapping costs 1.4 us a
        page or more with the GIL held: bench/page_faults.py), the GIL is released during the copy, and a full disk is an
        ``OSError`` rather than a ``SIGBUS``."""
        self._check_writable()
        n = len(data)
        if not publish_last:
            if n >= PWRITE_MIN:
                self._pwrite_all(memoryview(data), pos)
            else:
                self.mm[pos:pos + n] = data
        elif n >= PWRITE_MIN:
            mv = memoryview(data)
            self._pwrite_all(mv[PUBLISH_BYTES:], pos + PUBLISH_BYTES)
            self.mm[pos:pos + PUBLISH_BYTES] = mv[:PUBLISH_BYTES]
        elif n > PUBLISH_BYTES:
            mv = memoryview(data)
            self.mm[pos + PUBLISH_BYTES:pos + n] = mv[PUBLISH_BYTES:]
            self.mm[pos:pos + PUBLISH_BYTES] = mv[:PUBLISH_BYTES]
        else:
            self.mm[pos:pos + n] = data

    def pwrite(self, pos: int, data) -> None:
        """Write ``data`` at ``pos`` through the file (``pwrite``, the GIL released), whatever its size."""
        self._check_writable()
        self._pwrite_all(memoryview(data), pos)

    def _pwrite_all(self, mv: memoryview, pos: int) -> None:
        if pos < 0 or pos + len(mv) > self.file_size:
            raise StoreIOError(f"write of {len(mv)} bytes at {pos} overflows the segment", path=self.path, offset=pos)
        while len(mv):
            k = os.pwrite(self._fd, mv, pos)
            if k <= 0:  # pragma: no cover - regular files write at least one byte or raise
                raise StoreIOError(f"pwrite wrote nothing at {pos}", path=self.path, offset=pos)
            mv, pos = mv[k:], pos + k

    def append(self, data, publish_last: bool = True) -> int:
        """Write at the write position (as :meth:`write_at`); returns the position written at."""
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            raise StoreIOError(f"append of {n} bytes at {pos} overflows the segment", path=self.path, offset=pos)
        self.write_at(pos, data, publish_last)
        self.wrote_position = pos + n
        return pos

    def populate(self, start: int, end: int) -> bool:
        """Fault ``[start, end)`` in for writing ahead of use, without holding the GIL
        (``MADV_POPULATE_WRITE``): random writes into it through the mapping (an index file's
        slot table) then take no first-write page fault with the GIL held (1.4 us a page or more:
        bench/page_faults.py; populating costs more CPU, but none of it holds the GIL).
        False where the kernel cannot (before Linux 5.14); nothing else changes then."""
        global _madvise
        if _madvise is None or self.read_only or self.closed:
            return False
        start -= start % PAGE
        end = min(end, self.file_size)
        if end <= start:
            return True
        addr = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        if _madvise(addr + start, end - start, MADV_POPULATE_WRITE) == 0:
            return True
        if ctypes.get_errno() == errno.EINVAL:
            _madvise = None
        return False

    def flush(self, least_pages: int = 0) -> int:
        """Flush (fdatasync) if at least ``least_pages`` 4 KiB pages are dirty (or the file is
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
                # fdatasync, not mmap.flush(): CPython's msync keeps the GIL for the whole
                # write-back, freezing every producer (and defeating group commit). On Linux the
                # pages written through the shared mapping are dirty page-cache pages of this file,
                # which fdatasync writes back the same way msync(MS_SYNC) would.
                os.fdatasync(self._fd)
            except OSError as e:
                raise StoreIOError(f"fdatasync failed: {e.strerror}", path=self.path, offset=start) from e
            self.flushed_position = wrote
            return wrote

    def truncate_positions(self, pos: int) -> None:
        """Set write/flush positions (recovery); zero the bytes after ``pos`` up to the old end."""
        self.wrote_position = pos
        self.flushed_position = min(self.flushed_position, pos)

    def zero_from(self, pos: int, end: int | None = None) -> None:
        """Zero ``[pos, end)``, touching (and dirtying) only the chunks that hold non-zero bytes."""
        self._check_writable()
        end = self.file_size if end is None else end
        step = 1 << 20
        zeros = bytes(step)
        u8 = self.u8
        p = pos
        while p < end:
            n = min(step, end - p)
            if u8[p:p + n].any():
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
        if self._fd >= 0:
            os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        self.unlink()

    def unlink(self) -> None:
        """Remove the file from its directory but keep the mapping (readers holding this object
        keep reading valid bytes; :meth:`close` later releases the space)."""
        if self.stand_in and not os.path.exists(self.path):
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, wrote={self.wrote_position}, flushed={self.flushed_position})"
