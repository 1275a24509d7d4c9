"""engine/rebuild.py: the output checks, and consume queues and index files written from a commit
log equal to those the store's own dispatcher wrote."""
from __future__ import annotations

import os

import pytest

from rmqstore import MessageStore
from rmqstore.errors import OutputExistsError
from rmqstore.engine.rebuild import check_output, rebuild_from
from tests.kit import cfg, msg, tree_hashes

CFG = cfg(mapped_file_size_commit_log=8192, mapped_file_size_consume_queue=20 * 16, max_hash_slot_num=16,
          max_index_num=64)


def test_check_output_refuses_the_source_derived_files_and_anything_it_did_not_create(tmp_path):
    src = tmp_path / "store"
    src.mkdir()
    with pytest.raises(OutputExistsError, match="source store"):
        check_output(str(src), str(src))
    for sub in ("consumequeue", "index"):
        out = tmp_path / f"out-{sub}"
        (out / sub).mkdir(parents=True)
        with pytest.raises(OutputExistsError, match=f"already holds {sub}/"):
            check_output(str(src), str(out))
    other = tmp_path / "other"
    other.mkdir()
    (other / "commitlog").mkdir()  # another store's commitlog: never written into
    with pytest.raises(OutputExistsError, match=r"not empty \(commitlog\)"):
        check_output(str(src), str(other))
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(OutputExistsError, match="is a file"):
        check_output(str(src), str(tmp_path / "a-file"))
    never = tmp_path / "never"
    check_output(str(src), str(never), create=False)
    assert not never.exists()
    fresh = tmp_path / "fresh" / "out"
    check_output(str(src), str(fresh))
    assert fresh.is_dir() and os.listdir(fresh) == []
    check_output(str(src), str(fresh))  # empty: taken


def test_rebuild_from_writes_what_the_dispatcher_wrote(tmp_path):
    path = tmp_path / "store"
    with MessageStore.open(path, CFG) as st:
        rs = [st.put_message(msg("R", b"r%d" % i * 9, i=i, queues=3, tags=f"t{i % 4}")) for i in range(150)]
        st.wait_dispatched()
    seen = []
    out = tmp_path / "out"
    with MessageStore.open(path, CFG, read_only=True) as ro:
        res = rebuild_from(ro.commit_log, str(out), CFG, progress=seen.append)
    end = rs[-1].phy_offset + rs[-1].wrote_bytes
    assert (res.records, res.consume_queues, res.end_offset) == (150, 3, end)
    assert res.index_files == len(os.listdir(out / "index")) >= 2  # 63 entries per index file
    assert seen == sorted(seen) and seen[-1] == end
    assert tree_hashes(out / "consumequeue") == tree_hashes(path / "consumequeue")
    ours, theirs = tree_hashes(out / "index"), tree_hashes(path / "index")
    assert [ours[k] for k in sorted(ours)] == [theirs[k] for k in sorted(theirs)]
