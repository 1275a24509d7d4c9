"""rebuild.py: consume queues and index files rebuilt from a RocketMQ-written store's commitlog are
RocketMQ's own files (index files compared in name order: they are named by creation time)."""
from __future__ import annotations

import pytest

from rmqstore import MessageStore
from rmqstore.errors import OutputExistsError, StoreLockedError
from rmqstore.rebuild import check_new_output, rebuild
from tests.kit import VECTOR_SETS, load_vector, tree_bytes, tree_hashes


@pytest.mark.parametrize("name", VECTOR_SETS)
def test_rebuilt_files_are_rocketmqs(name, tmp_path):
    vs = load_vector(name)
    before = tree_hashes(vs.store)
    res = rebuild(vs.path, str(tmp_path / "out"))  # the sizes come from the files
    assert res.records == len(vs.messages())
    assert tree_bytes(tmp_path / "out" / "consumequeue") == tree_bytes(vs.store / "consumequeue")
    ours, theirs = tree_hashes(tmp_path / "out" / "index"), tree_hashes(vs.store / "index")
    assert [ours[k] for k in sorted(ours)] == [theirs[k] for k in sorted(theirs)]
    assert tree_hashes(vs.store) == before  # the source is only read


def test_the_output_must_not_be_the_source(tmp_path):
    vs = load_vector("basic")
    with pytest.raises(OutputExistsError, match="source store"):
        rebuild(vs.path, vs.path)


def test_an_output_that_holds_anything_is_refused_before_the_store_is_opened(tmp_path):
    vs = load_vector("basic")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes").write_text("mine")
    with pytest.raises(OutputExistsError, match="not empty"):
        rebuild(str(tmp_path / "no-such-store"), str(out))  # the output is judged first
    assert [p.name for p in out.iterdir()] == ["notes"]
    with pytest.raises(OutputExistsError, match="not empty"):
        check_new_output(str(out), vs.path)


def test_an_output_whose_lock_a_live_process_holds_is_refused(tmp_path):
    live = tmp_path / "live"
    with MessageStore.open(str(live)):
        with pytest.raises(StoreLockedError, match="has open"):
            check_new_output(str(live))
