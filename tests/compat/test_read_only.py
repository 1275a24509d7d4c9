"""A read-only open of a RocketMQ-written store changes no byte and creates no file."""
from __future__ import annotations

import pytest

from rmqstore import Message, MessageStore, ReadOnlyStoreError


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
