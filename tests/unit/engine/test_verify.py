"""MessageStore.verify: the Finding shape, one finding per kind of damage (with the file and the
offset inside it), fix=True rebuilding what the commitlog can regenerate."""
from __future__ import annotations

import dataclasses
import os

import pytest

from rmqstore import Message, MessageStore, ReadOnlyStoreError
from rmqstore.engine.verify import KINDS, Finding
from rmqstore.format.checkpoint import CheckpointValues
from tests import kit


SEGMENT = 8192
GEOMETRY = dict(mapped_file_size_commit_log=SEGMENT, mapped_file_size_consume_queue=200, max_hash_slot_num=16,
                max_index_num=64, flush_disk_type="ASYNC_FLUSH")


def _nth(i: int) -> Message:
    """The i-th message of the store ``built`` writes (two queues, two tags, key k<i>)."""
    return kit.msg("V", f"body {i}".encode() * 3, i=i, tags=f"t{i % 2}", queues=2)


@pytest.fixture
def built(tmp_path):
    path = tmp_path / "s"
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:
        puts = [st.put_message(_nth(i)) for i in range(60)]
    return path, puts


def test_finding_shape():
    fields = [(f.name, f.type, f.default) for f in dataclasses.fields(Finding)]
    assert fields == [("kind", "str", dataclasses.MISSING), ("path", "str | None", dataclasses.MISSING),
                      ("offset", "int | None", dataclasses.MISSING), ("detail", "str", dataclasses.MISSING),
                      ("fixed", "bool", False), ("repairs", "tuple[Repair, ...]", ())]
    f = Finding("record_crc", "/x", 3, "d")
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.fixed = True  # type: ignore[misc]
    assert set(KINDS) == {"record_crc", "record_invalid", "cq_unit", "cq_gap", "index_item", "checkpoint_ahead",
                          "tail_garbage"}


def test_sound_store_has_no_findings(built):
    path, _ = built
    with MessageStore.open(path, kit.cfg(GEOMETRY), read_only=True) as ro:
        assert ro.verify() == []
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:
        assert st.verify() == [] and st.verify(fix=True) == []
        seen = []
        assert st.verify(progress=seen.append) == []
        from rmqstore.engine.verify import work_bytes
        assert seen and seen[-1] == work_bytes(st) > st.max_phy_offset - st.min_phy_offset


def test_record_crc_and_record_invalid(built):
    path, puts = built
    a, b = puts[10], puts[40]
    seg_a, pos_a = kit.segment_of(path, a.phy_offset, SEGMENT)
    seg_b, pos_b = kit.segment_of(path, b.phy_offset, SEGMENT)
    kit.patch_file(seg_a, pos_a + 90, b"\xff")          # body byte
    kit.patch_file(seg_b, pos_b + 28, b"\x7f" * 8)       # PHYSICALOFFSET
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:
        got = [(f.kind, f.path, f.offset) for f in st.verify() if f.kind.startswith("record")]
        assert got == [("record_crc", seg_a, pos_a), ("record_invalid", seg_b, pos_b)]
        out = st.verify(fix=True)
        assert all(not f.fixed for f in out if f.kind.startswith("record"))


def test_cq_unit_and_cq_gap_then_fix(built):
    path, puts = built
    cq0 = path / "consumequeue" / "V" / "0"
    first = sorted(os.listdir(cq0))[0]
    kit.patch_file(str(cq0 / first), 2 * 20 + 8, b"\x00\x00\x00\x05")   # unit 2: size
    with MessageStore.open(path, kit.cfg(GEOMETRY), read_only=True) as ro:
        # a reader of a cleanly closed store judges the queues; the damaged unit is outside its view
        # only if it is the last one, which it is not
        kinds = {(f.kind, f.path, f.offset) for f in ro.verify()}
        assert ("cq_unit", str(cq0 / first), 40) in kinds
    # consume queue 1 loses its last file: the records beyond its end have no unit
    cq1 = path / "consumequeue" / "V" / "1"
    last = sorted(os.listdir(cq1))[-1]
    os.unlink(cq1 / last)
    with MessageStore.open(path, kit.cfg(GEOMETRY), read_only=True) as ro:
        gaps = [f for f in ro.verify() if f.kind == "cq_gap"]
        assert len(gaps) == 1 and gaps[0].path.startswith(str(path / "commitlog")) and gaps[0].offset is not None
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:
        # a normal recovery re-dispatches from the end of the most advanced queue (upstream), so
        # queue 1's lost tail stays lost: upstream's gap rule would append its next unit at the
        # wrong offset, rmqstore fills the gap with blank units (the later records keep their
        # queue offsets); verify names the blank units and fix rebuilds both queues
        found = st.verify(fix=True)
        assert "cq_unit" in {f.kind for f in found} <= {"cq_unit", "cq_gap"} and all(f.fixed for f in found)
        assert st.verify() == []
        for i, r in enumerate(puts):
            g = st.get_message("t", "V", i % 2, r.queue_offset, 1)
            assert [m.phy_offset for m in g.messages] == [r.phy_offset]


def test_index_item_then_fix(built):
    path, puts = built
    idx = path / "index"
    name = sorted(os.listdir(idx))[0]
    from rmqstore.format import index_file as IF
    pos = IF.item_pos(16, 3)
    kit.patch_file(str(idx / name), pos + 4, (10**9).to_bytes(8, "big"))   # item 3 points nowhere
    stats = path / "config" / "rmqstore-index.json"
    stats.unlink()  # as in a store a Java broker closed: the open does not know the file changed
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:
        found = st.verify()
        assert ("index_item", str(idx / name), pos) in {(f.kind, f.path, f.offset) for f in found}
        assert {f.kind for f in found} == {"index_item"}
        fixed = st.verify(fix=True)
        assert fixed and all(f.fixed for f in fixed)
        assert st.verify() == []
        for i, r in enumerate(puts):
            assert [m.phy_offset for m in st.query_message("V", f"k{i}").messages] == [r.phy_offset]


def test_an_index_file_changed_since_the_clean_close_is_checked_at_open(built, caplog):
    path, puts = built
    idx = path / "index"
    name = sorted(os.listdir(idx))[0]
    from rmqstore.format import index_file as IF
    kit.patch_file(str(idx / name), IF.item_pos(16, 3) + 4, (10**9).to_bytes(8, "big"))
    assert (path / "config" / "rmqstore-index.json").exists()
    before = {n: (idx / n).read_bytes() for n in os.listdir(idx)}
    with caplog.at_level("ERROR", logger="rmqstore"):
        with MessageStore.open(path, kit.cfg(GEOMETRY), read_only=True) as ro:  # answers from a scan, writes nothing
            assert ro.derived_files_restored == ["index"]
            for i, r in enumerate(puts):
                assert [m.phy_offset for m in ro.query_message("V", f"k{i}").messages] == [r.phy_offset]
            assert {f.kind for f in ro.verify()} == {"index_item"}  # verify judges the files on disk
    assert any("changed since the last clean close and is damaged" in r.getMessage() for r in caplog.records)
    assert {n: (idx / n).read_bytes() for n in os.listdir(idx)} == before
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:  # a writer rebuilds the index
        assert st.derived_files_restored == ["index"]
        assert st.verify() == []
        for i, r in enumerate(puts):
            assert [m.phy_offset for m in st.query_message("V", f"k{i}").messages] == [r.phy_offset]
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:
        assert st.derived_files_restored == []


def test_checkpoint_ahead_then_fix(built):
    path, puts = built
    cp_path = path / "checkpoint"
    cp = CheckpointValues.unpack(cp_path.read_bytes())
    cp.confirm_phy_offset = 10**12
    cp.physic_msg_timestamp = puts[-1].store_timestamp + 10**9
    cp_path.write_bytes(cp.pack())
    with MessageStore.open(path, kit.cfg(GEOMETRY), read_only=True) as ro:
        found = ro.verify()
        assert sorted((f.kind, f.path, f.offset) for f in found) == [("checkpoint_ahead", str(cp_path), 0),
                                                                     ("checkpoint_ahead", str(cp_path), 32)]
        with pytest.raises(ReadOnlyStoreError):
            ro.verify(fix=True)
    with MessageStore.open(path, kit.cfg(GEOMETRY, flush_interval_consume_queue=3_600_000)) as st:
        assert st.verify() == []  # a writer's recovery rewrote it from the data
        cp = CheckpointValues.unpack(cp_path.read_bytes())
        cp.logics_msg_timestamp = puts[-1].store_timestamp + 5000
        cp_path.write_bytes(cp.pack())
        found = st.verify(fix=True)
        assert [(f.kind, f.offset, f.fixed) for f in found] == [("checkpoint_ahead", 8, True)]
        assert st.verify() == []
    cp = CheckpointValues.unpack(cp_path.read_bytes())
    assert cp.confirm_phy_offset <= puts[-1].phy_offset and cp.physic_msg_timestamp <= puts[-1].store_timestamp


def test_tail_garbage_on_a_writer_is_cut_by_fix(built):
    path, puts = built
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:
        end = st.max_phy_offset
        seg, pos = kit.segment_of(path, end, SEGMENT)
        kit.patch_file(seg, pos + 5, b"garbage!")
        found = st.verify()
        assert [(f.kind, f.path, f.offset) for f in found] == [("tail_garbage", seg, pos + 5)]
        out = st.verify(fix=True)
        assert [(f.kind, f.fixed) for f in out] == [("tail_garbage", True)]
        saved = os.listdir(path / "recovery")
        assert len(saved) == 1 and (path / "recovery" / saved[0]).read_bytes().endswith(b"garbage!")
        assert st.verify() == []
        assert st.put_message(_nth(99)).phy_offset == end


def test_progress_covers_every_phase(built):
    """progress(done) counts the commitlog's bytes, then the consume queues', then the index's, up
    to work_bytes(store), never backwards."""
    from rmqstore.engine.verify import work_bytes

    seen: list[int] = []
    with MessageStore.open(built[0], kit.cfg(GEOMETRY), read_only=True) as ro:
        total = work_bytes(ro)
        cl_bytes = ro.max_phy_offset - ro.min_phy_offset
        assert ro.verify(progress=seen.append) == []
    assert seen == sorted(seen) and seen[-1] == total
    assert total > cl_bytes and any(cl_bytes < x < total for x in seen)  # queue and index phases move it


def test_after_a_crash_the_files_a_writer_appended_to_are_not_judged_but_older_ones_are(built, tmp_path, caplog):
    import shutil

    from rmqstore.format import index_file as IF
    path, puts = built  # closed cleanly: config/rmqstore-index.json records every index file
    names_at_close = sorted(os.listdir(path / "index"))
    crash = tmp_path / "crash"
    with MessageStore.open(path, kit.cfg(GEOMETRY)) as st:  # a writer appends (the newest file fills, new ones follow)
        more = [st.put_message(_nth(i)) for i in range(60, 140)]
        st.wait_dispatched()
        st.index_service.flush()
        shutil.copytree(path, crash, ignore=shutil.ignore_patterns("lock"))  # abort present: a crash
    assert len(os.listdir(crash / "index")) > len(names_at_close)
    with caplog.at_level("ERROR", logger="rmqstore"):
        with MessageStore.open(crash, kit.cfg(GEOMETRY), read_only=True) as ro:  # appended files: no false alarm
            assert "index" not in ro.derived_files_restored
            for i, r in enumerate(puts + more):
                assert [m.phy_offset for m in ro.query_message("V", f"k{i}").messages] == [r.phy_offset]
    assert not any("is damaged" in r.getMessage() for r in caplog.records)
    kit.patch_file(str(crash / "index" / names_at_close[0]), IF.item_pos(16, 3) + 4, (10**9).to_bytes(8, "big"))
    with MessageStore.open(crash, kit.cfg(GEOMETRY), read_only=True) as ro:  # an older file changed: judged
        assert ro.derived_files_restored == ["index"]
        for i, r in enumerate(puts + more):
            assert [m.phy_offset for m in ro.query_message("V", f"k{i}").messages] == [r.phy_offset]
