"""Write path: replaying input.json through ``put_message`` writes the bytes the Java store wrote.

commitlog/ and consumequeue/ files must be identical (same names, same sha256); index files are
named by wall-clock creation time, so they are compared by position.
"""
from __future__ import annotations

import os
import shutil

import pytest

from rmqstore import MessageStore
from rmqstore.errors import OutputExistsError
from rmqstore.rebuild import rebuild
from rmqstore.format.checkpoint import FILE_SIZE, CheckpointValues


def _split(hashes: dict[str, str], prefix: str) -> dict[str, str]:
    return {k: v for k, v in hashes.items() if k.startswith(prefix)}


def test_put_results(replayed, vset):
    want = vset.expected["putResults"]
    assert len(replayed.results) == len(want)
    for r, w in zip(replayed.results, want):
        assert (r.status.name, r.phy_offset, r.wrote_bytes, r.queue_offset, r.store_timestamp, r.msg_id, r.msg_num) == (
            w["putStatus"], w["wroteOffset"], w["wroteBytes"], w["queueOffset"], w["storeTimestamp"], w["msgId"],
            w["msgNum"]), w["index"]


def test_sys_flag_after_put(replayed, vset):
    with MessageStore.open(replayed.path, vset.config, read_only=True) as st:
        for r, w in zip(replayed.results, vset.expected["putResults"]):
            assert st.look_message_by_offset(r.phy_offset).sys_flag == w["sysFlagAfterPut"]


def test_commitlog_files_identical(replayed, vset, vectors):
    want = _split({f["path"]: f["sha256"] for f in vset.expected["raw"]["files"]}, "commitlog/")
    assert want
    assert _split(vectors.tree_hashes(replayed.path), "commitlog/") == want


def test_consumequeue_files_identical(replayed, vset, vectors):
    want = _split({f["path"]: f["sha256"] for f in vset.expected["raw"]["files"]}, "consumequeue/")
    assert want
    assert _split(vectors.tree_hashes(replayed.path), "consumequeue/") == want


def _index_by_position(hashes: dict[str, str]) -> list[str]:
    return [v for k, v in sorted(_split(hashes, "index/").items())]


def test_index_files_identical_by_position(replayed, vset, vectors):
    want = _index_by_position({f["path"]: f["sha256"] for f in vset.expected["raw"]["files"]})
    assert len(want) == len(vset.expected["raw"]["indexFiles"])
    assert _index_by_position(vectors.tree_hashes(replayed.path)) == want


def test_replayed_store_has_no_abort_file_and_a_lock_file(replayed):
    assert not os.path.exists(os.path.join(replayed.path, "abort"))
    with open(os.path.join(replayed.path, "lock"), "rb") as fh:
        assert fh.read() == b"lock"


def test_replayed_store_reopens_with_the_same_answers(replayed, vset, tmp_path):
    """A writable reopen of (a copy of) the replayed store (normal recovery) answers as the Java
    store did; recovery records the start of the last record as confirmPhyOffset (quirk 15.12)."""
    path = tmp_path / "store"
    shutil.copytree(replayed.path, path)
    with MessageStore.open(path, vset.config) as st:
        assert st.recovery_report.mode == "normal"
        assert st.recovery_report.clean
        assert st.max_phy_offset == vset.expected["api"]["maxPhyOffset"]
        for topic, queues in vset.expected["api"]["consumeQueues"].items():
            for qid, q in queues.items():
                assert st.get_max_offset_in_queue(topic, int(qid)) == q["maxOffset"]
                assert st.get_max_offset_in_queue(topic, int(qid), committed=False) == q["maxOffset"]
    last = max(r.phy_offset for r in replayed.results)
    assert CheckpointValues.unpack((path / "checkpoint").read_bytes()).confirm_phy_offset == last


# ------------------------------------------------------------------------------------------------
# engine.rebuild
# ------------------------------------------------------------------------------------------------

def test_rebuild_reproduces_consumequeue_and_index(vset, vectors, tmp_path):
    src = vectors.copy_store(vset, tmp_path / "src")
    out = tmp_path / "out"
    res = rebuild(str(src), str(out), vset.config)
    files = {f["path"]: f["sha256"] for f in vset.expected["raw"]["files"]}
    got = vectors.tree_hashes(out)
    assert _split(got, "consumequeue/") == _split(files, "consumequeue/")
    assert _index_by_position(got) == _index_by_position(files)
    assert res.records == len(vset.input["messages"])
    assert res.end_offset == vset.expected["api"]["maxPhyOffset"]
    assert res.consume_queues == sum(len(q) for q in vset.expected["raw"]["consumeQueues"].values())
    assert res.index_files == len(vset.expected["raw"]["indexFiles"])
    assert vectors.tree_hashes(src) == files  # the source is untouched


def test_rebuild_without_config_infers_segment_sizes(vset, vectors, tmp_path):
    """No config given: segment sizes come from the files, and the index geometry from the index
    file size (64 slots and 256 items keep upstream's 1:4 ratio: 40 + 84*64 bytes)."""
    src = vectors.copy_store(vset, tmp_path / "src")
    out = tmp_path / "out"
    rebuild(str(src), str(out))
    files = {f["path"]: f["sha256"] for f in vset.expected["raw"]["files"]}
    got = vectors.tree_hashes(out)
    assert _split(got, "consumequeue/") == _split(files, "consumequeue/")
    assert _index_by_position(got) == _index_by_position(files)


def test_rebuild_refuses_its_source_and_a_used_output(vset, vectors, tmp_path):
    src = vectors.copy_store(vset, tmp_path / "src")
    with pytest.raises(OutputExistsError, match="source store"):
        rebuild(str(src), str(src), vset.config)
    with pytest.raises(OutputExistsError, match="source store"):
        rebuild(str(src), str(src / ".." / "src"), vset.config)
    os.makedirs(tmp_path / "used" / "index")
    with pytest.raises(OutputExistsError):
        rebuild(str(src), str(tmp_path / "used"), vset.config)


def test_replayed_checkpoint(replayed, vset):
    """The checkpoint layout and its reproducible fields; physicMsgTimestamp depends on the Java
    flush timing (vectors/README.md), so it is only checked to be a store time of the set."""
    with open(os.path.join(replayed.path, "checkpoint"), "rb") as fh:
        buf = fh.read()
    assert len(buf) == FILE_SIZE and not any(buf[40:])
    cp = CheckpointValues.unpack(buf)
    want = vset.expected["raw"]["checkpoint"]
    assert (cp.logics_msg_timestamp, cp.index_msg_timestamp, cp.master_flushed_offset, cp.confirm_phy_offset) == (
        want["logicsMsgTimestamp"], want["indexMsgTimestamp"], want["masterFlushedOffset"], want["confirmPhyOffset"])
    assert cp.physic_msg_timestamp in {m["storeTimestamp"] for m in vset.input["messages"]}
