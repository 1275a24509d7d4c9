"""MessageStore open/close, lock, read-only mode and faults (its configuration: tests/unit/test_config.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from rmqstore import (ConfigError, CorruptRecordError, MessageIdError, MessageStore, OffsetError,
                      PutMessageStatus, ReadOnlyStoreError, RmqStoreError, StoreClosedError, StoreLockedError,
                      StoreNotFoundError)
from tests.kit import msg


def test_second_writer_in_the_same_process_is_refused(open_store, store_dir):
    st = open_store()
    with pytest.raises(StoreLockedError) as ei:
        MessageStore.open(store_dir, st.cfg)
    assert ei.value.path == os.path.join(str(store_dir), "lock")
    assert isinstance(ei.value, RuntimeError) and isinstance(ei.value, RmqStoreError)
    assert st.put_message(msg()).status is PutMessageStatus.PUT_OK  # the first writer is unaffected
    with MessageStore.open(store_dir, st.cfg, read_only=True) as ro:  # readers take no lock
        assert ro.read_only


def test_second_writer_in_another_process_is_refused(open_store, store_dir):
    open_store()
    code = ("import sys\nfrom rmqstore import MessageStore, MessageStoreConfig\n"
            "try:\n    MessageStore.open(sys.argv[1], MessageStoreConfig(mapped_file_size_commit_log=4096))\n"
            "except Exception as e:\n    print(type(e).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code, str(store_dir)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "StoreLockedError", out.stderr


def test_lock_abort_and_reopen(store_dir, small_config):
    st = MessageStore.open(store_dir, small_config)
    assert (store_dir / "abort").exists()
    with open(store_dir / "lock", "rb") as fh:
        assert fh.read() == b"lock"
    r = [st.put_message(msg("A", f"{i}".encode(), queue_id=i % 2)) for i in range(5)]
    st.close()
    st.close()  # idempotent
    assert not (store_dir / "abort").exists()
    with MessageStore.open(store_dir, small_config) as again:
        assert again.recovery_report.mode == "normal"
        assert (again.get_max_offset_in_queue("A", 0), again.get_max_offset_in_queue("A", 1)) == (3, 2)
        nxt = again.put_message(msg("A", b"5", queue_id=1))
        assert (nxt.queue_offset, nxt.phy_offset) == (2, r[-1].phy_offset + r[-1].wrote_bytes)
        again.wait_dispatched()
        assert [m.body for m in again.get_message("g", "A", 1, 0).messages] == [b"1", b"3", b"5"]


def test_close_after_the_dispatcher_was_shut_down_dispatches_the_rest(store_dir, small_config):
    st = MessageStore.open(store_dir, small_config)
    st.reput.shutdown()
    assert st.reput.stopped
    assert st.put_messages([msg("A", b"%d" % i, queue_id=1, props={"KEYS": f"k{i}"}) for i in range(4)]).status \
        is PutMessageStatus.PUT_OK
    assert st.get_max_offset_in_queue("A", 1) == 0  # nothing dispatched yet
    t = time.monotonic()
    st.close()  # dispatches itself (it used to wait 60 s for the stopped thread, then leave abort)
    assert time.monotonic() - t < 10
    assert not (store_dir / "abort").exists()
    with MessageStore.open(store_dir, small_config, read_only=True) as ro:
        assert ro.recovery_report.mode == "normal" and ro.get_max_offset_in_queue("A", 1) == 4
        assert [m.body for m in ro.query_message("A", "k2").messages] == [b"2"]


def test_closed_store_refuses_work(store_dir, small_config):
    st = MessageStore.open(store_dir, small_config)
    st.close()
    for call in (lambda: st.put_message(msg()), lambda: st.get_message("g", "T", 0, 0),
                 lambda: st.look_message_by_offset(0), lambda: st.query_message("T", "k"),
                 lambda: st.wait_dispatched()):
        with pytest.raises(StoreClosedError):
            call()


def test_read_only_mode(open_store, store_dir, small_config):
    with MessageStore.open(store_dir, small_config) as st:
        st.put_message(msg())
    before = {p: os.path.getmtime(store_dir / p) for p in ("checkpoint", "lock")}
    ro = open_store(read_only=True)
    with pytest.raises(ReadOnlyStoreError) as ei:
        ro.put_message(msg())
    assert isinstance(ei.value, PermissionError)
    with pytest.raises(ReadOnlyStoreError):
        ro.put_messages([msg()])
    ro.wait_dispatched()  # nothing to wait for
    assert ro.get_max_offset_in_queue("T", 0) == 1
    assert not (store_dir / "abort").exists()
    assert before == {p: os.path.getmtime(store_dir / p) for p in before}


def test_read_only_open_of_something_that_is_not_a_store(tmp_path, small_config):
    with pytest.raises(StoreNotFoundError):
        MessageStore.open(tmp_path / "missing", small_config, read_only=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError) as ei:
        MessageStore.open(tmp_path / "empty", small_config, read_only=True)
    assert isinstance(ei.value, FileNotFoundError)
    assert not os.listdir(tmp_path / "empty")


def test_wrong_segment_size_config_is_reported(store_dir, small_config):
    with MessageStore.open(store_dir, small_config) as st:
        st.put_message(msg())
    with pytest.raises(ConfigError) as ei:  # a contradicting config names both sizes
        MessageStore.open(store_dir, small_config.replace(mapped_file_size_commit_log=8192))
    assert ei.value.path == str(store_dir)
    assert f"{small_config.mapped_file_size_commit_log} bytes" in str(ei.value) and "says 8192" in str(ei.value)
    with MessageStore.open(store_dir, small_config) as st:  # the failed open released the lock
        assert st.get_max_offset_in_queue("T", 0) == 1


def test_corrupt_bytes_raise_with_path_and_offset(open_store, store_dir):
    st = open_store()
    rs = [st.put_message(msg(body=f"body{i}".encode())) for i in range(3)]
    st.wait_dispatched()
    seg = str(store_dir / "commitlog" / "00000000000000000000")
    with pytest.raises(CorruptRecordError) as ei:
        st.look_message_by_offset(rs[1].phy_offset + 1)  # not a record start
    assert (ei.value.path, ei.value.offset) == (seg, rs[1].phy_offset + 1)
    assert f"offset={rs[1].phy_offset + 1}" in str(ei.value) and seg in str(ei.value)
    fd = os.open(seg, os.O_RDWR)
    try:
        os.pwrite(fd, b"\x12\x34\x56\x78", rs[2].phy_offset + 4)  # the magic code of the third record
    finally:
        os.close(fd)
    with pytest.raises(CorruptRecordError) as ei:
        st.look_message_by_offset(rs[2].phy_offset)
    assert (ei.value.path, ei.value.offset) == (seg, rs[2].phy_offset)
    assert st.look_message_by_offset(rs[0].phy_offset).body == b"body0"  # the rest still reads


def test_view_message_by_bad_id(open_store):
    st = open_store()
    r = st.put_message(msg())
    with pytest.raises(MessageIdError):  # a malformed id is the caller's mistake, not damage
        st.view_message_by_id("zz")
    assert st.view_message_by_id(r.msg_id[:-16] + f"{r.wrote_bytes:016X}") is None  # past the data
    with pytest.raises(CorruptRecordError) as ei:
        st.view_message_by_id(r.msg_id[:-1] + "5")  # offset 5 is inside the first record
    assert ei.value.offset == 5
    with pytest.raises(OffsetError):
        st.commit_log.read_record(10**6)


def test_read_only_open_with_a_wrong_segment_size_is_reported(store_dir, small_config):
    with MessageStore.open(store_dir, small_config) as st:
        st.put_message(msg())
    with pytest.raises(ConfigError):
        MessageStore.open(store_dir, small_config.replace(mapped_file_size_commit_log=8192), read_only=True).close()


def test_a_read_only_open_of_a_live_writers_store_is_live_not_abnormal(store_dir, small_config):
    """A reader of a store a writer has open (its abort file means "running") reports mode "live";
    the same files without a live writer (a crash) are "abnormal"; after a clean close "normal"."""
    w = MessageStore.open(store_dir, small_config)
    try:
        for i in range(5):
            w.put_message(msg("T", i=i))
        w.wait_dispatched()
        with MessageStore.open(store_dir, small_config, read_only=True) as ro:
            rep = ro.recovery_report
            assert ro.live_writer_pid == os.getpid() and rep.mode == "live" and not rep.applied
            assert rep.summary().startswith("live store") and "recovery" not in rep.summary()
            assert ro.recovery_plan.abnormal  # the plan is the abnormal one, for the reader's view only
            assert ro.get_max_offset_in_queue("T", 0) == 5
    finally:
        w.close()
    with MessageStore.open(store_dir, small_config, read_only=True) as ro:
        assert ro.recovery_report.mode == "normal"
