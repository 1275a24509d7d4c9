"""verify() then repair(findings): verify writes nothing (even on a damaged store), every finding
carries the typed repair that sets it right, repair applies them (the same files as a store
dispatched from scratch, the same result as verify(fix=True)), and after a repair verify finds
nothing repairable."""
from __future__ import annotations

import os
import shutil

import pytest

from rmqstore import Message, MessageStore, ReadOnlyStoreError
from rmqstore.engine import verify as V
from rmqstore.engine.verify import findings as VF
from rmqstore.format import index_file as IF
from rmqstore.format.checkpoint import CheckpointValues
from tests.kit import msg, patch_file, segment_of

SEG = 8192


@pytest.fixture
def cfg(make_config):
    def make(**kw):
        return make_config(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=200, max_hash_slot_num=16,
                           max_index_num=64, flush_disk_type="ASYNC_FLUSH", **kw)
    return make


def _nth(i: int, queues: int = 2) -> Message:
    """Message ``i`` of topic V: tags t0/t1, key k<i>, queue i % queues."""
    return msg("V", f"body {i}".encode() * 3, i=i, tags=f"t{i % 2}", queues=queues)


@pytest.fixture
def pristine(tmp_path, cfg):
    """A sound store of 60 messages over 2 queues, closed cleanly; and the results of its puts."""
    path = tmp_path / "pristine"
    with MessageStore.open(path, cfg()) as st:
        puts = [st.put_message(_nth(i)) for i in range(60)]
    return path, puts


def _damage_derived(path) -> None:
    """A consume-queue unit with a wrong size, queue 1's last file lost, an index item pointing
    nowhere (in a store a Java broker closed: the open does not know the index changed)."""
    cq0 = path / "consumequeue" / "V" / "0"
    patch_file(cq0 / sorted(os.listdir(cq0))[0], 2 * 20 + 8, b"\x00\x00\x00\x05")
    cq1 = path / "consumequeue" / "V" / "1"
    os.unlink(cq1 / sorted(os.listdir(cq1))[-1])
    idx = path / "index"
    patch_file(idx / sorted(os.listdir(idx))[0], IF.item_pos(16, 3) + 4, (10**9).to_bytes(8, "big"))
    (path / "config" / "rmqstore-index.json").unlink()


def _damage_everything(path, puts) -> None:
    """Every kind of damage: records (not repairable), derived files, checkpoint, tail."""
    _damage_derived(path)
    seg, pos = segment_of(path, puts[10].phy_offset, SEG)
    patch_file(seg, pos + 90, b"\xff")                               # a body byte: record_crc
    cp = CheckpointValues.unpack((path / "checkpoint").read_bytes())
    cp.confirm_phy_offset = 10**12
    (path / "checkpoint").write_bytes(cp.pack())
    last = puts[-1]
    seg, pos = segment_of(path, last.phy_offset + last.wrote_bytes, SEG)
    patch_file(seg, pos + 7, b"garbage!")


def _index_contents(tree: dict) -> list[str]:
    """The index files' contents in name order (names are the time they were made)."""
    return [h for p, h in sorted(tree.items()) if p.startswith("index" + os.sep)]


def _without_index(tree: dict) -> dict:
    return {p: h for p, h in tree.items() if not p.startswith("index" + os.sep) and not p.endswith("rmqstore-index.json")}


def _rows(findings, root=None) -> list:
    """The findings as tuples (paths relative to ``root`` when given)."""
    return [(f.kind, f.path and (os.path.relpath(f.path, root) if root else f.path), f.offset,
             f.detail.replace(str(root), "") if root else f.detail, f.fixed) for f in findings]


def test_verify_writes_nothing_even_on_a_damaged_store(pristine, cfg, vectors):
    path, puts = pristine
    _damage_everything(path, puts)
    before = vectors.tree_hashes(path)
    for stand_in in (False, True):
        with MessageStore.open(path, cfg(), read_only=True, stand_in_derived=stand_in) as ro:
            found = ro.verify()
            assert {f.kind for f in found} == {"record_crc", "cq_unit", "cq_gap", "index_item", "checkpoint_ahead",
                                               "tail_garbage"}
            assert vectors.tree_hashes(path) == before
    assert vectors.tree_hashes(path) == before


def test_every_finding_carries_its_typed_repair(pristine, cfg):
    path, puts = pristine
    _damage_everything(path, puts)
    with MessageStore.open(path, cfg(), read_only=True) as ro:
        found = ro.verify()
    by_kind: dict[str, set] = {}
    for f in found:
        by_kind.setdefault(f.kind, set()).update(f.repairs)
    assert by_kind["record_crc"] == set()
    assert by_kind["cq_unit"] == {V.RebuildQueue("V", 0)}
    assert by_kind["cq_gap"] == {V.RebuildQueue("V", 1)}
    assert by_kind["index_item"] == {V.RebuildIndex()}
    assert by_kind["checkpoint_ahead"] == {V.LowerCheckpoint("confirm_phy_offset", puts[-1].phy_offset)}
    (cut,) = by_kind["tail_garbage"]
    assert isinstance(cut, V.CutTail) and cut.path == segment_of(path, puts[-1].phy_offset, SEG)[0]
    plan = V.RepairPlan.of(found)
    assert (plan.queues, plan.index, plan.checkpoint, plan.cut_tail) == (
        {("V", 0), ("V", 1)}, True, {"confirm_phy_offset": puts[-1].phy_offset}, True)


def test_repair_gives_the_files_of_a_store_dispatched_from_scratch(pristine, cfg, tmp_path, vectors):
    path, puts = pristine
    damaged = tmp_path / "damaged"
    shutil.copytree(path, damaged)
    with MessageStore.open(path, cfg()) as st:  # (the open and close of a writer, as the damaged copy gets)
        assert st.verify() == []
    want = vectors.tree_hashes(path)
    _damage_derived(damaged)
    with MessageStore.open(damaged, cfg()) as st:
        found = st.verify()
        assert {f.kind for f in found} == {"cq_unit", "index_item"}
        out = st.repair(found)
        assert _rows(out) == [(f.kind, f.path, f.offset, f.detail, True) for f in found]
        assert st.verify() == []
    got = vectors.tree_hashes(damaged)
    assert _without_index(got) == _without_index(want)
    assert _index_contents(got) == _index_contents(want)


def test_verify_fix_is_verify_then_repair(pristine, cfg, tmp_path, vectors):
    path, puts = pristine
    _damage_everything(path, puts)
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(path, a)
    shutil.copytree(path, b)
    with MessageStore.open(a, cfg()) as st:
        fixed_a = st.verify(fix=True)
    with MessageStore.open(b, cfg()) as st:
        fixed_b = st.repair(st.verify())
    assert _rows(fixed_a, a) == _rows(fixed_b, b)
    assert {f.kind for f in fixed_a if not f.fixed} == {"record_crc"}
    ta, tb = vectors.tree_hashes(a), vectors.tree_hashes(b)
    assert _without_index(ta) == _without_index(tb) and _index_contents(ta) == _index_contents(tb)


def test_after_repair_verify_finds_nothing_repairable(pristine, cfg):
    path, puts = pristine
    _damage_everything(path, puts)
    with MessageStore.open(path, cfg()) as st:
        out = st.repair(st.verify())
        assert [f.kind for f in out if not f.fixed] == ["record_crc"]
        left = st.verify()
        assert [f.kind for f in left] == ["record_crc"] and all(not f.repairs for f in left)
        assert st.repair(left) == left  # nothing to do: nothing fixed, nothing raised
        for i, r in enumerate(puts):
            if i != 10:
                got = st.get_message("g", "V", i % 2, r.queue_offset, 1).messages
                assert [m.phy_offset for m in got] == [r.phy_offset]
                assert [m.phy_offset for m in st.query_message("V", f"k{i}").messages] == [r.phy_offset]


def test_a_summary_finding_carries_the_repairs_of_the_findings_not_listed(tmp_path, cfg, monkeypatch):
    monkeypatch.setattr(VF, "MAX_PER_KIND", 2)
    path = tmp_path / "s"
    with MessageStore.open(path, cfg()) as st:
        puts = [st.put_message(_nth(i, queues=4)) for i in range(40)]
    for q in range(4):  # the first unit of every queue has a wrong size
        qdir = path / "consumequeue" / "V" / str(q)
        patch_file(qdir / sorted(os.listdir(qdir))[0], 8, b"\x00\x00\x00\x05")
    with MessageStore.open(path, cfg()) as st:
        found = st.verify()
        assert [(f.kind, f.path is None) for f in found] == [("cq_unit", False)] * 2 + [("cq_unit", True)]
        listed = {r for f in found[:2] for r in f.repairs}
        assert listed | set(found[2].repairs) == {V.RebuildQueue("V", q) for q in range(4)}
        assert not listed & set(found[2].repairs)
        assert all(f.fixed for f in st.repair(found))
        assert st.verify() == []
        for i, r in enumerate(puts):
            assert [m.phy_offset for m in st.get_message("g", "V", i % 4, r.queue_offset, 1).messages] == [r.phy_offset]


def test_repair_measures_the_tail_again(pristine, cfg):
    """A writer appended after verify found bytes after its end: repair cuts only what is still
    after the end (the new record stays)."""
    path, puts = pristine
    with MessageStore.open(path, cfg()) as st:
        end = st.max_phy_offset
        patch_file(*segment_of(path, end + 20, SEG), b"garbage!")
        found = st.verify()
        assert [(f.kind, f.offset) for f in found] == [("tail_garbage", (end + 20) % SEG)]
        r = st.put_message(_nth(60))  # its bytes cover the garbage
        st.wait_dispatched()
        assert r.phy_offset == end and r.wrote_bytes > 28
        out = st.repair(found)
        assert [f.fixed for f in out] == [False]  # nothing was left to cut
        assert st.verify() == []
        assert [m.phy_offset for m in st.get_message("g", "V", 0, r.queue_offset, 1).messages] == [end]
    assert not os.path.exists(path / "recovery")


def test_repair_needs_a_writer(pristine, cfg):
    path, puts = pristine
    with MessageStore.open(path, cfg(), read_only=True) as ro:
        with pytest.raises(ReadOnlyStoreError):
            ro.repair([])
        with pytest.raises(ReadOnlyStoreError):
            ro.verify(fix=True)
