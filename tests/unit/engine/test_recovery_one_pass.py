"""A writer's recovery after a crash in one walk of the commitlog (``rmqstore.engine.recovery.one_pass``):
the files, plan and report are those of the two-pass recovery (plan, then apply), on clean data,
corrupt records in the middle, a torn tail, zeroed bytes, prepared transactions (records without a
consume-queue unit, so the walk's hints have gaps), and lost or wrong consume queues (no hints,
wrong hints); an error in the dispatch thread reaches the caller."""
from __future__ import annotations

import dataclasses
import os
import shutil
import threading

import numpy as np
import pytest

from rmqstore import MessageStore
from rmqstore.engine import recovery as R
from rmqstore.engine.recovery import one_pass
from rmqstore.format import message as M
from rmqstore.io import paths
from tests import kit

N = 120


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A store closed cleanly: ``N`` keyed messages over three queues, every 9th a prepared
    transaction (no consume-queue unit), over many 4 KiB segments; and the puts."""
    path = tmp_path_factory.mktemp("one_pass") / "s"
    cfg = kit.cfg(flush_disk_type="SYNC_FLUSH")
    with MessageStore.open(path, cfg) as st:
        puts = []
        for i in range(N):
            m = kit.msg("OnePass", f"body {i:04d} ".encode() * (1 + i % 5), i=i, tags=f"t{i % 4}", queues=3)
            if i % 9 == 4:
                m.sys_flag = 0x4  # TRANSACTION_PREPARED_TYPE
            puts.append(st.put_message(m))
        st.wait_dispatched(timeout=10)
    return path, cfg, puts


def _damage(path, cfg, puts, how: str) -> None:
    seg_size = cfg.mapped_file_size_commit_log
    if how == "crc_in_the_middle":
        p = puts[N // 2]
        seg, pos = kit.segment_of(path, p.phy_offset, seg_size)
        body = int(M.decode_batch(np.frombuffer(kit.read_bytes(seg), dtype=np.uint8), np.array([pos])).body_pos[0])
        kit.patch_file(seg, body, b"\xff")  # a body byte: the framing holds, the CRC does not
    elif how == "torn_tail":
        p = puts[-1]
        seg, pos = kit.segment_of(path, p.phy_offset, seg_size)
        kit.patch_file(seg, pos + p.wrote_bytes - 16, bytes(16))
    elif how == "zeroed_records":
        p = puts[N // 3]
        seg, pos = kit.segment_of(path, p.phy_offset, seg_size)
        kit.patch_file(seg, pos, bytes(min(300, seg_size - pos)))
    elif how == "queues_lost":
        shutil.rmtree(os.path.join(path, "consumequeue"))
    elif how == "queues_wrong":
        qdir = os.path.join(path, "consumequeue", "OnePass", "1")
        first = os.path.join(qdir, sorted(os.listdir(qdir))[0])
        for k in range(3, 12):
            kit.patch_file(first, 20 * k, (puts[k].phy_offset + 7).to_bytes(8, "big"))
    with open(paths.abort_path(str(path)), "w") as fh:
        fh.write("1")
    with open(paths.checkpoint_path(str(path)), "r+b") as fh:  # the worst crash: every record scanned
        fh.write(bytes(24))


def _outcome(path, cfg):
    """(files by name, index file contents in order, plan, report without its time) after a writable open."""
    with MessageStore.open(path, cfg) as st:
        plan = st.recovery_plan
        report = dataclasses.replace(st.recovery_report, seconds=0)
        keys = [sorted(m.phy_offset for m in st.query_message("OnePass", f"k{i}", 32, 0, 1 << 62).messages)
                for i in (5, 60, 119)]
    files = kit.tree_bytes(path)
    index = [files.pop(k) for k in sorted(k for k in files if k.startswith("index" + os.sep))]
    files.pop(os.path.join("config", "rmqstore-index.json"))  # (index file names and mtimes: the time they were made)
    return files, index, plan, report, keys


@pytest.mark.parametrize("how", ["clean", "crc_in_the_middle", "torn_tail", "zeroed_records", "queues_lost",
                                 "queues_wrong"])
def test_one_walk_leaves_what_two_walks_leave(built, tmp_path, monkeypatch, how):
    src, cfg, puts = built
    one, two = tmp_path / "one", tmp_path / "two"
    shutil.copytree(src, one)
    _damage(one, cfg, puts, how)
    shutil.copytree(one, two)
    took = []
    real = R.recover_after_crash
    monkeypatch.setattr(R, "recover_after_crash", lambda *a: took.append(real(*a)) or took[-1])
    got = _outcome(one, cfg)
    assert len(took) == 1, "the one-walk recovery did not run"
    monkeypatch.setattr(R, "one_pass_applies", lambda *a: False)
    want = _outcome(two, cfg)
    assert got[0].keys() == want[0].keys()
    for name in want[0]:
        assert got[0][name] == want[0][name], name
    assert got[1] == want[1] and got[4] == want[4]
    for a, b in ((got[2], want[2]), (got[3], want[3])):  # plan, report (their paths name the store)
        assert repr(a).replace(str(one), "<store>") == repr(b).replace(str(two), "<store>")
    plan, report = got[2], got[3]
    assert plan.abnormal and report.records_redispatched > 0
    if how in ("crc_in_the_middle", "zeroed_records"):
        assert plan.corrupt  # (the dispatch stopped there and the two-walk re-dispatch took over)
    if how == "crc_in_the_middle":
        assert [c.kind for c in plan.corrupt] == ["record_crc"]
    if how == "torn_tail":
        assert plan.end_offset == puts[-1].phy_offset


def test_a_dispatch_error_reaches_the_open_and_stops_the_thread(built, tmp_path, monkeypatch):
    src, cfg, puts = built
    path = tmp_path / "s"
    shutil.copytree(src, path)
    _damage(path, cfg, puts, "clean")

    def broken(*a, **kw):
        raise OSError("disk full while dispatching")

    monkeypatch.setattr(one_pass.D, "dispatch_batch", broken)
    with pytest.raises(OSError, match="disk full while dispatching"):
        MessageStore.open(path, cfg)
    assert not [t for t in threading.enumerate() if t.name.startswith("rmqstore-recovery-dispatch")]


def test_one_walk_is_not_taken_after_a_clean_shutdown(built, tmp_path):
    src, cfg, _ = built
    path = tmp_path / "s"
    shutil.copytree(src, path)
    st = MessageStore.open(path, cfg)
    try:
        assert st.recovery_plan.mode == "normal"
        assert not one_pass.one_pass_applies(st, st.recovery_plan)
    finally:
        st.close()
