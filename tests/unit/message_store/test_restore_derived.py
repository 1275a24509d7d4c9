"""Derived files come back at a writable open: lost index files and consume queues short of their
records are rebuilt from the commitlog; every message keeps its queue offset and its keys. A reader
answers from a scan of the commitlog into temporary files instead, and writes nothing."""
from __future__ import annotations

import os
import shutil

import pytest

from rmqstore import Message, MessageStore
from tests import kit

CFG = kit.cfg(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=20 * 8, max_hash_slot_num=16,
              max_index_num=64)


def _build(path, n=40):
    with MessageStore.open(path, CFG) as st:
        rs = [st.put_message(Message.create("T", b"m%d" % i, keys=[f"k{i}"], queue_id=i % 2)) for i in range(n)]
    return rs


def _all_served(st, rs):
    for i, r in enumerate(rs):
        g = st.get_message("g", "T", i % 2, r.queue_offset, 1)
        assert [m.phy_offset for m in g.messages] == [r.phy_offset], i
        assert [m.phy_offset for m in st.query_message("T", f"k{i}").messages] == [r.phy_offset], i


@pytest.mark.parametrize("lose", ["index", "queue 1 (holds the last record)", "first file of queue 0",
                                  "queue 1 and the index"])
def test_lost_derived_files_are_rebuilt_at_open(tmp_path, lose, caplog):
    path = tmp_path / "s"
    rs = _build(path)
    if "index" in lose:
        shutil.rmtree(path / "index")
    if "queue 1" in lose:
        shutil.rmtree(path / "consumequeue" / "T" / "1")
    if "first file" in lose:
        os.unlink(path / "consumequeue" / "T" / "0" / sorted(os.listdir(path / "consumequeue" / "T" / "0"))[0])
    before = kit.tree_bytes(path)
    with caplog.at_level("WARNING", logger="rmqstore"):
        with MessageStore.open(path, CFG, read_only=True) as ro:  # a reader answers from a scan, writes nothing
            assert ro.derived_files_restored
            shadow = ro.derived_files.shadow_dir
            assert shadow and os.path.isdir(shadow)
            _all_served(ro, rs)
    assert any("answering from a scan of the commitlog" in r.getMessage() for r in caplog.records)
    assert kit.tree_bytes(path) == before
    assert not os.path.exists(shadow)  # removed at close
    caplog.clear()
    with caplog.at_level("WARNING", logger="rmqstore"):
        with MessageStore.open(path, CFG) as st:
            assert st.derived_files_restored
            assert any("rebuilding them from the commitlog" in r.getMessage() for r in caplog.records)
            _all_served(st, rs)
            assert st.verify() == []
    with MessageStore.open(path, CFG) as st:  # nothing left to restore
        assert st.derived_files_restored == []
        _all_served(st, rs)


def test_a_sound_store_restores_nothing(tmp_path):
    path = tmp_path / "s"
    _build(path)
    with MessageStore.open(path, CFG) as st:
        assert st.derived_files_restored == []


def test_a_long_rebuild_reports_progress(tmp_path, caplog, monkeypatch):
    from rmqstore.engine import derived_files as DF
    path = tmp_path / "s"
    rs = _build(path, n=200)
    shutil.rmtree(path / "index")
    monkeypatch.setattr(DF, "PROGRESS_EVERY_S", 0.0)
    for read_only, what in ((True, "building temporary"), (False, "rebuilding")):
        caplog.clear()
        with caplog.at_level("WARNING", logger="rmqstore"):
            with MessageStore.open(path, CFG, read_only=read_only) as st:
                _all_served(st, rs)
        lines = [r.getMessage() for r in caplog.records if "derived files from the commitlog" in r.getMessage()]
        assert lines and all(what in x for x in lines) and "100%" in lines[-1], lines


def test_a_reader_that_judges_the_files_gets_them_as_they_are(tmp_path):
    path = tmp_path / "s"
    _build(path)
    shutil.rmtree(path / "index")
    with MessageStore.open(path, CFG, read_only=True, stand_in_derived=False) as ro:
        assert ro.derived_files_restored == [] and ro.derived_files.shadow_dir is None
        assert ro.query_message("T", "k1").messages == []  # no index: upstream's answer
        assert "index_item" in {f.kind for f in ro.verify()}


def test_a_reader_of_a_crashed_store_continues_the_queues_behind_from_the_tail(tmp_path, caplog):
    """A crash before dispatch: the reader continues only the queues behind (their own files, the
    last one copied) with the undispatched records, in proportion to the tail; nothing is written."""
    path = tmp_path / "s"
    rs = _build(path, n=60)  # closed cleanly
    crash = tmp_path / "crash"
    st = MessageStore.open(path, CFG)
    st.reput.shutdown()  # what follows is appended, never dispatched
    more = [st.put_message(Message.create("T", b"late %d" % i, keys=[f"k{60 + i}"], queue_id=1)) for i in range(7)]
    shutil.copytree(path, crash, ignore=shutil.ignore_patterns("lock"))  # abort present
    st.close()
    before = kit.tree_bytes(crash)
    with caplog.at_level("WARNING", logger="rmqstore"):
        with MessageStore.open(crash, CFG, read_only=True) as ro:
            assert ro.derived_files_restored == ["T/1", "index"]  # the index is behind too: its tail
            own_queues, own_index = ro.derived_files.own_files
            assert ro.index_service.files[:len(own_index.files)] == own_index.files
            own = own_queues[("T", 1)]
            cq = ro.find_consume_queue("T", 1)
            assert cq.queue.files[0] is own.queue.files[0]  # its own files, not a rebuild
            for i, r in enumerate(rs):
                assert [m.phy_offset for m in ro.get_message("g", "T", i % 2, r.queue_offset, 1).messages] == \
                    [r.phy_offset]
            for i, r in enumerate(more):
                assert [m.phy_offset for m in ro.get_message("g", "T", 1, r.queue_offset, 1).messages] == \
                    [r.phy_offset]
                assert [m.phy_offset for m in ro.query_message("T", f"k{60 + i}").messages] == [r.phy_offset]
            assert ro.get_max_offset_in_queue("T", 1) == more[-1].queue_offset + 1
    assert kit.tree_bytes(crash) == before
