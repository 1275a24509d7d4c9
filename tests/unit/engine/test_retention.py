"""Retention (FORMAT.md §10): upstream's DefaultMessageStoreCleanFilesTest scenario, dry runs,
disk-usage triggers, DISK_FULL, OFFSET_TOO_SMALL, the background run, and the beyond-upstream
``retain_unconsumed_groups`` option."""
from __future__ import annotations

import json
import math
import os
import shutil
import time

import pytest

from rmqstore import GetMessageStatus, MessageStore, PutMessageStatus
from rmqstore.engine import retention as RT
from tests import kit

HOUR_MS = 3_600_000
TOPIC = "Clean"


#: upstream's test geometry: 128-byte commitlog and CQ segments (CQ rounded to 140 = 7 units),
#: maxIndexNum 8 (7 keys per index file), one 120-byte message per commitlog segment
GEOMETRY = dict(mapped_file_size_commit_log=128, mapped_file_size_consume_queue=128, max_hash_slot_num=8,
                max_index_num=8, file_reserved_time=1, delete_when=";".join(f"{h:02d}" for h in range(24)),
                flush_disk_type="ASYNC_FLUSH")
#: with 10 bytes of properties (KEYS k000, k001, ...: ``kit.msg(..., {"KEYS": f"k{i:03d}"})``), a
#: record of 120 bytes
BODY = b"b" * (120 - 91 - len(TOPIC) - 10)


@pytest.fixture
def store55(tmp_path, monkeypatch):
    monkeypatch.setattr(RT, "disk_used_ratio", lambda path: 0.10)
    path = tmp_path / "s"
    st = MessageStore.open(path, kit.cfg(GEOMETRY))
    for i in range(55):
        r = st.put_message(kit.msg(TOPIC, BODY, {"KEYS": f"k{i:03d}"}, queue_id=0))
        assert r.ok and r.wrote_bytes == 120
    st.wait_dispatched(timeout=10)
    yield st
    st.close()


def _age(st: MessageStore, n: int, hours: float) -> None:
    t = time.time() - hours * 3600
    for mf in st.commit_log.queue.files[:n]:
        os.utime(mf.path, (t, t))


def _counts(st: MessageStore) -> tuple[int, int, int]:
    cq = st.consume_queues[(TOPIC, 0)]
    return len(st.commit_log.queue.files), len(cq.queue.files), len(st.index_service.files)


def test_upstream_geometry(store55):
    assert _counts(store55) == (55, 8, 8)


def test_time_up_deletes_expired_in_batches(store55):
    st = store55
    _age(st, 15, 2)
    res = st.clean_expired(dry_run=True)
    assert res.dry_run and len(res.commitlog_files) == 10 and _counts(st) == (55, 8, 8)
    assert all(os.path.exists(p) for p in res.commitlog_files + res.consume_queue_files + res.index_files)
    res = st.clean_expired(dry_run=False)
    assert len(res.commitlog_files) == 10 and not any(os.path.exists(p) for p in res.commitlog_files)
    assert _counts(st) == (45, 7, 7)
    assert (res.min_offset_before, res.min_offset_after) == (0, 10 * 128) == (0, st.min_phy_offset)
    res = st.clean_expired(dry_run=False)
    assert len(res.commitlog_files) == 5 and _counts(st) == (40, 6, 6)
    assert st.clean_expired(dry_run=False).commitlog_files == []  # the rest is not expired
    # reads below the new minimum
    assert st.get_min_offset_in_queue(TOPIC, 0) == 15
    g = st.get_message("g", TOPIC, 0, 3, 1)
    assert (g.status, g.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, 15)
    assert st.look_message_by_offset(0) is None
    assert [m.queue_offset for m in st.get_message("g", TOPIC, 0, 15, 1).messages] == [15]
    assert st.query_message(TOPIC, "k003").messages == []
    assert [m.queue_offset for m in st.query_message(TOPIC, "k020").messages] == [20]
    assert st.verify() == []


def test_not_triggered_outside_delete_when(store55, tmp_path):
    st = store55
    _age(st, 15, 2)
    other = (time.localtime().tm_hour + 12) % 24
    res = RT.clean_expired(_Cfg(st, delete_when=f"{other:02d}"), dry_run=True)
    assert not res.triggered and res.commitlog_files == [] and "deleteWhen" in res.reason
    res = RT.clean_expired(_Cfg(st, delete_when=f"{other:02d}"), dry_run=True, force=True)  # manual trigger
    assert res.triggered and len(res.commitlog_files) == 10


class _Cfg:
    """The store seen with other settings (retention reads only ``cfg`` and the files)."""

    def __init__(self, st, **kw):
        self.__dict__.update({k: getattr(st, k) for k in ("path", "commit_log", "consume_queues", "index_service",
                                                          "read_only", "maintenance_lock")})
        self.cfg = st.cfg.replace(**kw)
        self.disk_full = st.disk_full


def test_forcible_clean_ignores_age(store55, monkeypatch):
    st = store55
    monkeypatch.setattr(RT, "disk_used_ratio", lambda path: 0.86)  # past the clean-forcibly ratio
    left = []
    for _ in range(5):
        res = st.clean_expired(dry_run=False)
        assert res.clean_immediately and not res.disk_full
        left.append(_counts(st))
    assert [c[0] for c in left] == [45, 35, 25, 15, 5]
    assert [55 - 8 + c[1] for c in left] == [55 - 8 + 8 - (10 * a) // 7 for a in range(1, 6)]
    assert [c[2] for c in left] == [8 - (10 * a) // 7 for a in range(1, 6)]
    for _ in range(3):
        st.clean_expired(dry_run=False)
    assert _counts(st)[0] == 1, "the last segment is never deleted"


def test_disk_full_refuses_puts_until_space_returns(store55, monkeypatch):
    st = store55
    monkeypatch.setattr(RT, "disk_used_ratio", lambda path: 0.95)
    res = st.clean_expired(dry_run=False)
    assert res.disk_full and st.disk_full
    r = st.put_message(kit.msg(TOPIC, BODY, {"KEYS": f"k{99:03d}"}, queue_id=0))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk" in r.error
    monkeypatch.setattr(RT, "disk_used_ratio", lambda path: 0.50)
    assert not st.clean_expired(dry_run=False).disk_full and not st.disk_full
    assert st.put_message(kit.msg(TOPIC, BODY, {"KEYS": f"k{99:03d}"}, queue_id=0)).ok


def test_dry_run_on_a_read_only_store(tmp_path, monkeypatch):
    monkeypatch.setattr(RT, "disk_used_ratio", lambda path: 0.10)
    path = tmp_path / "s"
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:
        for i in range(20):
            st.put_message(kit.msg(TOPIC, BODY, {"KEYS": f"k{i:03d}"}, queue_id=0))
        _age(st, 20, 2)
    with MessageStore.open(path, kit.cfg(GEOMETRY), read_only=True) as ro:
        res = ro.clean_expired(dry_run=True, force=True)
        assert len(res.commitlog_files) == 10 and res.bytes_freed >= 10 * 128
        with pytest.raises(PermissionError):
            ro.clean_expired(dry_run=False)
    assert len(os.listdir(path / "commitlog")) == 20


def _offsets_file(path, table: dict, unquoted: bool = True) -> None:
    os.makedirs(os.path.join(path, "config"), exist_ok=True)
    text = json.dumps({"offsetTable": table, "dataVersion": {"counter": 3}})
    if unquoted:  # fastjson writes integer map keys bare
        for k in {q for t in table.values() for q in t}:
            text = text.replace(f'"{k}":', f"{k}:")
    with open(os.path.join(path, "config", "consumerOffset.json"), "w") as fh:
        fh.write(text)


def test_retain_unconsumed_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(RT, "disk_used_ratio", lambda path: 0.10)
    path = tmp_path / "s"
    cfg = kit.cfg(GEOMETRY, retain_unconsumed_groups=("G1", "G2"))
    with MessageStore.open(path, cfg) as st:
        for i in range(30):
            st.put_message(kit.msg(TOPIC, BODY, {"KEYS": f"k{i:03d}"}, queue_id=0))
        st.wait_dispatched(timeout=10)
        _age(st, 30, 2)
        # no committed offsets for the groups: everything is kept
        res = st.clean_expired(dry_run=False)
        assert res.commitlog_files == [] and "no committed offsets" in res.reason
        # G1 has consumed up to offset 7, G2 up to 4 (the smaller one wins); G3 is not named
        _offsets_file(path, {f"{TOPIC}@G1": {0: 7}, f"{TOPIC}@G2": {0: 4}, f"{TOPIC}@G3": {0: 29}})
        res = st.clean_expired(dry_run=False)
        assert len(res.commitlog_files) == 4 and res.retained_from == 4 * 128 and res.retained_files
        assert st.get_min_offset_in_queue(TOPIC, 0) == 4
        assert [m.queue_offset for m in st.get_message("G2", TOPIC, 0, 4, 1).messages] == [4]
        _offsets_file(path, {f"{TOPIC}@G1": {0: 30}, f"{TOPIC}@G2": {0: 12}}, unquoted=False)
        assert len(st.clean_expired(dry_run=False).commitlog_files) == 8
        assert st.get_min_offset_in_queue(TOPIC, 0) == 12
        # past the warning level the disk wins, and the result says what was lost
        monkeypatch.setattr(RT, "disk_used_ratio", lambda path: 0.95)
        res = st.clean_expired(dry_run=False)
        assert res.disk_full and len(res.commitlog_files) == 10 and res.unconsumed_deleted
        assert st.get_min_offset_in_queue(TOPIC, 0) == 22


def test_parse_broker_json():
    text = '{"offsetTable":{"T@G":{0:12,1:7,-3:1},"%RETRY%G@G":{0:0}},"s":"a,12:b","x":[1,2,3]}'
    doc = RT.parse_broker_json(text)
    assert doc["offsetTable"]["T@G"] == {"0": 12, "1": 7, "-3": 1}
    assert doc["s"] == "a,12:b" and doc["x"] == [1, 2, 3]


def test_background_retention(tmp_path, monkeypatch):
    monkeypatch.setattr(RT, "disk_used_ratio", lambda path: 0.10)
    monkeypatch.setattr(RT, "FIRST_CLEAN_DELAY_S", 0.0)
    monkeypatch.setattr(RT, "CLEAN_INTERVAL_S", 0.05)
    path = tmp_path / "s"
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:
        for i in range(12):
            st.put_message(kit.msg(TOPIC, BODY, {"KEYS": f"k{i:03d}"}, queue_id=0))
        _age(st, 12, 2)
        deadline = time.monotonic() + 30
        while st.min_phy_offset < 10 * 128 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert st.min_phy_offset == 10 * 128
        assert len(os.listdir(path / "commitlog")) == 2


def test_disk_used_ratio_reads_the_filesystem(tmp_path, monkeypatch):
    monkeypatch.undo()  # the real statvfs reading, not the suite's pinned 10%
    du = shutil.disk_usage(tmp_path)  # free here is what non-root users may still take (f_bavail)
    want = math.ceil(du.used * 100 / (du.used + du.free)) / 100
    got = RT.disk_used_ratio(str(tmp_path / "not" / "created" / "yet"))  # the nearest existing parent
    assert abs(got - want) <= 0.01 and 0 < got <= 1  # the disk may change between the two readings
