"""A read-only open of a RocketMQ-written store changes no byte and creates no file; a writable
open and clean close changes only the checkpoint."""
from __future__ import annotations

import dataclasses

import pytest

from rmqstore import Message, MessageStore, ReadOnlyStoreError
from rmqstore.format.checkpoint import CheckpointValues


def test_read_only_open_and_reads_change_no_byte(vset, vectors, tmp_path):
    path = vectors.copy_store(vset, tmp_path / "store")
    want = {f["path"]: f["sha256"] for f in vset.expected["raw"]["files"]}
    assert vectors.tree_hashes(path) == want  # the copy is what the Java store left behind
    with MessageStore.open(path, vset.config, read_only=True) as st:
        api = vset.expected["api"]
        for m in api["messages"]:
            assert st.look_message_by_offset(m["phyOffset"]).phy_offset == m["phyOffset"]
        for gm in api["getMessage"]:
            st.get_message("ro", gm["topic"], gm["queueId"], gm["offset"], gm["maxMsgNums"])
        for kq in api["keyQueries"][:20]:
            st.query_message(kq["topic"], kq["key"])
            st.query_message(kq["topic"], kq["key"], exact=False)
        for ob in api["offsetByTime"]:
            st.get_offset_in_queue_by_time(ob["topic"], ob["queueId"], ob["timestamp"], boundary="upper")
        assert st.recovery_report is not None and st.recovery_report.applied is False
        assert st.recovery_report.end_offset == api["maxPhyOffset"]
        assert st.recovery_report.cuts == []
    assert vectors.tree_hashes(path) == want


def test_read_only_store_refuses_writes(ro_store):
    with pytest.raises(ReadOnlyStoreError):
        ro_store.put_message(Message.create("TopicTest", b"x"))
    with pytest.raises(ReadOnlyStoreError):
        ro_store.put_messages([Message.create("TopicTest", b"x")])
    with pytest.raises(ReadOnlyStoreError):
        ro_store.flush()


def test_writable_open_and_clean_close_changes_only_the_checkpoint(vset, vectors, tmp_path):
    """Opening a Java-written store for writing (normal recovery) and closing it cleanly rewrites
    nothing but the checkpoint, whose confirmPhyOffset becomes the start of the last record
    (quirk 15.12); every answer is the Java store's."""
    path = vectors.copy_store(vset, tmp_path / "store")
    want = {f["path"]: f["sha256"] for f in vset.expected["raw"]["files"]}
    api = vset.expected["api"]
    with MessageStore.open(path, vset.config) as st:
        rep = st.recovery_report
        assert (rep.mode, rep.clean, rep.applied, rep.end_offset) == ("normal", True, True, api["maxPhyOffset"])
        assert (path / "abort").exists()
        for m in api["messages"]:
            assert st.look_message_by_offset(m["phyOffset"]).msg_id == m["offsetMsgId"]
        for topic, queues in api["consumeQueues"].items():
            for qid, q in queues.items():
                assert (st.get_min_offset_in_queue(topic, int(qid)), st.get_max_offset_in_queue(topic, int(qid)),
                        st.get_max_offset_in_queue(topic, int(qid), committed=False)) == (
                    q["minOffset"], q["maxOffset"], q["maxOffset"])
    got = vectors.tree_hashes(path)
    assert sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k)) == ["checkpoint"]
    before = CheckpointValues.unpack((vset.store / "checkpoint").read_bytes())
    after = CheckpointValues.unpack((path / "checkpoint").read_bytes())
    assert after.confirm_phy_offset == max(m["phyOffset"] for m in api["messages"])
    assert dataclasses.replace(after, confirm_phy_offset=before.confirm_phy_offset) == before
