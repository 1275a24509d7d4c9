"""engine/derived_files.py: the keeper's marks at a clean close (written only when the queues or
the index changed, or the files exist), a reader's stand-ins and the store's own files put back
while verify looks, and the progress lines of a long rebuild. (What an open restores, end to end:
tests/unit/message_store/test_restore_derived.py.)"""
from __future__ import annotations

import json
import logging
import shutil

from rmqstore import Message, MessageStore
from rmqstore.engine import derived_files as DF
from tests import kit

CFG = kit.cfg(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=20 * 8, max_hash_slot_num=16,
              max_index_num=64)


def _build(path, n=12):
    with MessageStore.open(path, CFG) as st:
        return [st.put_message(Message.create("T", b"m%d" % i, keys=[f"k{i}"], queue_id=i % 2)) for i in range(n)]


def test_a_clean_close_marks_the_queue_extents_and_index_stats(tmp_path):
    path = tmp_path / "s"
    rs = _build(path)
    extents = json.loads((path / DF.QUEUE_EXTENTS_FILE).read_text())
    assert extents == {"T/0": 6, "T/1": 6} and len(rs) == 12
    stats = json.loads((path / DF.INDEX_STATS_FILE).read_text())
    (name, (size, _mtime)), = stats.items()
    assert size == (path / "index" / name).stat().st_size


def test_opening_and_closing_without_writes_leaves_no_marks(tmp_path):
    path = tmp_path / "s"
    with MessageStore.open(path, CFG):
        pass
    assert not (path / DF.QUEUE_EXTENTS_FILE).exists() and not (path / DF.INDEX_STATS_FILE).exists()


def test_a_queue_shorter_than_at_the_last_close_is_found(tmp_path):
    path = tmp_path / "s"
    _build(path)
    shutil.rmtree(path / "consumequeue" / "T" / "1")
    with MessageStore.open(path, CFG, read_only=True, stand_in_derived=False) as ro:
        assert ro.derived_files.queues_that_lost_units() == {("T", 1)}
        assert ro.derived_files.shadow_dir is None and ro.derived_files.own_files is None


def test_a_readers_stand_ins_step_aside_while_its_own_files_are_looked_at(tmp_path):
    path = tmp_path / "s"
    _build(path)
    shutil.rmtree(path / "index")
    with MessageStore.open(path, CFG, read_only=True) as ro:
        keeper = ro.derived_files
        assert keeper.restored == ["index"] and keeper.shadow_dir
        stand_in = ro.index_service
        own_queues, own_index = keeper.own_files
        with keeper.own_files_in_place():
            assert ro.index_service is own_index and ro.index_service.files == []
        assert ro.index_service is stand_in and len(stand_in.files) == 1


def test_a_long_rebuild_logs_its_progress(tmp_path, caplog):
    path = tmp_path / "s"
    _build(path)
    with MessageStore.open(path, CFG, read_only=True) as ro:
        progress = ro.derived_files.rebuild_progress("testing", every_s=0.0)
        with caplog.at_level(logging.WARNING, logger="rmqstore"):
            progress(ro.max_phy_offset)
        quiet = ro.derived_files.rebuild_progress("testing")  # PROGRESS_EVERY_S: silent for a short scan
        quiet(ro.max_phy_offset)
    lines = [r.getMessage() for r in caplog.records if "derived files from the commitlog" in r.getMessage()]
    assert len(lines) == 1 and "testing" in lines[0] and "100%" in lines[0]
