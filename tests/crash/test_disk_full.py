"""A full disk: puts return an error status, nothing is half-written, the store stays consistent
and takes messages again once space returns.

The first test uses a real small filesystem (a 3 MiB tmpfs) when this machine lets it mount one,
and otherwise (or with ``RMQ_TEST_NO_MOUNT=1``) makes ``posix_fallocate`` fail with ENOSPC; the others target one kind of file (a
commitlog segment, a consume-queue file, an index file) with the patched call.
"""
from __future__ import annotations

import errno
import os
import subprocess
import time

import pytest

import crashkit as K

from rmqstore import MessageStore, PutMessageStatus, StoreIOError


class _Disk:
    """Where the store lives and how its space is taken away and given back."""

    def __init__(self, root, monkeypatch):
        self.root = str(root)
        self.mp = monkeypatch
        self.full_for: tuple[str, ...] | None = None
        self.real = False
        self.filler = None

    def mount(self, try_real: bool = True) -> None:
        os.makedirs(self.root, exist_ok=True)
        if try_real and not os.environ.get("RMQ_TEST_NO_MOUNT"):
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", self.root], capture_output=True)
            self.real = r.returncode == 0
        if not self.real:
            real_fallocate = os.posix_fallocate

            def fallocate(fd, offset, length):
                if self.full_for is not None:
                    target = os.readlink(f"/proc/self/fd/{fd}")
                    if any(part in target for part in self.full_for):
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return real_fallocate(fd, offset, length)

            self.mp.setattr(os, "posix_fallocate", fallocate)

    def fill(self, leave: int, kinds: tuple[str, ...] = ("",)) -> None:
        if self.real:
            st = os.statvfs(self.root)
            free = st.f_bavail * st.f_frsize
            self.filler = os.path.join(self.root, "filler")
            with open(self.filler, "wb") as fh:
                os.posix_fallocate(fh.fileno(), 0, max(0, free - leave))
        else:
            self.full_for = kinds

    def free(self) -> None:
        if self.filler:
            os.unlink(self.filler)
            self.filler = None
        self.full_for = None

    def unmount(self) -> None:
        if self.real:
            subprocess.run(["umount", "-l", self.root], capture_output=True)


@pytest.fixture
def disk(tmp_path, monkeypatch):
    d = _Disk(tmp_path / "disk", monkeypatch)
    d.mount()
    yield d
    d.unmount()


@pytest.fixture
def patched_disk(tmp_path, monkeypatch):
    d = _Disk(tmp_path / "disk", monkeypatch)
    d.mount(try_real=False)
    return d


def _wait_dispatched(st, timeout: float = 30.0) -> None:
    """Dispatch restarts by itself after space returns (at most once a second)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            st.wait_dispatched(timeout=5)
            return
        except StoreIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _check_all(st, acked) -> None:
    for wid, seq, phy, qoff in acked:
        rec = st.look_message_by_offset(phy)
        assert K.check_record(rec)[:2] == (wid, seq)
        g = st.get_message("t", rec.topic, rec.queue_id, qoff, 1)
        assert [m.phy_offset for m in g.messages] == [phy]
    for wid, seq, phy, _ in acked[-20:]:
        e = K.expected(wid, seq, seq)
        assert [m.phy_offset for m in st.query_message(e["topic"], e["keys"][0]).messages] == [phy]


def _put_until_refused(st, wid: int, acked: list, limit: int = 20000):
    for seq in range(limit):
        r = st.put_message(K.message_for(wid, seq, seq))
        if not r.ok:
            return r, seq
        acked.append((wid, seq, r.phy_offset, r.queue_offset))
    raise AssertionError("the disk never filled")


def test_disk_full_then_space_returns(disk):
    cfg = K.crash_config(flush_interval_commit_log=20, flush_interval_consume_queue=20)
    path = os.path.join(disk.root, "store")
    acked: list = []
    with MessageStore.open(path, cfg) as st:
        for seq in range(50):
            r = st.put_message(K.message_for(1, seq, seq))
            assert r.ok
            acked.append((1, seq, r.phy_offset, r.queue_offset))
        disk.fill(leave=200 * 1024)
        r, seq = _put_until_refused(st, 2, acked)
        assert r.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED, r
        assert "space" in (r.error or "").lower(), r.error
        end = st.max_phy_offset
        for _ in range(5):  # refused again and again, nothing written meanwhile
            assert not st.put_message(K.message_for(3, 0, 0)).ok
        assert st.max_phy_offset == end
        for wid, s, phy, _ in acked:  # everything acknowledged is still readable
            assert K.check_record(st.look_message_by_offset(phy))[:2] == (wid, s)
        disk.free()
        r = st.put_message(K.message_for(2, seq, seq))
        assert r.ok, r
        acked.append((2, seq, r.phy_offset, r.queue_offset))
        _wait_dispatched(st)
        _check_all(st, acked)
        assert st.verify() == []
    with MessageStore.open(path, cfg) as st:
        assert st.recovery_report.mode == "normal" and st.recovery_report.clean
        _check_all(st, acked)
        assert st.verify() == []


@pytest.mark.parametrize("kind", ["consumequeue", "index"])
def test_derived_file_creation_fails(patched_disk, kind):
    """A consume-queue or index file cannot be created: puts still succeed (the commitlog has
    room), dispatch stops with a typed error, and catches up once space returns."""
    disk = patched_disk
    cfg = K.crash_config(flush_interval_commit_log=20, flush_interval_consume_queue=20)
    path = os.path.join(disk.root, "store")
    acked: list = []
    with MessageStore.open(path, cfg) as st:
        disk.fill(leave=0, kinds=(os.sep + kind + os.sep, f".{kind}.") if kind == "index" else
                  (os.sep + kind + os.sep,))
        for seq in range(400):  # enough to need new consume-queue and index files
            r = st.put_message(K.message_for(1, seq, seq))
            assert r.ok, r
            acked.append((1, seq, r.phy_offset, r.queue_offset))
        with pytest.raises(StoreIOError):
            st.wait_dispatched(timeout=10)
        disk.free()
        _wait_dispatched(st)
        _check_all(st, acked)
        assert st.verify() == []
    with MessageStore.open(path, cfg) as st:
        assert st.recovery_report.clean
        _check_all(st, acked)
