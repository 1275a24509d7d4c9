"""Recovery as plan, then apply (``rmqstore.engine.recovery.plan`` / ``.apply``): the plan a
read-only open computes is the plan a writable open applies; a read-only open changes no byte of
the store; the plan for a clean shutdown, a crash (abort file) and a torn tail says what it should."""
from __future__ import annotations

import dataclasses
import os
import shutil

import pytest

from rmqstore import MessageStore
from rmqstore.engine import recovery as R
from rmqstore.engine.checkpoint import StoreCheckpoint
from rmqstore.io import paths
from tests import kit

N = 40


def _build(path, cfg) -> list:
    """A store closed cleanly after ``N`` messages over two queues (several commitlog segments)."""
    with MessageStore.open(path, cfg) as st:
        puts = [st.put_message(kit.msg("Plan", f"message {i:04d} ".encode() * 3, i=i, tags="T", queues=2))
                for i in range(N)]
        st.wait_dispatched(timeout=10)
    return puts


def _crash(path) -> None:
    with open(paths.abort_path(str(path)), "w") as fh:
        fh.write("1")


def _tear(path, cfg, put, zeros: int = 16) -> None:
    """Zero the last ``zeros`` bytes of the record ``put`` wrote (a torn write)."""
    seg, pos = kit.segment_of(path, put.phy_offset, cfg.mapped_file_size_commit_log)
    kit.patch_file(seg, pos + put.wrote_bytes - zeros, bytes(zeros))


def _plans(path, cfg) -> tuple[R.RecoveryPlan, R.RecoveryPlan, MessageStore]:
    """(read-only plan, writable plan, the writable store still open); checks on the way that the
    read-only open left every byte as it was."""
    before = kit.tree_hashes(path)
    with MessageStore.open(path, cfg, read_only=True) as ro:
        ro_plan = ro.recovery_plan
        assert ro.recovery_report.applied is False
    assert kit.tree_hashes(path) == before, "a read-only open changed the store"
    st = MessageStore.open(path, cfg)
    return ro_plan, st.recovery_plan, st


@pytest.fixture
def cfg():
    return kit.cfg(flush_disk_type="SYNC_FLUSH")


def test_clean_shutdown_plan_cuts_nothing(tmp_path, cfg):
    path = tmp_path / "s"
    puts = _build(path, cfg)
    end = puts[-1].phy_offset + puts[-1].wrote_bytes
    ro_plan, plan, st = _plans(path, cfg)
    with st:
        assert plan == ro_plan
        assert plan.mode == "normal" and not plan.abnormal
        assert (plan.end_offset, plan.records, plan.last_valid_offset) == (end, plan.records, puts[-1].phy_offset)
        assert plan.cuts == () and plan.corrupt == () and plan.queue_cuts == () and plan.index_cuts == ()
        assert plan.redispatch_from == end  # every record was dispatched
        assert st.recovery_report.clean and st.recovery_report.records_redispatched == 0
        assert {(t, q): n for t, q, n in plan.queue_ends} == {("Plan", 0): N // 2, ("Plan", 1): N // 2}


@pytest.mark.parametrize("index_flushed", [False, True])
def test_crash_plan_redispatches_from_the_start_segment(tmp_path, cfg, index_flushed):
    path = tmp_path / "s"
    puts = _build(path, cfg)
    end = puts[-1].phy_offset + puts[-1].wrote_bytes
    _crash(path)
    if index_flushed:  # the checkpoint covers every index file: none is dropped, the newest is still cut
        cp_path = paths.checkpoint_path(str(path))
        values = dataclasses.replace(StoreCheckpoint.read_file(cp_path), index_msg_timestamp=1 << 62)
        with open(cp_path, "r+b") as fh:
            fh.write(values.pack())
    newest_index = sorted(os.listdir(paths.index_dir(str(path))))[-1]
    ro_plan, plan, st = _plans(path, cfg)
    with st:
        assert plan == ro_plan
        assert plan.mode == "abnormal" and plan.abnormal
        assert plan.end_offset == end and plan.cuts == ()
        # the checkpoint's times are all within 3 s of the records: the scan starts at the first segment
        assert plan.start_offset == 0 and plan.redispatch_from == 0 and plan.queue_cut_to == 0
        assert sorted(plan.queue_cuts) == [("Plan", 0, 0), ("Plan", 1, 0)]
        assert newest_index in plan.index_cuts  # it can hold a half-written put
        if index_flushed:
            assert plan.index_dropped == () and plan.index_cuts == (newest_index,)
        rep = st.recovery_report
        assert rep.mode == "abnormal" and rep.applied and rep.redispatch_from == 0
        assert rep.records_redispatched == N
        assert st.get_max_offset_in_queue("Plan", 0) == N // 2
        assert [m.queue_offset for m in st.query_message("Plan", f"k{N - 1}").messages] == [puts[-1].queue_offset]


@pytest.mark.parametrize("crashed", [False, True])
def test_torn_tail_plan_cuts_the_last_record(tmp_path, cfg, crashed):
    path = tmp_path / "s"
    puts = _build(path, cfg)
    last = puts[-1]
    _tear(path, cfg, last)
    if crashed:
        _crash(path)
    ro_plan, plan, st = _plans(path, cfg)
    with st:
        assert plan == ro_plan
        assert plan.mode == ("abnormal" if crashed else "normal")
        assert plan.end_offset == last.phy_offset
        assert plan.records == sum(plan.start_offset <= p.phy_offset for p in puts[:-1])
        assert plan.last_valid_offset == puts[-2].phy_offset
        (cut,) = plan.cuts
        assert (cut.offset, cut.length, cut.saved_to) == (last.phy_offset, last.wrote_bytes - 16, None)
        assert "incomplete" in plan.end_reason
        if crashed:
            assert sorted(plan.queue_cuts) == [("Plan", 0, 0), ("Plan", 1, 0)]
        else:
            # only the torn record's unit points at or past the end of valid data
            assert plan.queue_cuts == (("Plan", (N - 1) % 2, last.queue_offset),)
            assert plan.queue_cut_to == plan.end_offset
        rep = st.recovery_report
        assert [(c.offset, c.length) for c in rep.cuts] == [(c.offset, c.length) for c in plan.cuts]
        assert rep.cuts[0].saved_to and os.path.exists(rep.cuts[0].saved_to)
        assert st.max_phy_offset == plan.end_offset
        assert st.get_max_offset_in_queue("Plan", (N - 1) % 2) == last.queue_offset
        assert st.look_message_by_offset(last.phy_offset) is None
    # applied: the next open finds nothing to do, and a read-only open agrees
    with MessageStore.open(path, cfg, read_only=True) as ro:
        assert ro.recovery_plan.cuts == () and ro.recovery_plan.queue_cuts == ()


def test_a_plan_applied_by_a_writer_leaves_the_files_a_second_writer_plans_nothing_for(tmp_path, cfg):
    """The writer applies exactly its plan: a copy of the damaged store opened read-only again
    after the writer's recovery plans no cut (what was planned was done)."""
    path = tmp_path / "s"
    puts = _build(path, cfg)
    _tear(path, cfg, puts[-1], zeros=40)
    _crash(path)
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    with MessageStore.open(copy, cfg, read_only=True) as ro:
        planned = ro.recovery_plan
    with MessageStore.open(path, cfg) as st:
        assert st.recovery_plan == planned
    with MessageStore.open(path, cfg, read_only=True) as ro:
        again = ro.recovery_plan
    assert again.mode == "normal" and again.cuts == () and again.queue_cuts == () and again.corrupt == ()
    assert again.end_offset == planned.end_offset


def test_empty_store_plan(tmp_path, cfg):
    path = tmp_path / "s"
    with MessageStore.open(path, cfg) as st:
        plan = st.recovery_plan
    assert plan.mode == "empty" and plan.end_offset == 0 and plan.records == 0 and plan.redispatch_from == 0
    assert "empty recovery plan" in plan.describe()
