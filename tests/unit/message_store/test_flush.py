"""Flush modes, group commit, FLUSH_DISK_TIMEOUT, flush()/close(), the flusher thread.

The durability claim of SYNC_FLUSH is checked at the system-call boundary: every msync the store
makes is recorded (in order, after it returned), and every PUT_OK must come after an msync that
covered its record. A "power-loss image" of the store keeps only what was msync'd; recovering it
keeps every SYNC_FLUSH acknowledgement and loses ASYNC_FLUSH ones.
"""
from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from rmqstore import Message, MessageStore, MessageStoreConfig, PutMessageStatus
from rmqstore.format.checkpoint import CheckpointValues
from rmqstore.io import mapped_file as MFM
from tests import kit


GEOMETRY = dict(mapped_file_size_commit_log=32 * 1024, mapped_file_size_consume_queue=400, max_hash_slot_num=16,
                max_index_num=64)


def _nth(i: int) -> Message:
    """The i-th message of these tests (three queues, key k<i>, up to 199 bytes of body)."""
    return kit.msg("Flush", b"x" * (i % 200), i=i, queues=3)


class _MsyncLog:
    """Records (segment path, flushed position) after every MappedFile.flush returns."""

    def __init__(self, monkeypatch):
        self.entries: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        orig = MFM.MappedFile.flush
        log = self

        def flush(mf, least_pages: int = 0):
            out = orig(mf, least_pages)
            with log.lock:
                log.entries.append((mf.path, mf.flushed_position))
            return out

        monkeypatch.setattr(MFM.MappedFile, "flush", flush)

    def mark(self) -> int:
        with self.lock:
            return len(self.entries)

    def flushed(self, path: str, upto: int) -> int:
        return max((pos for p, pos in self.entries[:upto] if p == path), default=0)


def _put_threads(st, n_threads: int, per: int, log: _MsyncLog) -> list:
    acks, lock = [], threading.Lock()

    def run(t: int) -> None:
        for i in range(per):
            r = st.put_message(_nth(t * 1000 + i))
            mark = log.mark()
            with lock:
                acks.append((r, mark, t * 1000 + i))

    ts = [threading.Thread(target=run, args=(t,)) for t in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return acks


def _power_loss_image(cfg, src: str, dst: str, log: _MsyncLog) -> None:
    """A copy of the store in which every commitlog byte that no msync covered is lost (zero)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("lock", "*.creating"))
    cl = os.path.join(dst, "commitlog")
    for name in os.listdir(cl):
        keep = log.flushed(os.path.join(src, "commitlog", name), len(log.entries))
        with open(os.path.join(cl, name), "r+b") as fh:
            fh.seek(keep)
            fh.write(bytes(cfg.mapped_file_size_commit_log - keep))


def test_sync_flush_acknowledges_only_what_is_on_disk(tmp_path, monkeypatch):
    log = _MsyncLog(monkeypatch)
    cfg = kit.cfg(GEOMETRY, flush_disk_type="SYNC_FLUSH")
    path = str(tmp_path / "s")
    st = MessageStore.open(path, cfg)
    acks = _put_threads(st, 4, 60, log)
    assert all(r.status is PutMessageStatus.PUT_OK for r, _, _ in acks)
    for r, mark, _ in acks:
        seg, pos = kit.segment_of(path, r.phy_offset, cfg.mapped_file_size_commit_log)
        assert log.flushed(seg, mark) >= pos + r.wrote_bytes, "PUT_OK before its record was msync'd"
    # group commit: fewer msyncs of the commitlog than puts
    cl_syncs = sum(1 for p, _ in log.entries if os.sep + "commitlog" + os.sep in p)
    assert cl_syncs < len(acks)
    _power_loss_image(cfg, path, str(tmp_path / "img"), log)
    st.close()
    with MessageStore.open(str(tmp_path / "img"), cfg) as img:
        assert img.recovery_report.mode == "abnormal"
        for r, _, i in acks:
            rec = img.look_message_by_offset(r.phy_offset)
            assert rec is not None and rec.keys == [f"k{i}"]
            assert [m.phy_offset for m in img.query_message("Flush", f"k{i}").messages] == [r.phy_offset]
        assert img.verify() == []


def test_async_flush_acknowledges_before_disk(tmp_path, monkeypatch):
    log = _MsyncLog(monkeypatch)
    cfg = kit.cfg(GEOMETRY, flush_disk_type="ASYNC_FLUSH", flush_interval_commit_log=60_000,
                  flush_commit_log_thorough_interval=600_000)
    path = str(tmp_path / "s")
    st = MessageStore.open(path, cfg)
    acks = _put_threads(st, 2, 30, log)
    assert all(r.status is PutMessageStatus.PUT_OK for r, _, _ in acks)
    not_on_disk = []
    for r, mark, _ in acks:
        seg, pos = kit.segment_of(path, r.phy_offset, cfg.mapped_file_size_commit_log)
        if log.flushed(seg, mark) < pos + r.wrote_bytes:
            not_on_disk.append(r)
    assert not_on_disk, "ASYNC_FLUSH waited for the disk"
    _power_loss_image(cfg, path, str(tmp_path / "img"), log)
    # a process crash loses nothing (the page cache survives), a power loss loses the unflushed
    # (the dispatcher may be creating a segment meanwhile: its temporary file can vanish mid-copy)
    shutil.copytree(path, str(tmp_path / "kill9"), ignore=shutil.ignore_patterns("lock", "*.creating"))
    st.close()
    with MessageStore.open(str(tmp_path / "kill9"), cfg) as k9:
        assert all(k9.look_message_by_offset(r.phy_offset) is not None for r, _, _ in acks)
    with MessageStore.open(str(tmp_path / "img"), cfg) as img:
        lost = [r for r, _, _ in acks if img.look_message_by_offset(r.phy_offset) is None]
        assert lost
        assert img.verify() == []


def test_flush_disk_timeout(tmp_path, monkeypatch):
    cfg = kit.cfg(GEOMETRY, flush_disk_type="SYNC_FLUSH", sync_flush_timeout=200)
    orig = MFM.MappedFile.flush
    in_flush, follower_done = threading.Event(), threading.Event()

    def slow_flush(mf, least_pages: int = 0):
        if threading.current_thread().name == "leader" and os.sep + "commitlog" + os.sep in mf.path:
            in_flush.set()
            follower_done.wait(10)
        return orig(mf, least_pages)

    monkeypatch.setattr(MFM.MappedFile, "flush", slow_flush)
    res = {}
    with MessageStore.open(tmp_path / "s", cfg) as st:
        leader = threading.Thread(target=lambda: res.__setitem__("leader", st.put_message(_nth(1))), name="leader")
        leader.start()
        assert in_flush.wait(10)
        res["follower"] = st.put_message(_nth(2))
        follower_done.set()
        leader.join()
        assert res["follower"].status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert res["leader"].status is PutMessageStatus.PUT_OK
        # the timed-out message was appended and stays: it is flushed and dispatched later
        st.wait_dispatched(timeout=10)
        for key in ("leader", "follower"):
            assert st.look_message_by_offset(res[key].phy_offset) is not None
        assert [m.phy_offset for m in st.query_message("Flush", "k2").messages] == [res["follower"].phy_offset]


def test_async_flusher_flushes_on_its_own(tmp_path):
    cfg = kit.cfg(GEOMETRY, flush_disk_type="ASYNC_FLUSH", flush_interval_commit_log=10, flush_commit_log_least_pages=4,
                  flush_commit_log_thorough_interval=50, flush_interval_consume_queue=10,
                  flush_consume_queue_thorough_interval=50)
    with MessageStore.open(tmp_path / "s", cfg) as st:
        for i in range(20):  # far less than 4 pages: only the thorough flush writes it
            assert st.put_message(_nth(i)).ok
        deadline = time.monotonic() + 30
        while st.commit_log.flushed_offset < st.max_phy_offset and time.monotonic() < deadline:
            time.sleep(0.01)
        assert st.commit_log.flushed_offset == st.max_phy_offset
        st.wait_dispatched(timeout=10)
        while time.monotonic() < deadline and any(mf.flushed_position < mf.wrote_position
                                                  for cq in st.consume_queues.values() for mf in cq.queue.files):
            time.sleep(0.01)
        assert all(mf.flushed_position == mf.wrote_position for cq in st.consume_queues.values()
                   for mf in cq.queue.files)
        # the flusher writes the checkpoint after the consume queues: wait for it too
        # (the file itself is first written by the flusher: it may not exist yet)
        cp_path = os.path.join(st.path, "checkpoint")

        def logics_ts() -> int:
            return CheckpointValues.unpack(kit.read_bytes(cp_path)).logics_msg_timestamp if os.path.exists(cp_path) else 0

        while logics_ts() <= 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert logics_ts() > 0


def test_flush_and_clean_close(tmp_path):
    cfg = kit.cfg(GEOMETRY, flush_disk_type="ASYNC_FLUSH", flush_interval_commit_log=60_000,
                  flush_commit_log_thorough_interval=600_000)
    path = tmp_path / "s"
    with MessageStore.open(path, cfg) as st:
        assert os.path.exists(path / "abort")
        last = None
        for i in range(10):
            last = st.put_message(_nth(i))
        assert st.flush() == st.max_phy_offset == last.phy_offset + last.wrote_bytes
        cp = CheckpointValues.unpack(open(path / "checkpoint", "rb").read())
        assert cp.physic_msg_timestamp == last.store_timestamp
    assert not os.path.exists(path / "abort")
    with MessageStore.open(path, cfg) as st:
        rep = st.recovery_report
        assert rep.mode == "normal" and rep.clean and rep.records_redispatched == 0
        assert st.max_phy_offset == last.phy_offset + last.wrote_bytes


def test_close_keeps_abort_when_dispatch_cannot_finish(tmp_path, monkeypatch):
    """A shutdown with undispatched messages (here: no room for a consume-queue file) keeps the
    abort file, so the next open recovers them."""
    cfg = kit.cfg(GEOMETRY, flush_disk_type="SYNC_FLUSH")
    path = tmp_path / "s"
    real = os.posix_fallocate
    full = {"on": True}

    def fallocate(fd, off, n):
        if full["on"] and os.sep + "consumequeue" + os.sep in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(28, "No space left on device")
        return real(fd, off, n)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    st = MessageStore.open(path, cfg)
    puts = [st.put_message(_nth(i)) for i in range(5)]
    assert all(r.ok for r in puts)
    st.close()
    assert os.path.exists(path / "abort")
    full["on"] = False
    with MessageStore.open(path, cfg) as st:
        assert st.recovery_report.mode == "abnormal"
        for i, r in enumerate(puts):
            g = st.get_message("t", "Flush", i % 3, r.queue_offset, 1)
            assert [m.phy_offset for m in g.messages] == [r.phy_offset]
        assert st.verify() == []


@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_flush_disk_type_from_broker_conf(tmp_path, mode):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"flushDiskType={mode}\nsyncFlushTimeout=1234\nflushIntervalCommitLog=77\n")
    cfg = MessageStoreConfig.from_properties(str(conf), mapped_file_size_commit_log=4096)
    assert (cfg.flush_disk_type, cfg.sync_flush_timeout, cfg.flush_interval_commit_log) == (mode, 1234, 77)
    with MessageStore.open(tmp_path / "s", cfg) as st:
        assert st.put_message(_nth(1)).status is PutMessageStatus.PUT_OK
