"""The embedded preset (a store that fits a laptop and keeps what it was given) against RocketMQ's
broker preset; segment sizes inferred from an existing store's files; lifecycles."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from rmqstore import ConfigError, Message, MessageStore, MessageStoreConfig, PutMessageStatus
from rmqstore.config import BROKER, EMBEDDED
from rmqstore.engine import retention as RT

SMALL = dict(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=20 * 16, max_hash_slot_num=16,
             max_index_num=64)


def _allocated(path) -> int:
    """Bytes of disk the files under ``path`` occupy (``du``: allocated blocks, not sizes)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def test_a_new_store_without_config_is_embedded_and_small(tmp_path):
    with MessageStore.open(tmp_path / "s") as st:
        assert st.cfg.disk_policy == EMBEDDED and not st.cfg.time_based_retention
        assert st.cfg.mapped_file_size_commit_log == 32 * 1024 * 1024
        assert st.put_message(Message.create("Orders", b"hello", keys=["k"])).status is PutMessageStatus.PUT_OK
        st.wait_dispatched()
        used = _allocated(tmp_path / "s")
    assert used < 100 * 1024 * 1024, f"{used / 1e6:.1f} MB allocated for one message"
    assert used >= 32 * 1024 * 1024  # the commitlog segment is reserved whole (no SIGBUS on a full disk)


def test_broker_settings_keep_rocketmqs_defaults_and_policies(tmp_path):
    cfg = MessageStoreConfig.from_properties({"brokerName": "b"})
    assert cfg.disk_policy == BROKER and cfg.time_based_retention
    assert cfg == MessageStoreConfig()
    assert (cfg.mapped_file_size_commit_log, cfg.cq_file_size, cfg.index_file_size) == (1 << 30, 6_000_000, 420_000_040)
    assert MessageStoreConfig.embedded().replace(disk_policy=BROKER).disk_policy == BROKER
    with pytest.raises(ConfigError):
        MessageStoreConfig(disk_policy="laptop")


def test_embedded_with_a_retention_deletes_by_time():
    assert not MessageStoreConfig.embedded().time_based_retention
    cfg = MessageStoreConfig.embedded(file_reserved_time=24)
    assert cfg.time_based_retention and cfg.file_reserved_time == 24 and cfg.disk_policy == EMBEDDED


def test_an_existing_store_is_opened_with_its_own_sizes(tmp_path):
    path = tmp_path / "s"
    with MessageStore.open(path, MessageStoreConfig(**SMALL)) as st:
        for i in range(40):
            st.put_message(Message.create("T", b"x" * 100, keys=[f"k{i}"]))
    with MessageStore.open(path) as st:  # no config: sizes from the files, the embedded policy
        assert (st.cfg.mapped_file_size_commit_log, st.cfg.cq_file_size) == (4096, 320)
        assert (st.cfg.max_hash_slot_num, st.cfg.max_index_num) == (16, 64)
        assert st.cfg.disk_policy == EMBEDDED
        assert st.get_max_offset_in_queue("T", 0) == 40 and len(st.query_message("T", "k39").messages) == 1
    with MessageStore.open(path, read_only=True) as ro:
        assert ro.get_max_offset_in_queue("T", 0) == 40


@pytest.mark.parametrize("change, named", [
    (dict(mapped_file_size_commit_log=8192), "commitlog segments are 4096 bytes but the config says 8192"),
    (dict(mapped_file_size_consume_queue=20 * 32), "consume-queue files are 320 bytes but the config says 640"),
    (dict(max_hash_slot_num=32, max_index_num=128), "index files are 1384 bytes but the config says 2728"),
])
def test_an_explicit_config_that_contradicts_the_files_names_both(tmp_path, change, named):
    path = tmp_path / "s"
    with MessageStore.open(path, MessageStoreConfig(**SMALL)) as st:
        st.put_message(Message.create("T", b"x", keys=["k"]))
    for read_only in (False, True):
        with pytest.raises(ConfigError) as e:
            MessageStore.open(path, MessageStoreConfig(**{**SMALL, **change}), read_only=read_only)
        assert named in str(e.value) and e.value.path == str(path)
    with MessageStore.open(path, MessageStoreConfig(**SMALL)) as st:  # nothing was locked or changed
        assert st.get_max_offset_in_queue("T", 0) == 1


def _store_with_old_segments(path, cfg, n=40):
    st = MessageStore.open(path, cfg)
    for i in range(n):
        assert st.put_message(Message.create("T", b"x" * 200, keys=[f"k{i}"])).ok
    st.wait_dispatched()
    old = time.time() - 30 * 24 * 3600
    for mf in st.commit_log.queue.files:
        os.utime(mf.path, (old, old))
    return st


def _every_hour(**kw):
    return dict(SMALL, delete_when=";".join(f"{h:02d}" for h in range(24)), file_reserved_time=1, **kw)


def test_embedded_never_deletes_because_of_disk_usage_or_age(tmp_path, monkeypatch):
    monkeypatch.setattr(RT, "disk_used_ratio", lambda path: 0.91)  # past every broker ratio
    cfg = MessageStoreConfig.embedded(**{k: v for k, v in _every_hour().items() if k != "file_reserved_time"})
    st = _store_with_old_segments(tmp_path / "e", cfg)
    try:
        before = len(st.commit_log.queue.files)
        res = st.clean_expired(dry_run=False)
        assert not res.commitlog_files and not res.clean_immediately and not res.disk_full
        assert len(st.commit_log.queue.files) == before > 1
        assert st.put_message(Message.create("T", b"still writable")).ok
        assert st.get_message("g", "T", 0, 0, 1).messages[0].body == b"x" * 200
    finally:
        st.close()
    # the broker preset on the same disk deletes the old segments and refuses puts, as upstream
    st = _store_with_old_segments(tmp_path / "b", MessageStoreConfig(**_every_hour()))
    try:
        res = st.clean_expired(dry_run=False)
        assert res.commitlog_files and res.disk_full
        assert st.put_message(Message.create("T", b"refused")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    finally:
        st.close()


def test_embedded_with_a_retention_deletes_expired_segments(tmp_path):
    st = _store_with_old_segments(tmp_path / "e", MessageStoreConfig.embedded(**_every_hour()))
    try:
        res = st.clean_expired(dry_run=False)
        assert res.commitlog_files and not res.clean_immediately
    finally:
        st.close()


def test_embedded_refuses_puts_only_when_the_next_files_do_not_fit(tmp_path, monkeypatch):
    st = MessageStore.open(tmp_path / "s", MessageStoreConfig.embedded(**SMALL))
    try:
        need = 4096 + 320 + (40 + 16 * 4 + 64 * 20)
        monkeypatch.setattr(RT, "disk_used_ratio", lambda path: 0.99)
        monkeypatch.setattr(RT, "disk_free_bytes", lambda path: need)
        assert not st.clean_expired(dry_run=False).disk_full  # 99% used, but the next files fit
        assert st.put_message(Message.create("T", b"ok")).ok
        monkeypatch.setattr(RT, "disk_free_bytes", lambda path: need - 1)
        assert st.clean_expired(dry_run=False).disk_full
        r = st.put_message(Message.create("T", b"no room"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "would not hold the next" in r.error
        monkeypatch.setattr(RT, "disk_free_bytes", lambda path: 10 * need)
        assert not st.clean_expired(dry_run=False).disk_full and st.put_message(Message.create("T", b"ok")).ok
    finally:
        st.close()


_FORGETFUL = """
import sys
from rmqstore import Message, MessageStore
st = MessageStore.open(sys.argv[1])
st.put_message(Message.create("T", b"kept", keys=["k"]))
print("put", flush=True)
# no close(): the interpreter exits normally
"""


def test_a_store_left_open_is_closed_cleanly_at_exit(tmp_path):
    path = tmp_path / "s"
    out = subprocess.run([sys.executable, "-c", _FORGETFUL, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "put", out.stderr
    assert not (path / "abort").exists()
    with MessageStore.open(path) as st:
        assert st.recovery_report.mode == "normal"
        assert [m.body for m in st.query_message("T", "k").messages] == [b"kept"]


@pytest.mark.parametrize("target", ["lock", "checkpoint", "00000000000000000000"])
def test_os_errors_at_open_are_store_io_errors_with_the_path(tmp_path, monkeypatch, target):
    """A read-only directory or a file without permissions (simulated: the tests run as root) is a
    StoreIOError naming the file, not a bare PermissionError; nothing stays locked."""
    path = tmp_path / "s"
    with MessageStore.open(path, MessageStoreConfig(**SMALL)) as st:
        st.put_message(Message.create("T", b"x"))
    real_open = os.open
    import builtins
    real_builtin_open = builtins.open

    def check(p) -> None:
        if os.path.basename(str(p)) == target:
            raise PermissionError(13, "Permission denied", str(p))

    monkeypatch.setattr(os, "open", lambda p, *a, **kw: check(p) or real_open(p, *a, **kw))
    monkeypatch.setattr(builtins, "open", lambda p, *a, **kw: check(p) or real_builtin_open(p, *a, **kw))
    from rmqstore import StoreIOError
    with pytest.raises(StoreIOError) as e:
        MessageStore.open(path, MessageStoreConfig(**SMALL))
    assert os.path.basename(e.value.path) == target and isinstance(e.value, OSError)
    monkeypatch.undo()
    with MessageStore.open(path, MessageStoreConfig(**SMALL)) as st:
        assert st.get_max_offset_in_queue("T", 0) == 1
